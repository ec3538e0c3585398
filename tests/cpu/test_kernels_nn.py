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


def test_bidirectional_lstm_is_lowered():
    vals = {"x": rng.uniform(-1, 1, (3, 2, 4)), "w": rng.uniform(-0.5, 0.5, (2, 12, 4)),
            "r": rng.uniform(-0.5, 0.5, (2, 12, 3))}
    vals = {k: v.astype(np.float32) for k, v in vals.items()}
    m = _model(helper.make_node("LSTM", list(vals), ["y"], hidden_size=3, direction="bidirectional"), vals)
    assert "LSTM" not in _check(m, vals)
