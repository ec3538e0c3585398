"""Batched matmuls whose products are each too small to split (kernels/matmul.py ``batch_split``): at 2 threads
the batches are split over the threads, each product on one thread with its own scratch. The result must not
depend on the thread count (bit-equal to 1 thread) and matches numpy in float64; the GEMM, the plain loops, B read
through strides (a folded transpose: Swin's Q K^T), a constant B, integers, an odd split."""
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import glow_core

_T = {"float32": TensorProto.FLOAT, "int32": TensorProto.INT32}


def _model(dt, sa, sb, b_const=None, transpose_b=False):
    nodes, inits = [], []
    inputs = [helper.make_tensor_value_info("a", _T[dt], list(sa))]
    if b_const is not None:
        inits.append(numpy_helper.from_array(b_const, "b"))
    else:
        inputs.append(helper.make_tensor_value_info("b", _T[dt], list(sb)))
    bname = "b"
    if transpose_b:
        perm = list(range(len(sb) - 2)) + [len(sb) - 1, len(sb) - 2]
        nodes.append(helper.make_node("Transpose", ["b"], ["bt"], perm=perm))
        bname = "bt"
    nodes.append(helper.make_node("MatMul", ["a", bname], ["y"]))
    g = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info("y", _T[dt], None)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


#: (name, dtype, A shape, B shape as the graph holds it, B constant, B transposed, the kernel's path)
CASES = [
    ("gemm", "float32", (12, 49, 32), (12, 32, 49), False, False, "gemm f32"),
    ("gemm_b_by_columns", "float32", (4, 3, 49, 32), (4, 3, 49, 32), False, True, "gemm f32, b read through"),
    ("gemm_const_b", "float32", (13, 49, 32), (13, 32, 49), True, False, "b packed at compile time"),
    ("loops", "float32", (2, 65, 16, 16), (2, 65, 16, 16), False, False, "loops in float"),
    ("loops_b_by_columns", "float32", (130, 16, 16), (130, 16, 16), False, True, "loops in float"),
    ("loops_int32", "int32", (9, 40, 40), (9, 40, 40), False, False, "loops in int64_t"),
]


@pytest.mark.parametrize("name,dt,sa,sb,const,trans,path", CASES, ids=[c[0] for c in CASES])
def test_batches_split_over_threads_bit_equal_to_one_thread(name, dt, sa, sb, const, trans, path):
    rng = np.random.default_rng(1)
    if dt == "int32":
        a, b = rng.integers(-50, 50, sa).astype(dt), rng.integers(-50, 50, sb).astype(dt)
    else:
        a, b = rng.uniform(-1, 1, sa).astype(dt), rng.uniform(-1, 1, sb).astype(dt)
    model = _model(dt, sa, sb, b if const else None, trans)
    feed = {"a": a} if const else {"a": a, "b": b}
    bm = np.swapaxes(b, -1, -2) if trans else b
    want = np.matmul(a.astype(np.float64), bm.astype(np.float64))
    got = {}
    for threads in (1, 2):
        cm = glow_core.compile(model, "cpu", num_threads=threads)
        got[threads] = cm.run(feed)["y"]
        (choice,) = [c.code.choice for c in cm.last.compiled.program.calls if c.instr.op == "matmul"]
        assert path in choice, choice
        batch = int(np.prod(want.shape[:-2]))
        assert (f"2 threads split the {batch} products" in choice) == (threads == 2), choice
    if dt == "int32":
        np.testing.assert_array_equal(got[2], want.astype(dt))
    else:
        np.testing.assert_allclose(got[2], want, rtol=0, atol=8 * np.finfo(dt).eps * sa[-1])
    np.testing.assert_array_equal(got[2], got[1])  # the summation order does not depend on the thread count
