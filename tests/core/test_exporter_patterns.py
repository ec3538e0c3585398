"""Lowering choices for what torch's exporters and Hugging Face models write: the results against numpy (float64,
from the ONNX spec) and onnxruntime, and the lowered graph holding the cheaper form."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import glow_core
from glow_core.fusion import FUSED_ACTIVATION
from glow_core.importer.onnx_import import import_model
from glow_core.lower import lower

F = TensorProto.FLOAT
ort = pytest.importorskip("onnxruntime")


def model_of(nodes, inputs, outputs, inits=(), opset=18):
    g = helper.make_graph(nodes, "m", inputs, outputs, list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def ort_run(model, feed):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feed)))


def pow_model(exponent, x_shape=(4, 37), dt=np.float32):
    e = numpy_helper.from_array(np.asarray(exponent, dtype=dt), "e")
    return model_of([helper.make_node("Pow", ["x", "e"], ["y"])],
                    [helper.make_tensor_value_info("x", F, list(x_shape))],
                    [helper.make_tensor_value_info("y", F, None)], [e])


def lowered_ops(model):
    fn = import_model(model)
    lower(fn)
    return [n.op for n in fn.nodes]


@pytest.mark.parametrize("exponent,dt,muls", [(2.0, np.float32, 1), (3.0, np.float32, 2), (2, np.int64, 1),
                                              ([[2.0]], np.float32, 1), ([3.0] * 37, np.float32, 2)])
def test_pow_by_2_or_3_is_products(exponent, dt, muls):
    """Pow(x, 2) and Pow(x, 3) (T5's and LLaMA's variance, GPT-2's tanh GELU) lower to one or two muls."""
    m = pow_model(exponent, dt=dt)
    assert lowered_ops(m).count("mul") == muls and "pow" not in lowered_ops(m)
    x = np.random.default_rng(0).standard_normal((4, 37)).astype(np.float32) * 4
    x[0, :4] = [0.0, -0.0, np.inf, -np.inf]
    x[1, 0] = np.nan
    got = glow_core.compile(m, "interpreter").run({"x": x})["y"]
    k = muls + 1
    want = (x.astype(np.float64) ** k).astype(np.float32)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))
    # a square is exact; a cube rounds twice: within 1 ulp of the correctly rounded cube
    ulps = np.abs(got.view(np.int32).astype(np.int64) - want.view(np.int32).astype(np.int64))
    assert ulps[~np.isnan(want)].max() <= (0 if k == 2 else 1)
    cpu = glow_core.compile(m, "cpu", num_threads=1).run({"x": x})["y"]
    np.testing.assert_array_equal(cpu, got)
    np.testing.assert_allclose(got, ort_run(m, {"x": x})["y"], rtol=3e-7, atol=0)


@pytest.mark.parametrize("exponent,x_shape", [(2.5, (4, 37)), ([2.0, 3.0], (4, 2)), ([[2.0]] * 3, (1, 5)),
                                              (-2.0, (4, 37)), (np.nan, (4, 37))])
def test_other_exponents_stay_pow(exponent, x_shape):
    """A non-integer, mixed, widening, negative or NaN exponent keeps the pow primitive."""
    m = pow_model(exponent, x_shape)
    assert "pow" in lowered_ops(m)
    x = np.random.default_rng(1).uniform(0.5, 2.0, x_shape).astype(np.float32)
    with np.errstate(invalid="ignore"):
        want = ort_run(m, {"x": x})["y"]
    np.testing.assert_allclose(glow_core.compile(m, "interpreter").run({"x": x})["y"], want, rtol=1e-6)


def test_integer_pow_stays_pow():
    e = numpy_helper.from_array(np.asarray(2, np.int32), "e")
    m = model_of([helper.make_node("Pow", ["x", "e"], ["y"])],
                 [helper.make_tensor_value_info("x", TensorProto.INT32, [5])],
                 [helper.make_tensor_value_info("y", TensorProto.INT32, None)], [e])
    assert "pow" in lowered_ops(m)
    x = np.array([-3, 0, 7, 46341, -46341], np.int32)
    np.testing.assert_array_equal(glow_core.compile(m, "interpreter").run({"x": x})["y"], ort_run(m, {"x": x})["y"])


def gelu_new_model(n=16, k=32, m=64, opset=18):
    """GPT-2's MLP as the dynamo exporter writes it: Gemm with bias, then 0.5 * x * (1 + tanh(sqrt(2/pi) *
    (x + 0.044715 * Pow(x, 3))))."""
    rng = np.random.default_rng(2)
    c = lambda name, v: numpy_helper.from_array(np.asarray(v, np.float32), name)  # noqa: E731
    inits = [c("w", rng.standard_normal((k, m)) * 0.2), c("b", rng.standard_normal(m) * 0.1), c("half", 0.5),
             c("three", 3.0), c("cube", 0.044715), c("scale", np.sqrt(2 / np.pi)), c("one", 1.0)]
    nodes = [helper.make_node("Gemm", ["x", "w", "b"], ["h"]),
             helper.make_node("Mul", ["h", "half"], ["h2"]),
             helper.make_node("Pow", ["h", "three"], ["p"]),
             helper.make_node("Mul", ["p", "cube"], ["pc"]),
             helper.make_node("Add", ["h", "pc"], ["s"]),
             helper.make_node("Mul", ["s", "scale"], ["ss"]),
             helper.make_node("Tanh", ["ss"], ["t"]),
             helper.make_node("Add", ["t", "one"], ["t1"]),
             helper.make_node("Mul", ["h2", "t1"], ["y"])]
    return model_of(nodes, [helper.make_tensor_value_info("x", F, [n, k])], [helper.make_tensor_value_info("y", F, None)],
                    inits, opset)


def test_gpt2_gelu_with_pow_fuses_as_gelu_tanh():
    """With the cube as products, GPT-2's GELU is the declared gelu_tanh pattern: one fused bias add on the cpu
    backend (no pow, tanh or mul left), matching onnxruntime."""
    m = gelu_new_model()
    cm = glow_core.compile(m, "cpu", num_threads=1)
    x = np.random.default_rng(3).standard_normal((16, 32)).astype(np.float32)
    got = cm.run({"x": x})["y"]
    ops = [i.op for i in cm.ir.code]
    assert not {"pow", "tanh", "mul"} & set(ops), ops
    assert [i.attrs.get(FUSED_ACTIVATION) for i in cm.ir.code if i.op == "add"] == ["gelu_tanh"]
    np.testing.assert_allclose(got, ort_run(m, {"x": x})["y"], rtol=1e-5, atol=1e-6)
    # fused and unfused differ by the C compiler's multiply-add contraction only (as test_fusion's gelu_tanh)
    np.testing.assert_allclose(got, glow_core.compile(m, "interpreter").run({"x": x})["y"], rtol=1e-6, atol=1e-6)


def conv_transpose_model(x_shape, c_out, k, bias=True, **attrs):
    rng = np.random.default_rng(4)
    c_in = x_shape[1]
    inits = [numpy_helper.from_array(rng.standard_normal((c_in, c_out) + tuple(k)).astype(np.float32), "w")]
    if bias:
        inits.append(numpy_helper.from_array(rng.standard_normal(c_out).astype(np.float32), "b"))
    node = helper.make_node("ConvTranspose", ["x", "w"] + (["b"] if bias else []), ["y"], **attrs)
    return model_of([node], [helper.make_tensor_value_info("x", F, list(x_shape))],
                    [helper.make_tensor_value_info("y", F, None)], inits)


def conv_transpose_numpy(x, w, b, k):
    """ConvTranspose with kernel = stride from the ONNX definition: input position p spreads x[:, c, p] * w[c, m]
    over the output window starting at p * stride."""
    n = x.ndim - 2
    N, C, *sp = x.shape
    M = w.shape[1]
    y = np.zeros((N, M) + tuple(s * kk for s, kk in zip(sp, k)))
    for pos in np.ndindex(*sp):
        win = tuple(slice(p * kk, (p + 1) * kk) for p, kk in zip(pos, k))
        y[(slice(None), slice(None)) + win] += np.einsum("nc,cm...->nm...", x[(slice(None), slice(None)) + pos]
                                                          .astype(np.float64), w.astype(np.float64))
    if b is not None:
        y += b.reshape((M,) + (1,) * n)
    return y


@pytest.mark.parametrize("x_shape,c_out,k,bias", [((1, 8, 5, 7), 4, (2, 2), True), ((2, 3, 4, 4), 5, (2, 3), False),
                                                  ((1, 6, 9), 3, (4,), True), ((2, 4, 2, 3, 2), 2, (2, 2, 2), True)])
def test_conv_transpose_with_kernel_equal_to_stride_is_one_matmul(x_shape, c_out, k, bias):
    """U-Net's 2x2 stride-2 ConvTranspose (and its 1-d / 3-d / rectangular kin): one matmul, no zero-inserted conv;
    against the ONNX definition in float64, onnxruntime and the cpu backend."""
    m = conv_transpose_model(x_shape, c_out, k, bias, strides=list(k))
    ops = lowered_ops(m)
    assert "matmul" in ops and "conv" not in ops and "pad" not in ops, ops
    x = np.random.default_rng(5).standard_normal(x_shape).astype(np.float32)
    inits = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}
    want = conv_transpose_numpy(x, inits["w"], inits.get("b"), k)
    got = glow_core.compile(m, "interpreter").run({"x": x})["y"]
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got, ort_run(m, {"x": x})["y"], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(glow_core.compile(m, "cpu", num_threads=1).run({"x": x})["y"], got, rtol=1e-5,
                               atol=1e-5)


@pytest.mark.parametrize("attrs", [dict(strides=[2, 2], pads=[1, 1, 1, 1], kernel_shape=[4, 4]),
                                   dict(strides=[2, 2], output_padding=[1, 1]), dict(strides=[1, 2]),
                                   dict(strides=[2, 2], dilations=[2, 2])])
def test_other_conv_transposes_keep_the_conv_lowering(attrs):
    k = tuple(attrs.get("kernel_shape", (2, 2)))
    m = conv_transpose_model((1, 4, 5, 5), 3, k, True, **attrs)
    assert "conv" in lowered_ops(m)
    x = np.random.default_rng(6).standard_normal((1, 4, 5, 5)).astype(np.float32)
    np.testing.assert_allclose(glow_core.compile(m, "interpreter").run({"x": x})["y"], ort_run(m, {"x": x})["y"],
                               rtol=1e-5, atol=1e-5)


def rnn_model(op, direction, layout, seq=5, batch=3, inp=4, hidden=6, states=True, outputs=None, seed=7, **attrs):
    """One LSTM / GRU / RNN node with random weights (constant, as exported) and runtime initial states."""
    rng = np.random.default_rng(seed)
    g = {"LSTM": 4, "GRU": 3, "RNN": 1}[op]
    nd = 2 if direction == "bidirectional" else 1
    c = lambda name, shape: numpy_helper.from_array((rng.standard_normal(shape) * 0.4).astype(np.float32), name)  # noqa: E731
    inits = [c("w", (nd, g * hidden, inp)), c("r", (nd, g * hidden, hidden)), c("b", (nd, 2 * g * hidden))]
    xs = (batch, seq, inp) if layout else (seq, batch, inp)
    st = (batch, nd, hidden) if layout else (nd, batch, hidden)
    ins = ["x", "w", "r", "b", ""] + (["h0"] + (["c0"] if op == "LSTM" else []) if states else [])
    outputs = outputs or (["y", "yh", "yc"] if op == "LSTM" else ["y", "yh"])
    node = helper.make_node(op, ins, outputs, hidden_size=hidden, direction=direction, layout=layout, **attrs)
    vis = [helper.make_tensor_value_info("x", F, list(xs))]
    if states:
        vis += [helper.make_tensor_value_info(s, F, list(st)) for s in (["h0", "c0"] if op == "LSTM" else ["h0"])]
    m = model_of([node], vis, [helper.make_tensor_value_info(o, F, None) for o in outputs if o], inits, opset=14)
    feed = {"x": rng.standard_normal(xs).astype(np.float32)}
    if states:
        feed.update({s: (rng.standard_normal(st) * 0.5).astype(np.float32)
                     for s in (["h0", "c0"] if op == "LSTM" else ["h0"])})
    return m, feed


def graph_ops(model):
    fn = import_model(model)
    from glow_core.passes import DEFAULT_PIPELINE, run_pipeline
    run_pipeline(fn, DEFAULT_PIPELINE)
    return [(n.op, n.attrs.get("direction"), n.attrs.get("layout", 0)) for n in fn.nodes if n.op in ("LSTM", "GRU",
                                                                                                      "RNN")]


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize("direction,layout", [("bidirectional", 0), ("reverse", 0), ("forward", 1),
                                              ("bidirectional", 1)])
def test_rnn_directions_become_forward_time_major_nodes(op, direction, layout):
    """A reverse / bidirectional / batch-major recurrent node is forward, time-major nodes after the graph passes
    (one per direction), and its outputs are unchanged: against onnxruntime and against the lowering of the
    original node (the interpreter without graph passes)."""
    extra = {"linear_before_reset": 1} if op == "GRU" else {}
    m, feed = rnn_model(op, direction, layout, **extra)
    nd = 2 if direction == "bidirectional" else 1
    assert graph_ops(m) == [(op, "forward", 0)] * nd
    got = glow_core.compile(m, "interpreter").run(feed)
    plain = glow_core.compile(m, "interpreter", optimize=False).run(feed)
    if layout:  # onnxruntime has no batch-major RNNs: its time-major twin (same weights) on transposed arrays
        m0, _ = rnn_model(op, direction, 0, **extra)
        want = ort_run(m0, {k: v.transpose(1, 0, 2) for k, v in feed.items()})
        want = {k: v.transpose(2, 0, 1, 3) if k == "y" else v.transpose(1, 0, 2) for k, v in want.items()}
    else:
        want = ort_run(m, feed)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(got[name], plain[name])
    cpu = glow_core.compile(m, "cpu", num_threads=1).run(feed)
    for name in want:
        np.testing.assert_allclose(cpu[name], want[name], rtol=1e-5, atol=1e-6)


def test_rnn_directions_keep_activations_per_direction_and_partial_outputs():
    """Each direction keeps its own activations (and alphas); a node asking for Y_h only gets Y_h."""
    m, feed = rnn_model("RNN", "bidirectional", 0, outputs=["", "yh"], activations=["LeakyRelu", "Tanh"],
                        activation_alpha=[0.3, 0.0])
    assert graph_ops(m) == [("RNN", "forward", 0)] * 2
    got = glow_core.compile(m, "interpreter").run(feed)
    np.testing.assert_allclose(got["yh"], ort_run(m, feed)["yh"], rtol=1e-5, atol=1e-6)


def test_rnn_directions_batch_major_with_short_sequences():
    """A batch-major forward node with sequence_lens shorter than the sequence becomes a time-major one that keeps
    them (steps past a sequence's end keep the state, Y is 0 there), as onnxruntime computes the time-major twin."""
    lens = numpy_helper.from_array(np.array([5, 3, 2], np.int32), "lens")
    models = []
    for layout in (1, 0):
        m, feed = rnn_model("GRU", "forward", layout)
        m.graph.initializer.append(lens)
        m.graph.node[0].input[4] = "lens"
        models.append((m, feed))
    (m1, feed1), (m0, _) = models
    assert graph_ops(m1) == [("GRU", "forward", 0)]
    got = glow_core.compile(m1, "interpreter").run(feed1)
    want = ort_run(m0, {k: v.transpose(1, 0, 2) for k, v in feed1.items()})
    np.testing.assert_allclose(got["y"], want["y"].transpose(2, 0, 1, 3), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got["yh"], want["yh"].transpose(1, 0, 2), rtol=1e-5, atol=1e-6)
