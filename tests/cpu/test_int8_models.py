"""Quantized models end to end on the CPU backend: bit-exact with the reference interpreter (whose integer kernels
are the specification, checked against independent oracles by the quantized-int8 conformance profile), for a
model quantized by Glow Kit from a profile and for a QDQ model written by onnxruntime's quantize_static; the
integer work runs on the int8 engine (not on float emulation), with its weights packed at compile time."""
from __future__ import annotations

import os
import shutil
import subprocess

import numpy as np
import onnx
import pytest

import glow_core
from glow_conformance import example_models
from glow_core.quantization import profile

ort_quant = pytest.importorskip("onnxruntime.quantization")


@pytest.fixture(scope="module")
def small_resnet():
    """A residual CNN (7 convs, 3 residual adds, BatchNorm folded) and 4 calibration inputs, 1 test input."""
    model = example_models.resnet(seed=3, size=12, widths=(8, 16), blocks=1, batchnorm=False)
    vi = model.graph.input[0]
    shape = [d.dim_value for d in vi.type.tensor_type.shape.dim]
    rng = np.random.default_rng(0)
    samples = [{vi.name: rng.standard_normal(shape).astype(np.float32)} for _ in range(4)]
    x = {vi.name: rng.standard_normal(shape).astype(np.float32)}
    return model, samples, x


def _engine_kernels(result) -> list[str]:
    return [c.code.choice for c in result.compiled.program.calls if c.instr.op.startswith("q")]


def _check(model, x, **options):
    ref = glow_core.compile(model, "interpreter", **options)
    cpu = glow_core.compile(model, "cpu", num_threads=2, **options)
    want, got = ref.run(x), cpu.run(x)
    for k in want:
        assert got[k].dtype == want[k].dtype
        assert np.array_equal(got[k], want[k]), f"{k}: {np.abs(got[k] - want[k]).max()} max difference"
    res = cpu.last
    ops = [i.op for i in res.ir.code]
    assert ops.count("qconv") >= 5 and "qadd" in ops, ops
    assert not res.stats["quantization"]["emulated"]
    choices = _engine_kernels(res)
    assert any(c.startswith("int8 conv 3x3") for c in choices), choices
    # every residual add of these networks follows its conv at once: fused into the conv's epilogue
    assert any(c.startswith("int8 conv") and "residual add" in c for c in choices), choices
    assert any(c.startswith("computed in the epilogue of the qconv") for c in choices), choices
    return res


@pytest.mark.parametrize("per_channel", [False, True])
def test_profile_quantized_model_bit_exact(small_resnet, per_channel):
    model, samples, x = small_resnet
    res = _check(model, x, quantize=profile(model, samples), per_channel=per_channel)
    # packed weights, corrections and multipliers are constants placed at compile time
    assert res.compiled.program.derived


def test_onnxruntime_qdq_model_bit_exact(small_resnet, tmp_path):
    model, samples, x = small_resnet
    src, dst = os.path.join(tmp_path, "f.onnx"), os.path.join(tmp_path, "q.onnx")
    onnx.save(model, src)

    class Reader(ort_quant.CalibrationDataReader):
        def __init__(self):
            self.it = iter(samples)

        def get_next(self):
            return next(self.it, None)
    ort_quant.quantize_static(src, dst, Reader(), quant_format=ort_quant.QuantFormat.QDQ, per_channel=True,
                              activation_type=ort_quant.QuantType.QUInt8, weight_type=ort_quant.QuantType.QInt8)
    _check(onnx.load(dst), x)


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_quantized_bundle_runs_without_python(small_resnet, tmp_path):
    """A bundle (one translation unit, -O2 without -march=native: the engine's portable C path on the same
    packed layout) computes what the interpreter computes, bit for bit."""
    model, samples, x = small_resnet
    prof = profile(model, samples)
    cm = glow_core.compile(model, "cpu", num_threads=1, quantize=prof, per_channel=True)
    out = tmp_path / "bundle"
    cm.backend.emit_bundle(cm.last.ir, str(out), {"bundle_name": "qnet"})
    r = subprocess.run(["make", "-C", str(out)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    (name, value), = x.items()
    (tmp_path / "x.bin").write_bytes(value.tobytes())
    res = tmp_path / "res"
    res.mkdir()
    r = subprocess.run([str(out / "bundle_main"), str(out / "qnet.weights.bin"), str(tmp_path / "x.bin"), str(res)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    want = glow_core.compile(model, "interpreter", quantize=prof, per_channel=True).run(x)
    for k, v in want.items():
        got = np.frombuffer((res / f"{k}.bin").read_bytes(), v.dtype).reshape(v.shape)
        assert np.array_equal(got, v), k


@pytest.mark.parametrize("num_threads", [1, 2])
def test_int16_quantized_model_runs_integer_kernels_bit_exact(small_resnet, num_threads):
    """precision=int16: the convs, the residual adds and the fc run on the CPU backend as int16 primitives
    (int64 accumulators, none left in float), bit-exact with the interpreter."""
    model, samples, x = small_resnet
    opts = dict(quantize=profile(model, samples), precision="int16", per_channel=True)
    want = glow_core.compile(model, "interpreter", **opts).run(x)
    cpu = glow_core.compile(model, "cpu", num_threads=num_threads, **opts)
    got = cpu.run(x)
    for k in want:
        assert got[k].dtype == want[k].dtype and np.array_equal(got[k], want[k]), k
    res = cpu.last
    assert res.stats["quantization"]["float_nodes"] == []
    q = {i.op: i.ins[0].type.dtype.name for i in res.ir.code if i.op in ("qconv", "qadd", "qmatmul")}
    assert q == {"qconv": "int16", "qadd": "int16", "qmatmul": "int16"}, q
    choices = _engine_kernels(res)
    assert any(c.startswith("int64 loops (requantized; int16 operands)") for c in choices), choices


@pytest.mark.parametrize("shortcut_first", [True, False])
def test_residual_add_fused_either_operand_order(shortcut_first):
    """Add(x, conv(x)) and Add(conv(x), x), then Relu, quantized from a profile: the add runs in the conv's
    epilogue (the conv output as the add's second or first operand) and the result is the interpreter's."""
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(5)
    w = numpy_helper.from_array((rng.standard_normal((8, 8, 3, 3)) * 0.2).astype(np.float32), "w")
    bias = numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "bias")
    add_in = ["x", "c"] if shortcut_first else ["c", "x"]
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w", "bias"], ["c"], pads=[1, 1, 1, 1]),
         helper.make_node("Add", add_in, ["s"]), helper.make_node("Relu", ["s"], ["y"])],
        "residual", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 11, 13])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 11, 13])], [w, bias])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    samples = [{"x": rng.standard_normal((1, 8, 11, 13)).astype(np.float32)} for _ in range(4)]
    x = {"x": rng.standard_normal((1, 8, 11, 13)).astype(np.float32)}
    prof = profile(model, samples)
    want = glow_core.compile(model, "interpreter", quantize=prof).run(x)["y"]
    for nt in (1, 2):
        cpu = glow_core.compile(model, "cpu", quantize=prof, num_threads=nt)
        got = cpu.run(x)["y"]
        assert np.array_equal(got, want), f"{np.abs(got - want).max()} max difference"
        slots = [c.instr.attrs["residual"]["conv_slot"] for c in cpu.last.compiled.program.calls
                 if "residual" in c.instr.attrs]
        assert slots == [1 if shortcut_first else 0]
