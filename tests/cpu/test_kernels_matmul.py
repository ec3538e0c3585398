"""The CPU backend's GEMM with B packed at compile time (backends/cpu/kernels/gemm_blocking.py: a constant MatMul B in
the micro-kernel's panel layout), at the panel-width, kc and nc edges and above the parallel threshold
(conformance.paths.packed_b_shapes, read from the generator's tables), at 1 and 2 threads, against numpy in
float64."""
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import glow_core
from conformance import paths
from glow_cpu.kernels.codegen import KernelInstr, kernel_code

_T = {"float32": TensorProto.FLOAT, "float64": TensorProto.DOUBLE}


def _case(dt, sa, b):
    g = helper.make_graph([helper.make_node("MatMul", ["a", "b"], ["y"])], "g",
                          [helper.make_tensor_value_info("a", _T[dt], list(sa))],
                          [helper.make_tensor_value_info("y", _T[dt], None)], [numpy_helper.from_array(b, "b")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("dt,sfx", [("float32", "f32"), ("float64", "f64")])
@pytest.mark.parametrize("threads", [1, 2])
def test_constant_b_packed_matches_numpy(dt, sfx, threads):
    rng = np.random.default_rng(0)
    shapes = paths.packed_b_shapes(sfx)
    m, k, n = shapes[-1]
    cases = [((sm, sk), (sk, sn)) for sm, sk, sn in shapes] + [((2, 3, m, k), (k, n)), ((2, m, k), (2, k, n))]
    for sa, sb in cases:
        a, b = rng.uniform(-1, 1, sa).astype(dt), rng.uniform(-1, 1, sb).astype(dt)
        cm = glow_core.compile(_case(dt, sa, b), "cpu", num_threads=threads)
        want = np.matmul(a.astype(np.float64), b.astype(np.float64))
        got = cm.run({"a": a})["y"]
        eps = np.finfo(dt).eps
        np.testing.assert_allclose(got, want, rtol=0, atol=8 * eps * sa[-1] * max(1.0, np.abs(want).max()),
                                   err_msg=f"{sa} @ const {sb}")
        (ins,) = [i for i in cm.ir.code if i.op == "matmul"]
        assert "b packed at compile time" in kernel_code(KernelInstr.of(ins), threads).choice
