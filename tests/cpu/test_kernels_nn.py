"""The CPU backend's whole-op kernels (backends/cpu/kernels/nn.py): Softmax, LayerNormalization and LSTM kept
whole (the instruction in the IR is the ONNX op), checked against onnx's ReferenceEvaluator at 1 and 2 threads;
the variants the kernels do not take are lowered as before."""
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import glow_core
from glow_cpu.kernels.codegen import KernelInstr, kernel_code
from glow_cpu.kernels.nn import LSTM_PARALLEL_MIN


def _model(node, inputs, consts=(), opset=17):
    ins = [helper.make_tensor_value_info(k, TensorProto.FLOAT, v.shape) for k, v in inputs.items()]
    outs = [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in node.output if o]
    g = helper.make_graph([node], "g", ins, outs, [numpy_helper.from_array(v, k) for k, v in consts])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def _check(model, feed, tol=1e-5) -> set:
    """Runs the model on the CPU backend at 1 and 2 threads against the reference; returns the IR's ops."""
    want = ReferenceEvaluator(model).run(None, feed)
    names = [o for o in model.graph.node[0].output if o]
    for nt in (1, 2):
        cm = glow_core.compile(model, "cpu", num_threads=nt)
        got = cm.run(feed)
        for nm, w in zip(names, want):
            np.testing.assert_allclose(got[nm], w, rtol=tol, atol=tol, err_msg=f"{nm}, {nt} threads")
    return {ins.op for ins in cm.ir.code}


rng = np.random.default_rng(0)


@pytest.mark.parametrize("shape", [(4, 8), (2, 3, 130), (1, 1)])
def test_softmax_whole(shape):
    m = _model(helper.make_node("Softmax", ["x"], ["y"], axis=-1), {"x": np.zeros(shape, np.float32)})
    x = (rng.standard_normal(shape) * 5).astype(np.float32)
    assert "Softmax" in _check(m, {"x": x})


@pytest.mark.parametrize("n", [1, 7, 15, 16, 17, 31, 33, 197])
def test_softmax_whole_rows_across_the_vector_tails(n):
    """Row lengths below, at and across the kernel's 16 max/sum lanes; rows with NaN, +inf (NaN where inf - inf),
    -inf, all -inf (NaN) and huge values, at the last position of a full vector and in the tail, as the
    reference computes them."""
    x = (rng.standard_normal((8, n)) * 30).astype(np.float32)
    last = n - 1
    x[1, last], x[2, min(15, last)], x[3, last] = np.nan, np.inf, -np.inf
    x[4, :] = -np.inf
    x[5, 0], x[6, :] = 3e38, 88.0
    m = _model(helper.make_node("Softmax", ["x"], ["y"], axis=-1), {"x": x})
    with np.errstate(invalid="ignore", over="ignore"):
        assert "Softmax" in _check(m, {"x": x})


@pytest.mark.parametrize("n", [16, 17, 49, 197])
def test_softmax_whole_equals_the_lowering_bit_for_bit(n):
    """The whole kernel's vector exp (overlapping last vector, max and sum by rotations) is the exp primitive's
    glow_expf operation for operation: its rows equal the lowered Softmax's (over axis 0 of the transposed
    input: reduce_max, exp, reduce_sum in double, divide) bit for bit, in place of a serial sum's order."""
    x = (rng.standard_normal((n, 12)) * 40).astype(np.float32)
    x[:, 3] -= 95.0  # exp(x - max) down to subnormal results and 0
    whole = _model(helper.make_node("Softmax", ["x"], ["y"], axis=-1), {"x": x.T})
    lowered = _model(helper.make_node("Softmax", ["x"], ["y"], axis=0), {"x": x})
    a = glow_core.compile(whole, "cpu", num_threads=1)
    b = glow_core.compile(lowered, "cpu", num_threads=1)
    assert "Softmax" in {i.op for i in a.ir.code} and "Softmax" not in {i.op for i in b.ir.code}
    got, want = a.run({"x": np.ascontiguousarray(x.T)})["y"], b.run({"x": x})["y"].T
    assert np.array_equal(got.view(np.int32), want.view(np.int32))


def test_softmax_other_axis_is_lowered():
    m = _model(helper.make_node("Softmax", ["x"], ["y"], axis=0), {"x": np.zeros((3, 5), np.float32)})
    assert "Softmax" not in _check(m, {"x": rng.standard_normal((3, 5)).astype(np.float32)})


@pytest.mark.parametrize("axis,bias", [(-1, True), (1, False)])
def test_layernorm_whole(axis, bias):
    shape = (3, 4, 40)
    norm = shape[axis:]
    consts = [("s", rng.standard_normal(norm).astype(np.float32))]
    if bias:
        consts.append(("b", rng.standard_normal(norm).astype(np.float32)))
    node = helper.make_node("LayerNormalization", ["x", "s"] + (["b"] if bias else []), ["y"], axis=axis,
                            epsilon=1e-3)
    m = _model(node, {"x": np.zeros(shape, np.float32)}, consts)
    assert "LayerNormalization" in _check(m, {"x": (rng.standard_normal(shape) * 3 + 1).astype(np.float32)})


@pytest.mark.parametrize("n", [1, 15, 16, 17, 197])
def test_layernorm_whole_rows_across_the_vector_tails(n):
    """Rows below, at and across the kernel's 16 sum lanes, an offset mean (the centred variance)."""
    x = (rng.standard_normal((6, n)) * 3 + 50).astype(np.float32)
    consts = [("s", rng.standard_normal(n).astype(np.float32)), ("b", rng.standard_normal(n).astype(np.float32))]
    m = _model(helper.make_node("LayerNormalization", ["x", "s", "b"], ["y"], axis=-1), {"x": x}, consts)
    assert "LayerNormalization" in _check(m, {"x": x})


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_whole(approximate):
    m = _model(helper.make_node("Gelu", ["x"], ["y"], approximate=approximate), {"x": np.zeros((3, 50000), np.float32)},
               opset=20)
    assert "Gelu" in _check(m, {"x": (rng.standard_normal((3, 50000)) * 4).astype(np.float32)})


@pytest.mark.parametrize("steps,batch,inp,hidden,outs,bias", [
    (4, 2, 3, 5, ["y", "yh"], True), (4, 2, 3, 5, ["", "yh", "yc"], False), (7, 3, 40, 37, ["y"], True),
    (3, 1, 70, 33, ["y", "yh", "yc"], True)])
def test_lstm_whole(steps, batch, inp, hidden, outs, bias):
    vals = {"x": rng.uniform(-1, 1, (steps, batch, inp)), "w": rng.uniform(-0.5, 0.5, (1, 4 * hidden, inp)),
            "r": rng.uniform(-0.5, 0.5, (1, 4 * hidden, hidden)), "b": rng.uniform(-0.5, 0.5, (1, 8 * hidden))}
    vals = {k: v.astype(np.float32) for k, v in vals.items() if bias or k != "b"}
    m = _model(helper.make_node("LSTM", list(vals), outs, hidden_size=hidden), vals)
    assert "LSTM" in _check(m, vals)


@pytest.mark.parametrize("steps,batch,inp,hidden,outs,bias", [
    (4, 2, 3, 5, ["y", "yh", "yc"], True), (5, 1, 40, 48, ["y", "yh"], False),
    (3, 2, 20, 100, ["", "yh", "yc"], True)])  # one partial block; whole blocks; blocks over 2 threads
def test_lstm_constant_weights_packed(steps, batch, inp, hidden, outs, bias):
    vals = {"w": rng.uniform(-0.5, 0.5, (1, 4 * hidden, inp)), "r": rng.uniform(-0.5, 0.5, (1, 4 * hidden, hidden)),
            "b": rng.uniform(-0.5, 0.5, (1, 8 * hidden))}
    consts = [(k, v.astype(np.float32)) for k, v in vals.items() if bias or k != "b"]
    x = rng.uniform(-1, 1, (steps, batch, inp)).astype(np.float32)
    m = _model(helper.make_node("LSTM", ["x"] + [k for k, _ in consts], outs, hidden_size=hidden), {"x": x}, consts)
    assert "LSTM" in _check(m, {"x": x})
    (ins,) = [i for i in glow_core.compile(m, "cpu", num_threads=2).ir.code if i.op == "LSTM"]
    choice = kernel_code(KernelInstr.of(ins), 2).choice
    assert "weights packed at compile time" in choice
    assert ("split over 2 threads" in choice) == (4 * hidden * hidden * batch >= LSTM_PARALLEL_MIN)


@pytest.mark.parametrize("steps,batch,inp,hidden,outs,bias,lbr", [
    (4, 2, 3, 5, ["y", "yh"], True, 0), (4, 2, 3, 5, ["", "yh"], False, 1), (6, 3, 40, 37, ["y"], True, 1),
    (5, 1, 33, 40, ["y", "yh"], True, 0)])
def test_gru_whole(steps, batch, inp, hidden, outs, bias, lbr):
    vals = {"x": rng.uniform(-1, 1, (steps, batch, inp)), "w": rng.uniform(-0.5, 0.5, (1, 3 * hidden, inp)),
            "r": rng.uniform(-0.5, 0.5, (1, 3 * hidden, hidden)), "b": rng.uniform(-0.5, 0.5, (1, 6 * hidden))}
    vals = {k: v.astype(np.float32) for k, v in vals.items() if bias or k != "b"}
    m = _model(helper.make_node("GRU", list(vals), outs, hidden_size=hidden, linear_before_reset=lbr), vals)
    assert "GRU" in _check(m, vals)


def test_bidirectional_lstm_runs_two_forward_kernels():
    """Graph pass rnn-directions leaves two forward LSTMs, each kept whole."""
    vals = {"x": rng.uniform(-1, 1, (3, 2, 4)), "w": rng.uniform(-0.5, 0.5, (2, 12, 4)),
            "r": rng.uniform(-0.5, 0.5, (2, 12, 3))}
    vals = {k: v.astype(np.float32) for k, v in vals.items()}
    m = _model(helper.make_node("LSTM", list(vals), ["y"], hidden_size=3, direction="bidirectional"), vals)
    assert "LSTM" in _check(m, vals)
    assert [i.op for i in glow_core.compile(m, "cpu", num_threads=1).ir.code].count("LSTM") == 2


def test_lstm_with_clip_or_peepholes_is_lowered():
    """Variants the kernel does not take are lowered (against onnxruntime: onnx's ReferenceEvaluator ignores clip)."""
    ort = pytest.importorskip("onnxruntime")
    vals = {"x": rng.uniform(-1, 1, (3, 2, 4)), "w": rng.uniform(-0.5, 0.5, (1, 12, 4)),
            "r": rng.uniform(-0.5, 0.5, (1, 12, 3)), "b": np.zeros((1, 24)), "p": rng.uniform(-0.5, 0.5, (1, 9))}
    vals = {k: v.astype(np.float32) for k, v in vals.items()}
    for names, attrs in ((["x", "w", "r"], {"clip": 0.5}), (["x", "w", "r", "b", "", "", "", "p"], {})):
        feed = {k: vals[k] for k in names if k}
        m = _model(helper.make_node("LSTM", names, ["y"], hidden_size=3, **attrs), feed)
        m.ir_version = 8
        want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feed)[0]
        cm = glow_core.compile(m, "cpu", num_threads=1)
        np.testing.assert_allclose(cm.run(feed)["y"], want, rtol=1e-5, atol=1e-6)
        assert "LSTM" not in {i.op for i in cm.ir.code}


def _states_model(op, steps, batch, inp, hidden, outs, const, lbr=1, c0=True, seed=1):
    """An LSTM / GRU with initial_h (and LSTM's initial_c) as inputs, as torch exports nn.LSTM(x, (h0, c0)):
    weights constant (``const``) or inputs."""
    r = np.random.default_rng(seed)
    g = 4 if op == "LSTM" else 3
    w = {"w": r.uniform(-0.5, 0.5, (1, g * hidden, inp)), "r": r.uniform(-0.5, 0.5, (1, g * hidden, hidden)),
         "b": r.uniform(-0.5, 0.5, (1, 2 * g * hidden))}
    w = {k: v.astype(np.float32) for k, v in w.items()}
    states = {"h0": r.uniform(-1, 1, (1, batch, hidden))}
    if op == "LSTM" and c0:
        states["c0"] = r.uniform(-1, 1, (1, batch, hidden))
    feed = {"x": r.uniform(-1, 1, (steps, batch, inp)), **states}
    feed = {k: v.astype(np.float32) for k, v in feed.items()}
    names = ["x", "w", "r", "b", ""] + list(states)
    attrs = {"hidden_size": hidden} | ({"linear_before_reset": lbr} if op == "GRU" else {})
    node = helper.make_node(op, names, outs, **attrs)
    m = _model(node, feed if const else {**feed, **w}, list(w.items()) if const else ())
    return m, (feed if const else {**feed, **w})


@pytest.mark.parametrize("op,steps,batch,inp,hidden,outs,const,packed", [
    ("LSTM", 4, 2, 3, 21, ["y", "yh", "yc"], True, True), ("LSTM", 3, 2, 20, 100, ["", "yh", "yc"], True, True),
    ("LSTM", 4, 2, 3, 5, ["y", "yh", "yc"], False, False),
    ("GRU", 5, 2, 3, 21, ["y", "yh"], True, True), ("GRU", 3, 2, 20, 100, ["y", "yh"], True, True),
    ("GRU", 4, 1, 8, 32, ["", "yh"], True, True), ("GRU", 4, 2, 3, 5, ["y", "yh"], False, False)])
def test_rnn_whole_with_initial_states(op, steps, batch, inp, hidden, outs, const, packed):
    """initial_h (and initial_c) as torch exports them: kept whole, packed when the weights are constant (GRU:
    linear_before_reset, PyTorch's form), blocks split over 2 threads from LSTM_PARALLEL_MIN multiply-adds."""
    m, feed = _states_model(op, steps, batch, inp, hidden, outs, const)
    assert op in _check(m, feed)
    (ins,) = [i for i in glow_core.compile(m, "cpu", num_threads=2).ir.code if i.op == op]
    choice = kernel_code(KernelInstr.of(ins), 2).choice
    assert ("weights packed at compile time" in choice) == packed, choice
    assert "from initial_h" in choice
    if packed:
        gates = 4 if op == "LSTM" else 3
        assert ("split over 2 threads" in choice) == (gates * hidden * hidden * batch >= LSTM_PARALLEL_MIN)


def test_gru_before_reset_with_constant_weights_runs_unpacked():
    """linear_before_reset=0 needs r of every unit before the candidate's product: the plain loops."""
    m, feed = _states_model("GRU", 4, 2, 3, 21, ["y", "yh"], True, lbr=0)
    assert "GRU" in _check(m, feed)
    (ins,) = [i for i in glow_core.compile(m, "cpu", num_threads=1).ir.code if i.op == "GRU"]
    assert "packed" not in kernel_code(KernelInstr.of(ins), 1).choice


@pytest.mark.parametrize("op,hidden,const,runtime_lens,outs", [
    ("LSTM", 21, True, True, ["y", "yh", "yc"]), ("LSTM", 100, True, False, ["", "yh", "yc"]),
    ("LSTM", 5, False, True, ["y", "yh", "yc"]), ("GRU", 21, True, True, ["y", "yh"]),
    ("GRU", 100, True, True, ["", "yh"]), ("GRU", 5, False, False, ["y", "yh"])])
def test_rnn_whole_with_sequence_lens(op, hidden, const, runtime_lens, outs):
    """sequence_lens shorter than the sequence, as an input or a constant: kept whole (packed when the weights
    are constant, 2-thread blocks at hidden 100); rows past their length keep h (and c) and write zeros to Y,
    against onnxruntime and the interpreter (the lowering's select)."""
    ort = pytest.importorskip("onnxruntime")
    steps, batch, inp = 5, 3, 4
    m, feed = _states_model(op, steps, batch, inp, hidden, outs, const)
    lens = np.array([steps, 2, 1], np.int32)
    node = m.graph.node[0]
    node.input[4] = "lens"
    if runtime_lens:
        m.graph.input.append(helper.make_tensor_value_info("lens", TensorProto.INT32, [batch]))
        feed = {**feed, "lens": lens}
    else:
        m.graph.initializer.append(numpy_helper.from_array(lens, "lens"))
    m.ir_version = 8
    names = [o for o in outs if o]
    want = dict(zip(names, ort.InferenceSession(m.SerializeToString(),
                                                providers=["CPUExecutionProvider"]).run(names, feed)))
    spec = glow_core.compile(m, "interpreter").run(feed)
    for nt in (1, 2):
        cm = glow_core.compile(m, "cpu", num_threads=nt)
        got = cm.run(feed)
        for nm in names:
            np.testing.assert_allclose(got[nm], want[nm], rtol=1e-5, atol=1e-5, err_msg=f"{nm}, {nt} threads")
            np.testing.assert_allclose(got[nm], spec[nm], rtol=1e-5, atol=1e-5, err_msg=f"{nm}, {nt} threads")
        if "y" in names:
            assert not got["y"][2:, 0, 1].any() and not got["y"][1:, 0, 2].any()  # past the lengths: exact zeros
        (ins,) = [i for i in cm.ir.code if i.op == op]
        choice = kernel_code(KernelInstr.of(ins), nt).choice
        assert "past their sequence_lens" in choice and ("packed" in choice) == const, choice


@pytest.mark.parametrize("approximate,act", [("none", "gelu_erf"), ("tanh", "gelu_tanh")])
def test_gelu_op_after_bias_add_fuses_into_the_add(approximate, act, monkeypatch):
    """MatMul -> Add -> Gelu (opset 20), as torch's dynamo exporter writes nn.Linear -> nn.GELU: the Gelu is
    lowered and glow_core.fusion's pattern puts it in the bias add's loop (no Gelu pass); against onnx's
    reference, and equal to the whole Gelu kernel's results (the same expression)."""
    r = np.random.default_rng(3)
    consts = [("w", (r.standard_normal((64, 96)) * 0.3).astype(np.float32)),
              ("b", r.standard_normal(96).astype(np.float32))]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Add", ["m", "b"], ["a"]),
             helper.make_node("Gelu", ["a"], ["y"], approximate=approximate)]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 50, 64])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(v, k) for k, v in consts])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)])
    feed = {"x": (r.standard_normal((2, 50, 64)) * 3).astype(np.float32)}
    want = ReferenceEvaluator(m).run(None, feed)[0]
    for nt in (1, 2):
        cm = glow_core.compile(m, "cpu", num_threads=nt)
        assert "Gelu" not in {i.op for i in cm.ir.code}
        assert [i.attrs.get("_fused_activation") for i in cm.ir.code if i.op == "add"] == [act]
        got = cm.run(feed)["y"]
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=f"{nt} threads")
    import glow_cpu.kernels.nn as knn
    monkeypatch.setitem(knn.WHOLE, "Gelu", lambda node: True)
    whole = glow_core.compile(m, "cpu", num_threads=1)
    assert "Gelu" in {i.op for i in whole.ir.code}
    np.testing.assert_allclose(got, whole.run(feed)["y"], rtol=0, atol=1e-6)
