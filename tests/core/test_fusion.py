"""Fusion as declared patterns in the core (glow_core.fusion): activations folded into conv/matmul when the
backend supports the pair, shown by ``glowc dump --ir``, checked against onnxruntime, and exact (a fused CPU
kernel gives the bits of the unfused primitives)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import glow_core
from glow_core.backend import Backend
from glow_core.fusion import ACTIVATIONS, FUSED_ACTIVATION, FUSED_PARAMS, fuse_activations
from glow_core.importer.onnx_import import import_model
from glow_core.lower import lower
from glow_core.verify import verify_function
from glow_cpu.backend import CPUBackend
from glow_interpreter.backend import InterpreterBackend

needs_cc = pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None
                              and not os.environ.get("CC"), reason="no C compiler")

F32 = TensorProto.FLOAT


def conv_relu_matmul_clip(dtype=F32, np_dtype=np.float32, seed=0):
    """x -> Conv(3->8, 3x3, pad 1) -> Relu -> Flatten -> MatMul(8*6*6 -> 16) -> Clip(0, 6) -> y."""
    rng = np.random.default_rng(seed)
    inits = [numpy_helper.from_array((0.3 * rng.standard_normal((8, 3, 3, 3))).astype(np_dtype), "w"),
             numpy_helper.from_array((0.1 * rng.standard_normal(8)).astype(np_dtype), "b"),
             numpy_helper.from_array((0.1 * rng.standard_normal((288, 16))).astype(np_dtype), "fc"),
             numpy_helper.from_array(np.array(0, np_dtype), "lo"), numpy_helper.from_array(np.array(6, np_dtype), "hi"),
             numpy_helper.from_array(np.array([1, 288], np.int64), "flat")]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], name="conv"),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("Reshape", ["r", "flat"], ["f"], name="flatten"),
             helper.make_node("MatMul", ["f", "fc"], ["m"], name="fc"),
             helper.make_node("Clip", ["m", "lo", "hi"], ["y"], name="clip")]
    g = helper.make_graph(nodes, "fuse", [helper.make_tensor_value_info("x", dtype, [1, 3, 6, 6])],
                          [helper.make_tensor_value_info("y", dtype, [1, 16])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def activation_model(act, producer="conv", second_user=False, seed=1, dtype=F32, npd=np.float32):
    """A conv (4->8, 3x3, im2col + GEMM), a depthwise conv (4 channels) or a matmul (32x48 @ 48x40, the GEMM)
    followed by activation ``act`` (an ONNX op with attrs); ``second_user`` also returns the producer's result,
    so the activation must stay separate."""
    rng = np.random.default_rng(seed)
    op, attrs = act
    if producer in ("conv", "depthwise"):
        f, cin, group = (8, 4, 1) if producer == "conv" else (4, 1, 4)
        inits = [numpy_helper.from_array((0.4 * rng.standard_normal((f, cin, 3, 3))).astype(npd), "w"),
                 numpy_helper.from_array((0.1 * rng.standard_normal(f)).astype(npd), "b")]
        prod = helper.make_node("Conv", ["x", "w", "b"], ["p"], pads=[1, 1, 1, 1], group=group, name="producer")
        xs, ys = [1, 4, 10, 10], [1, f, 10, 10]
    else:
        inits = [numpy_helper.from_array((0.3 * rng.standard_normal((48, 40))).astype(npd), "w")]
        prod = helper.make_node("MatMul", ["x", "w"], ["p"], name="producer")
        xs, ys = [32, 48], [32, 40]
    outs = [helper.make_tensor_value_info("y", dtype, ys)]
    if second_user:
        outs.append(helper.make_tensor_value_info("p", dtype, ys))
    g = helper.make_graph([prod, helper.make_node(op, ["p"], ["y"], name="act", **attrs)], "act",
                          [helper.make_tensor_value_info("x", dtype, xs)], outs, inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m, xs


def ort_run(model, feed):
    s = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in s.get_outputs()], s.run(None, feed)))


class NoFusionCPU(CPUBackend):
    """The CPU backend with every fusion refused (the reference for exactness)."""

    name = "cpu_nofusion"

    def supports_fused_activation(self, op, activation):
        return False


def fused(ir):
    return [(i.op, i.attrs.get(FUSED_ACTIVATION), i.attrs.get(FUSED_PARAMS)) for i in ir.code
            if i.op in ("conv", "matmul")]


@needs_cc
def test_conv_relu_and_matmul_clip_fused_on_cpu_match_onnxruntime(tmp_path):
    model = conv_relu_matmul_clip()
    path = tmp_path / "m.onnx"
    path.write_bytes(model.SerializeToString())
    r = subprocess.run([sys.executable, "-m", "glow_tools.cli", "dump", str(path), "--backend", "cpu", "--ir"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    conv_line = next(ln for ln in r.stdout.splitlines() if "= conv @out" in ln)
    mm_line = next(ln for ln in r.stdout.splitlines() if "= matmul @out" in ln)
    assert "_fused_activation: relu" in conv_line
    assert "_fused_activation: clip" in mm_line and "_fused_params: {min: 0.0, max: 6.0}" in mm_line
    assert not any(f"= {op} @out" in r.stdout for op in ("max", "min", "broadcast"))
    x = np.random.default_rng(2).standard_normal((1, 3, 6, 6)).astype(np.float32) * 3
    cm = glow_core.compile(model, "cpu", num_threads=1)
    got = cm.run({"x": x})["y"]
    want = ort_run(model, {"x": x})["y"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert 0 < (got == 6).sum() and 0 < (got == 0).sum()  # both bounds of the clip are reached


def test_backend_without_fusion_keeps_the_activation_instructions():
    model = conv_relu_matmul_clip()
    assert Backend.supports_fused_activation(InterpreterBackend(), "conv", "relu") is False
    ir = glow_core.compile(model, "interpreter").ir
    assert fused(ir) == [("conv", None, None), ("matmul", None, None)]
    ops = [i.op for i in ir.code]
    assert "max" in ops and "min" in ops


@needs_cc
def test_activation_with_a_second_user_of_its_input_is_not_fused():
    model, xs = activation_model(("Relu", {}), second_user=True)
    cm = glow_core.compile(model, "cpu", num_threads=1)
    assert fused(cm.ir) == [("conv", None, None)]
    assert "max" in [i.op for i in cm.ir.code]
    x = np.random.default_rng(3).standard_normal(xs).astype(np.float32)
    got, want = cm.run({"x": x}), ort_run(model, {"x": x})
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-5)


CASES = [(("Relu", {}), "relu", {}), (("Clip", {}), None, None), (("Sigmoid", {}), "sigmoid", {}),
         (("Tanh", {}), "tanh", {}), (("LeakyRelu", {"alpha": 0.2}), "leaky_relu", {"alpha": 0.2})]


@needs_cc
@pytest.mark.parametrize("producer", ["conv", "depthwise", "matmul"])
@pytest.mark.parametrize("act,name,params", CASES, ids=[c[0][0] for c in CASES])
def test_each_activation_fused_exactly(producer, act, name, params):
    """Every declared activation after conv, depthwise conv and matmul: fused on the CPU backend, equal to
    onnxruntime, and bit-equal to the unfused CPU kernels. (A Clip without bounds lowers to nothing.)"""
    model, xs = activation_model(act, producer)
    x = np.random.default_rng(4).standard_normal(xs).astype(np.float32) * 2
    cm = glow_core.compile(model, "cpu", num_threads=1)
    want_params = None if params is None else {k: pytest.approx(v) for k, v in params.items()}
    op = "matmul" if producer == "matmul" else "conv"
    assert fused(cm.ir) == [(op, name, want_params)]
    got = cm.run({"x": x})["y"]
    np.testing.assert_allclose(got, ort_run(model, {"x": x})["y"], rtol=1e-5, atol=1e-5)
    plain = glow_core.compile(model, NoFusionCPU(), num_threads=1)
    assert fused(plain.ir) == [(op, None, None)]
    np.testing.assert_array_equal(got, plain.run({"x": x})["y"])


def silu_model(producer, sigmoid_first):
    """``activation_model``'s producer followed by SiLU as torch exports it: Mul(p, Sigmoid(p)) (or the operands
    swapped)."""
    model, xs = activation_model(("Sigmoid", {}), producer)
    g = model.graph
    g.node[1].output[0] = "s"
    g.node.append(helper.make_node("Mul", ["s", "p"] if sigmoid_first else ["p", "s"], ["y"], name="silu"))
    return model, xs


@needs_cc
@pytest.mark.parametrize("producer", ["conv", "depthwise", "matmul"])
@pytest.mark.parametrize("sigmoid_first", [False, True], ids=["x_sigmoid", "sigmoid_x"])
def test_silu_fused_exactly(producer, sigmoid_first):
    """x * Sigmoid(x) in either operand order is one fused silu: the conv engine's in-register epilogue (conv),
    the depthwise and GEMM epilogues; equal to onnxruntime and bit-equal to the unfused sigmoid and mul, with
    inputs spanning the float range (large |x|, infinities, NaN, -0, subnormals)."""
    model, xs = silu_model(producer, sigmoid_first)
    rng = np.random.default_rng(7)
    x = (rng.standard_normal(xs) * 4).astype(np.float32)
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-40, -1e-40, 88.0, -88.0, 100.0, -104.0, -150.0,
                         3e38, -3e38], np.float32)
    x.reshape(-1)[:specials.size] = specials
    cm = glow_core.compile(model, "cpu", num_threads=1)
    op = "matmul" if producer == "matmul" else "conv"
    assert fused(cm.ir) == [(op, "silu", {})]
    choices = {c.code.choice for c in cm.last.compiled.program.calls}
    if producer == "conv":
        assert any(c.startswith("conv engine") and c.endswith("silu fused in registers") for c in choices), choices
    got = cm.run({"x": x})["y"]
    plain = glow_core.compile(model, NoFusionCPU(), num_threads=1)
    np.testing.assert_array_equal(got, plain.run({"x": x})["y"])
    want = ort_run(model, {"x": x})["y"]
    finite = np.isfinite(want) & np.isfinite(got)
    np.testing.assert_allclose(got[finite], want[finite], rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))


@needs_cc
@pytest.mark.parametrize("producer", ["conv", "matmul"])
@pytest.mark.parametrize("act", [("Relu", {}), ("Sigmoid", {})], ids=["Relu", "Sigmoid"])
def test_float16_fused_after_rounding(producer, act):
    """float16 conv and a float16 matmul large enough for the converted GEMM: the activation applies to the
    rounded float16 result, as the separate primitive would."""
    model, xs = activation_model(act, producer, dtype=TensorProto.FLOAT16, npd=np.float16)
    x = (np.random.default_rng(6).standard_normal(xs) * 2).astype(np.float16)
    cm = glow_core.compile(model, "cpu", num_threads=1)
    assert [f[1] for f in fused(cm.ir)] == [act[0].lower()]
    plain = glow_core.compile(model, NoFusionCPU(), num_threads=1)
    np.testing.assert_array_equal(cm.run({"x": x})["y"], plain.run({"x": x})["y"])


@needs_cc
@pytest.mark.parametrize("dt,npd", [(TensorProto.FLOAT16, np.float16), (TensorProto.DOUBLE, np.float64)])
def test_fused_kernels_in_other_float_types_are_exact(dt, npd):
    """float16 (converted GEMM, fused after rounding) and float64 (the f64 GEMM's epilogue)."""
    model = conv_relu_matmul_clip(dt, npd)
    x = (np.random.default_rng(5).standard_normal((1, 3, 6, 6)) * 3).astype(npd)
    cm = glow_core.compile(model, "cpu", num_threads=1)
    assert [f[1] for f in fused(cm.ir)] == ["relu", "clip"]
    plain = glow_core.compile(model, NoFusionCPU(), num_threads=1)
    np.testing.assert_array_equal(cm.run({"x": x})["y"], plain.run({"x": x})["y"])
    want = glow_core.compile(model, "interpreter").run({"x": x})["y"]
    np.testing.assert_allclose(cm.run({"x": x})["y"].astype(np.float64), want.astype(np.float64),
                               rtol=1e-2 if npd == np.float16 else 1e-12, atol=1e-2 if npd == np.float16 else 1e-12)


def gelu_nodes(src, out, form):
    """GELU of ``src`` written with ONNX primitives as transformers export it: (x * 0.5) * (erf(x * 1/sqrt 2) + 1)
    ("erf"), (x * (erf(x / sqrt 2) + 1)) * 0.5 ("erf_div", torch's TorchScript exporter) or (x * 0.5) *
    (tanh((x + x^3 * 0.044715) * sqrt(2/pi)) + 1) ("tanh"), x * (0.5 * (erf(x / sqrt 2) + 1)) ("erf_half", torch's
    dynamo exporter before opset 20), and its constants."""
    k = {"erf": 1 / np.sqrt(2), "erf_div": np.sqrt(2), "erf_half": np.sqrt(2), "tanh": np.sqrt(2 / np.pi)}[form]
    consts = [numpy_helper.from_array(np.array(v, np.float32), name) for name, v in
              (("half", 0.5), ("one", 1.0), ("k", k), ("cube", 0.044715))]
    mk = helper.make_node
    if form == "erf_div":
        return [mk("Div", [src, "k"], ["g_s"]), mk("Erf", ["g_s"], ["g_t"]), mk("Add", ["g_t", "one"], ["g_1"]),
                mk("Mul", [src, "g_1"], ["g_m"]), mk("Mul", ["g_m", "half"], [out])], consts
    if form == "erf_half":
        return [mk("Div", [src, "k"], ["g_s"]), mk("Erf", ["g_s"], ["g_t"]), mk("Add", ["g_t", "one"], ["g_1"]),
                mk("Mul", ["half", "g_1"], ["g_m"]), mk("Mul", [src, "g_m"], [out])], consts
    if form == "erf":
        nodes = [mk("Mul", [src, "k"], ["g_s"]), mk("Erf", ["g_s"], ["g_t"])]
    else:
        nodes = [mk("Mul", [src, src], ["g_sq"]), mk("Mul", ["g_sq", src], ["g_cu"]),
                 mk("Mul", ["g_cu", "cube"], ["g_c"]),
                 mk("Add", [src, "g_c"], ["g_in"]), mk("Mul", ["g_in", "k"], ["g_s"]), mk("Tanh", ["g_s"], ["g_t"])]
    nodes += [mk("Add", ["g_t", "one"], ["g_1"]), mk("Mul", [src, "half"], ["g_h"]), mk("Mul", ["g_h", "g_1"], [out])]
    return nodes, consts


def gelu_model(producer, form):
    """``activation_model``'s producer (or a bias add of two inputs: "add") followed by GELU (``gelu_nodes``)."""
    if producer == "add":
        model = add_activation_model(("Relu", {}), shape=(4, 197))
    else:
        model, _ = activation_model(("Relu", {}), producer)
    g = model.graph
    src = g.node[-1].input[0]
    del g.node[-1]
    nodes, consts = gelu_nodes(src, "y", form)
    g.node.extend(nodes)
    g.initializer.extend(consts)
    return model


@needs_cc
@pytest.mark.parametrize("producer", ["conv", "depthwise", "matmul", "add"])
@pytest.mark.parametrize("form", ["erf", "erf_div", "erf_half", "tanh"])
def test_gelu_fused_exactly(producer, form):
    """GELU written with Erf (or Tanh) after conv, depthwise conv, matmul (the GEMM's epilogue) and a bias add is
    one fused gelu_erf / gelu_erf_div / gelu_tanh with its constants as parameters: close to onnxruntime and to
    the unfused CPU primitives over inputs spanning the float range (large |x|, infinities, NaN, -0,
    subnormals); the erf forms bit-equal to them, the tanh form up to the C compiler's contraction of its
    x + x^3 * 0.044715 into a multiply-add (which 1 + tanh amplifies where it cancels, below x = -2)."""
    model = gelu_model(producer, form)
    feeds = {i.name: [d.dim_value for d in i.type.tensor_type.shape.dim] for i in model.graph.input}
    rng = np.random.default_rng(11)
    feed = {k: (rng.standard_normal(v) * 3).astype(np.float32) for k, v in feeds.items()}
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-40, -1e-40, 3.9, -3.9, 10.0, -10.0, 0.921875,
                         -0.921875, 3e38, -3e38], np.float32)
    feed["x" if "x" in feed else "a"].reshape(-1)[:specials.size] = specials
    cm = glow_core.compile(model, "cpu", num_threads=1)
    name = "gelu_" + form
    k = np.float32({"erf": 1 / np.sqrt(2), "erf_div": np.sqrt(2), "erf_half": np.sqrt(2),
                    "tanh": np.sqrt(2 / np.pi)}[form])
    want_params = {"divisor" if form in ("erf_div", "erf_half") else "scale": pytest.approx(float(k), rel=0, abs=0)}
    if form == "tanh":
        want_params["cube"] = pytest.approx(float(np.float32(0.044715)), rel=0, abs=0)
    if producer == "add":
        assert fused_adds(cm.ir) == [(name, want_params)]
    else:
        assert fused(cm.ir) == [("matmul" if producer == "matmul" else "conv", name, want_params)]
    assert not any(i.op in ("erf", "tanh", "mul", "div") for i in cm.ir.code)
    got = cm.run(feed)["y"]
    unfused = glow_core.compile(model, NoFusionCPU(), num_threads=1).run(feed)["y"]
    if form != "tanh":
        np.testing.assert_array_equal(got, unfused)
    else:
        np.testing.assert_allclose(got, unfused, rtol=1e-6, atol=1e-6)
    with np.errstate(invalid="ignore", over="ignore"):
        want = ort_run(model, feed)["y"]
    finite = np.isfinite(want) & np.isfinite(got) & (np.abs(want) < 1e30)
    np.testing.assert_allclose(got[finite], want[finite], rtol=1e-5, atol=1e-6)


def test_patterns_are_declared_as_data():
    names = [p.name for p in ACTIVATIONS]
    assert {"relu", "clip", "silu", "sigmoid", "tanh", "leaky_relu", "gelu_erf", "gelu_erf_div", "gelu_erf_half",
            "gelu_tanh"} <= set(names)
    # clip is tried before relu: relu6 (clip 0..6) is one fused clip, not a relu and a separate min
    assert names.index("clip") < names.index("relu")


def test_only_the_pairs_a_backend_lists_are_fused():
    """The core asks supports_fused_activation for each (producer, activation) it finds, and folds only those."""
    fn = import_model(conv_relu_matmul_clip())
    lower(fn)
    asked = []

    def supports(op, act):
        asked.append((op, act))
        return (op, act) == ("matmul", "clip")
    n_before = len(fn.nodes)
    assert fuse_activations(fn, supports) == 1
    assert ("conv", "relu") in asked and ("matmul", "clip") in asked
    by_op = {n.op: n for n in fn.nodes}
    assert FUSED_ACTIVATION not in by_op["conv"].attrs and "max" in by_op
    assert by_op["matmul"].attrs[FUSED_ACTIVATION] == "clip"
    assert by_op["matmul"].attrs[FUSED_PARAMS] == {"min": 0.0, "max": 6.0}
    assert by_op["matmul"].outputs[0] is fn.outputs[0]  # the matmul now computes the clip's output
    assert len(fn.nodes) == n_before - 2  # max and min of the clip
    verify_function(fn)


def add_activation_model(act, dtype=F32, shape=(2, 8, 5, 5)):
    """y = act(a + b): a residual add of two inputs (the ResNet block's tail) followed by activation ``act``."""
    op, attrs = act
    g = helper.make_graph([helper.make_node("Add", ["a", "b"], ["s"], name="residual"),
                           helper.make_node(op, ["s"], ["y"], name="act", **attrs)], "add_act",
                          [helper.make_tensor_value_info(n, dtype, list(shape)) for n in ("a", "b")],
                          [helper.make_tensor_value_info("y", dtype, list(shape))])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def fused_adds(ir):
    return [(i.attrs.get(FUSED_ACTIVATION), i.attrs.get(FUSED_PARAMS)) for i in ir.code if i.op == "add"]


@needs_cc
@pytest.mark.parametrize("act,name,params", CASES, ids=[c[0][0] for c in CASES])
def test_residual_add_absorbs_the_activation_exactly(act, name, params):
    """add + activation is one elementwise loop on the CPU backend (no splat of zeros, no second pass): equal to
    onnxruntime and bit-equal to the unfused kernels."""
    model = add_activation_model(act)
    rng = np.random.default_rng(7)
    feed = {k: (rng.standard_normal((2, 8, 5, 5)) * 2).astype(np.float32) for k in ("a", "b")}
    cm = glow_core.compile(model, "cpu", num_threads=1)
    want_params = None if params is None else {k: pytest.approx(v) for k, v in params.items()}
    assert fused_adds(cm.ir) == [(name, want_params)]
    if name is not None:
        assert not any(i.op in ("max", "broadcast", "sigmoid", "tanh", "select") for i in cm.ir.code)
    got = cm.run(feed)["y"]
    np.testing.assert_allclose(got, ort_run(model, feed)["y"], rtol=1e-5, atol=1e-5)
    plain = glow_core.compile(model, NoFusionCPU(), num_threads=1)
    assert fused_adds(plain.ir) == [(None, None)]
    np.testing.assert_array_equal(got, plain.run(feed)["y"])


@needs_cc
@pytest.mark.parametrize("dt,npd", [(TensorProto.FLOAT16, np.float16), (TensorProto.INT32, np.int32)])
def test_fused_add_relu_in_other_dtypes_is_exact(dt, npd):
    """float16 (relu of the rounded sum) and int32 (wrapping add, then relu) as the separate primitives."""
    model = add_activation_model(("Relu", {}), dt)
    rng = np.random.default_rng(8)
    feed = {k: (rng.standard_normal((2, 8, 5, 5)) * 100).astype(npd) for k in ("a", "b")}
    if npd == np.int32:
        feed["a"][0, 0, 0, :2] = [2 ** 31 - 1, -2 ** 31]  # wraps to negative / stays negative
        feed["b"][0, 0, 0, :2] = [5, -5]
    cm = glow_core.compile(model, "cpu", num_threads=1)
    assert fused_adds(cm.ir) == [("relu", {})]
    got = cm.run(feed)["y"]
    want = np.maximum((feed["a"].astype(np.float32 if npd == np.float16 else np.int64) + feed["b"]).astype(npd), 0)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got, glow_core.compile(model, NoFusionCPU(), num_threads=1).run(feed)["y"])


@needs_cc
def test_gemm_bias_relu_adds_in_one_pass_without_a_zero_splat():
    """Gemm + Relu lowers to matmul, add of the broadcast bias, max against zeros: the add absorbs the relu."""
    rng = np.random.default_rng(9)
    inits = [numpy_helper.from_array(rng.standard_normal((16, 24)).astype(np.float32), "w"),
             numpy_helper.from_array(rng.standard_normal(16).astype(np.float32), "b")]
    g = helper.make_graph([helper.make_node("Gemm", ["x", "w", "b"], ["h"], transB=1, name="fc"),
                           helper.make_node("Relu", ["h"], ["y"], name="relu")], "fc_relu",
                          [helper.make_tensor_value_info("x", F32, [8, 24])],
                          [helper.make_tensor_value_info("y", F32, [8, 16])], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    cm = glow_core.compile(model, "cpu", num_threads=1)
    assert fused_adds(cm.ir) == [("relu", {})]
    assert "max" not in [i.op for i in cm.ir.code]
    x = rng.standard_normal((8, 24)).astype(np.float32)
    np.testing.assert_allclose(cm.run({"x": x})["y"], ort_run(model, {"x": x})["y"], rtol=1e-5, atol=1e-5)
