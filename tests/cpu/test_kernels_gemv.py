"""The CPU backend's float32 GEMV (backends/cpu/kernels/matmul.py, templates/gemv.c.j2): a one-row product with a
constant B (a decode step's x @ W) over B's packed panels, at the panel-width and row-step edges and past the
thread threshold (conformance.paths.gemv_shapes, from CPUBackend.interesting_shapes), at 1 and 2 threads, against
numpy in float64 within the conformance suite's accumulation bound (class matmul: 2 n eps sum|a b| + ulp)."""
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import glow_core
from conformance import paths
from glow_cpu.backend import CPUBackend
from glow_cpu.kernels.codegen import KernelInstr, kernel_code
from glow_cpu.kernels.gemm_blocking import gemm_pack_width
from glow_cpu.kernels.matmul import gemv_threads

paths.use(CPUBackend())  # the sizes of the cpu backend (its interesting_shapes), not the generic ones


def _model(sa, b, then=None, b_input=False):
    nodes = [helper.make_node("MatMul", ["a", "b"], ["m" if then else "y"])]
    if then:
        nodes.append(helper.make_node(then, ["m"], ["y"]))
    ins = [helper.make_tensor_value_info("a", TensorProto.FLOAT, list(sa))]
    if b_input:
        ins.append(helper.make_tensor_value_info("b", TensorProto.FLOAT, list(b.shape)))
    g = helper.make_graph(nodes, "g", ins, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [] if b_input else [numpy_helper.from_array(b, "b")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _check(got, a, b, relu=False):
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    want = np.matmul(a64, b64)
    if relu:
        want = np.maximum(want, 0)
    bound = 2 * a.shape[-1] * np.finfo(np.float32).eps * np.matmul(np.abs(a64), np.abs(b64)) + \
        np.spacing(np.abs(want).astype(np.float32))
    err = np.abs(got.astype(np.float64) - want)
    assert (err <= bound).all(), f"max error {err.max():.3g} over bound {bound[err > bound].min():.3g}"


def _choice(cm, threads):
    (ins,) = [i for i in cm.ir.code if i.op == "matmul"]
    return kernel_code(KernelInstr.of(ins), threads).choice


@pytest.mark.parametrize("threads", [1, 2])
def test_gemv_matches_numpy(threads):
    rng = np.random.default_rng(0)
    for k, n in paths.gemv_shapes():
        b = rng.uniform(-1, 1, (k, n)).astype(np.float32)
        for sa in ((1, k), (1, 1, k)):
            a = rng.uniform(-1, 1, sa).astype(np.float32)
            cm = glow_core.compile(_model(sa, b), "cpu", num_threads=threads)
            _check(cm.run({"a": a})["y"], a, b)
            choice = _choice(cm, threads)
            assert choice.startswith("gemv f32"), choice
            used = gemv_threads(k, n, threads)
            assert (f"{used} threads split the panels" if used > 1 else "one thread") in choice, choice
    assert gemv_threads(*paths.gemv_shapes()[-1], 2) == 2  # the last shape is the threaded one


def test_gemv_batched_and_fused_relu():
    """A batch of one-row products (B per batch), and a Relu fused into the GEMV's store."""
    rng = np.random.default_rng(1)
    k, n = paths.gemv_shapes()[3]
    a, b = rng.uniform(-1, 1, (3, 1, k)).astype(np.float32), rng.uniform(-1, 1, (3, k, n)).astype(np.float32)
    cm = glow_core.compile(_model(a.shape, b), "cpu", num_threads=1)
    _check(cm.run({"a": a})["y"], a, b)
    a = rng.uniform(-1, 1, (1, k)).astype(np.float32)
    cm = glow_core.compile(_model(a.shape, b[0], then="Relu"), "cpu", num_threads=1)
    _check(cm.run({"a": a})["y"], a, b[0], relu=True)
    assert "relu fused" in _choice(cm, 1)


def test_gemv_only_for_one_row_float32_constant_b():
    """Two rows, a B computed at run time, float64: the GEMM (or its small loops), not the GEMV."""
    rng = np.random.default_rng(2)
    k, n = paths.gemv_shapes()[4]
    b = rng.uniform(-1, 1, (k, n)).astype(np.float32)
    for sa, b_input in (((2, k), False), ((1, k), True)):
        a = rng.uniform(-1, 1, sa).astype(np.float32)
        cm = glow_core.compile(_model(sa, b, b_input=b_input), "cpu", num_threads=1)
        _check(cm.run({"a": a, **({"b": b} if b_input else {})})["y"], a, b)
        assert not _choice(cm, 1).startswith("gemv"), _choice(cm, 1)


def test_gemv_plan_shown_by_glowc_dump(tmp_path):
    """The GEMV's choices (panels, rows per step, threads) are in ``glowc dump --source``."""
    k, n = paths.gemv_shapes()[-1]
    path = tmp_path / "gemv.onnx"
    onnx.save(_model((1, k), np.ones((k, n), np.float32)), path)
    r = subprocess.run([sys.executable, "-m", "glow_tools.cli", "dump", str(path), "--backend", "cpu", "--source"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    w = gemm_pack_width("f32")
    assert (f"/* matmul: gemv f32: b packed at compile time in {-(-n // w)} panel(s) of {w} columns x {k} rows, each "
            f"streamed once; each column summed in the GEMM's order") in r.stdout, r.stdout[:2000]


@pytest.mark.parametrize("threads", [1, 2])
def test_a_row_is_the_same_bits_alone_and_in_a_batch(threads):
    """The GEMV (one row) sums in the GEMM's order (many rows): a row's result does not depend on the batch it came
    in (a server batching requests dynamically answers each as compile(...).run does alone)."""
    rng = np.random.default_rng(3)
    for k, n in paths.gemv_shapes():
        b = rng.uniform(-1, 1, (k, n)).astype(np.float32)
        a = rng.uniform(-1, 1, (8, k)).astype(np.float32)
        one = glow_core.compile(_model((1, k), b), "cpu", num_threads=threads)
        many = glow_core.compile(_model((8, k), b), "cpu", num_threads=threads)
        assert _choice(one, threads).startswith("gemv") and _choice(many, threads).startswith("gemm"), (k, n)
        rows = many.run({"a": a})["y"]
        for i in (0, 5, 7):
            np.testing.assert_array_equal(one.run({"a": a[i:i + 1]})["y"][0], rows[i], err_msg=f"{k}x{n} row {i}")
