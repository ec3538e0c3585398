"""The packed GEMM above its parallel threshold with B packed at compile time (templates/gemm.c.j2): the threads
split (column panel, row tile) pairs, so products of fewer column panels than threads or of an odd number of them
(Swin's 3136 x 96 projections: 3 panels of 32 columns) split evenly. Each element is summed as on one thread:
bit-equal to 1 thread, and against numpy in float64."""
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import glow_core


@pytest.mark.parametrize("m,k,n", [(601, 96, 96), (300, 200, 40), (145, 384, 33), (1000, 64, 64)])
def test_gemm_constant_b_bit_equal_across_threads(m, k, n):
    rng = np.random.default_rng(2)
    a = rng.uniform(-1, 1, (m, k)).astype(np.float32)
    b = rng.uniform(-1, 1, (k, n)).astype(np.float32)
    g = helper.make_graph([helper.make_node("MatMul", ["a", "b"], ["y"])], "g",
                          [helper.make_tensor_value_info("a", TensorProto.FLOAT, [m, k])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(b, "b")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    got = {}
    for threads in (1, 2):
        cm = glow_core.compile(model, "cpu", num_threads=threads)
        got[threads] = cm.run({"a": a})["y"]
        (choice,) = [c.code.choice for c in cm.last.compiled.program.calls if c.instr.op == "matmul"]
        assert "gemm f32 (b packed at compile time)" in choice, choice
    want = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(got[2], want, rtol=0, atol=8 * np.finfo(np.float32).eps * k)
    np.testing.assert_array_equal(got[2], got[1])
