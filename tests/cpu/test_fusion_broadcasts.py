"""Operator stacking on the CPU backend (backends/cpu/fusion/broadcasts.py): a broadcast whose readers are all
elementwise kernels is not materialized; they index its source in place. Checked against numpy (the ONNX semantics) and
onnxruntime, and shown in ``glowc dump --source``."""
from __future__ import annotations

import os
import shutil

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import glow_core
from glow_cpu.kernels.elementwise import broadcast_split

needs_cc = pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None
                              and not os.environ.get("CC"), reason="no C compiler")


def model(nodes, inputs, outputs, inits=(), opset=17):
    g = helper.make_graph(nodes, "stack", [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
                          [helper.make_tensor_value_info(n, t, None) for n, t in outputs], list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def calls(cm):
    """(op, algorithm) of each call of the CPU program."""
    return [(c.instr.op, c.code.choice) for c in cm.last.compiled.program.calls]


@pytest.mark.parametrize("out,ins,rows,cols,index", [
    ((1, 128, 256), [(1, 128, 256), (1, 1, 256)], 128, 256, ("i", "j")),
    ((1, 4, 8, 8), [(1, 4, 8, 8), (1, 4, 8, 1)], 32, 8, ("i", "r")),
    ((2, 3, 4, 5), [(2, 3, 4, 5), (1, 3, 1, 1)], 6, 20, ("i", "(r % 3)")),
    ((2, 3, 4, 5), [(2, 1, 4, 1), (1, 1, 1, 1)], 24, 5, ("(r / 12) * 4 + (r % 4)", "0")),
    ((6, 7), [(6, 7), (6, 7)], 1, 42, ("i", "i")),
    # a channel gate over NCHWc (stored shapes): per channel block, its cb lanes along j
    ((1, 3, 5, 5, 16), [(1, 3, 5, 5, 16), (1, 3, 1, 1, 16)], 75, 16, ("i", "(r / 25) * 16 + j")),
])
def test_broadcast_split(out, ins, rows, cols, index):
    s = broadcast_split(out, ins)
    assert (s.rows, s.cols, s.index) == (rows, cols, index)


def _index_value(expr, r, j, i):
    return eval(expr.replace("/", "//"), {}, {"r": r, "j": j, "i": i})


@pytest.mark.parametrize("out", [(2, 3, 4, 5), (3, 1, 4), (5,), (2, 3, 2, 3, 4)])
def test_every_broadcast_source_is_indexed_as_numpy_broadcasts_it(out):
    """Each split index, evaluated for every output element, names the source element numpy's broadcast puts
    there (all 2**rank sources of ``out``)."""
    rank = len(out)
    for mask in range(2 ** rank):
        src = tuple(1 if mask >> d & 1 else out[d] for d in range(rank))
        split = broadcast_split(out, [out, src])
        assert split.rows * split.cols == int(np.prod(out))
        want = np.broadcast_to(np.arange(int(np.prod(src))).reshape(src), out).reshape(-1)
        got = [_index_value(split.index[1], r, j, r * split.cols + j)
               for r in range(split.rows) for j in range(split.cols)]
        assert got == list(want), (src, split)


def run_both(m, feed, threads=1):
    cm = glow_core.compile(m, "cpu", num_threads=threads)
    got = cm.run(feed)
    s = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    want = dict(zip([o.name for o in s.get_outputs()], s.run(None, feed)))
    return cm, got, want


@needs_cc
@pytest.mark.parametrize("threads", [1, 2])
def test_bias_scale_and_softmax_broadcasts_are_read_in_place(threads):
    """A row bias (Add), a per-channel scale (Mul), a scalar (Mul) and a lowered softmax's reduce results (Sub,
    Div of broadcasts of activations; not over the last axis, which the CPU backend keeps whole): no broadcast is
    materialized and the results equal onnxruntime's."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal(64).astype(np.float32), "bias"),
             numpy_helper.from_array(rng.standard_normal((1, 4, 1, 1)).astype(np.float32), "scale"),
             numpy_helper.from_array(np.array(0.125, np.float32), "s")]
    nodes = [helper.make_node("Add", ["x", "bias"], ["a"]), helper.make_node("Mul", ["a", "scale"], ["b"]),
             helper.make_node("Mul", ["b", "s"], ["c"]), helper.make_node("Softmax", ["c"], ["y"], axis=2)]
    m = model(nodes, [("x", TensorProto.FLOAT, [2, 4, 48, 64])], [("y", TensorProto.FLOAT)], inits)
    x = rng.standard_normal((2, 4, 48, 64)).astype(np.float32)
    cm, got, want = run_both(m, {"x": x}, threads)
    np.testing.assert_allclose(got["y"], want["y"], rtol=1e-5, atol=1e-6)
    listed = calls(cm)
    bc = [c for op, c in listed if op == "broadcast"]
    assert bc and all(c.startswith("not materialized") for c in bc), listed
    assert sum(c.count("read in place") for _, c in listed) >= 4


@needs_cc
def test_broadcast_with_a_non_elementwise_reader_is_materialized():
    """A broadcast also read by a matmul stays a copy (the matmul reads the full tensor)."""
    rng = np.random.default_rng(1)
    inits = [numpy_helper.from_array(np.array([16, 16], np.int64), "shape")]
    nodes = [helper.make_node("Sigmoid", ["r"], ["row"]), helper.make_node("Expand", ["row", "shape"], ["e"]),
             helper.make_node("Add", ["x", "e"], ["a"]), helper.make_node("MatMul", ["a", "e"], ["y"])]
    m = model(nodes, [("x", TensorProto.FLOAT, [16, 16]), ("r", TensorProto.FLOAT, [1, 16])],
              [("y", TensorProto.FLOAT)], inits)
    x = rng.standard_normal((16, 16)).astype(np.float32)
    cm, got, want = run_both(m, {"x": x, "r": rng.standard_normal((1, 16)).astype(np.float32)})
    np.testing.assert_allclose(got["y"], want["y"], rtol=1e-5, atol=1e-5)
    ops = [(op, c) for op, c in calls(cm) if op == "broadcast"]
    assert ops and not any(c.startswith("not materialized") for _, c in ops)


@needs_cc
def test_integer_division_by_a_broadcast_zero_is_reported():
    """The divisor check reads the broadcast's source: a zero in it is found."""
    m = model([helper.make_node("Div", ["x", "d"], ["y"])],
              [("x", TensorProto.INT32, [4, 3]), ("d", TensorProto.INT32, [1, 3])], [("y", TensorProto.INT32)])
    cm = glow_core.compile(m, "cpu", num_threads=1)
    assert [c for op, c in calls(cm) if op == "broadcast"] == [
        "not materialized: its elementwise readers index its source in place"]
    x = np.arange(12, dtype=np.int32).reshape(4, 3) - 5
    np.testing.assert_array_equal(cm.run({"x": x, "d": np.array([[2, -3, 4]], np.int32)})["y"],
                                  np.trunc(x / np.array([[2, -3, 4]])).astype(np.int32))
    with pytest.raises(Exception, match="division"):
        cm.run({"x": x, "d": np.array([[2, 0, 4]], np.int32)})
