"""Elementwise chains on the CPU backend (backends/cpu/fusion/chains.py): a DAG of elementwise instructions whose
intermediates are read only inside it runs as one loop. The fused loop must compute bit for bit what one kernel
per instruction computes (``elementwise_chains=False``), which must equal numpy evaluating the ONNX ops in the
same dtype; the chain shows in ``glowc dump --source``."""
from __future__ import annotations

import os
import re
import shutil

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import glow_core
from glow_tools.cli import main as glowc

needs_cc = pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None
                              and not os.environ.get("CC"), reason="no C compiler")

ONNX_TYPE = {"float32": TensorProto.FLOAT, "float16": TensorProto.FLOAT16, "float64": TensorProto.DOUBLE,
             "int32": TensorProto.INT32}


def model(nodes, inputs, outputs, inits=()):
    g = helper.make_graph(nodes, "chains", [helper.make_tensor_value_info(n, ONNX_TYPE[t], s) for n, t, s in inputs],
                          [helper.make_tensor_value_info(n, ONNX_TYPE[t], None) for n, t in outputs], list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def both(m, feed, threads):
    """Outputs with chains and with one kernel per instruction, and the chained build."""
    cm = glow_core.compile(m, "cpu", num_threads=threads)
    ref = glow_core.compile(m, "cpu", num_threads=threads, elementwise_chains=False)
    return cm, cm.run(feed), ref.run(feed), ref


def chains(cm):
    return [c.code.choice for c in cm.last.compiled.program.calls if c.code.choice.startswith("elementwise chain")]


def bitwise_equal(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def _gelu(dt, shape):
    """Bias add + GELU with ``a / 2`` where glow_core.fusion's GELU patterns have ``a * 0.5``: no activation pattern
    matches, so the elementwise chain is what computes it."""
    rng = np.random.default_rng(0)
    npdt = np.dtype(dt)
    inits = [numpy_helper.from_array(rng.standard_normal(shape[-1]).astype(npdt), "bias"),
             numpy_helper.from_array(np.array(1 / np.sqrt(2), npdt), "c"),
             numpy_helper.from_array(np.array(2, npdt), "two"), numpy_helper.from_array(np.array(1, npdt), "one")]
    nodes = [helper.make_node("Add", ["x", "bias"], ["a"]), helper.make_node("Mul", ["a", "c"], ["s"]),
             helper.make_node("Erf", ["s"], ["e"]), helper.make_node("Add", ["e", "one"], ["e1"]),
             helper.make_node("Div", ["a", "two"], ["h"]), helper.make_node("Mul", ["h", "e1"], ["y"])]
    return model(nodes, [("x", dt, list(shape))], [("y", dt)], inits)


@needs_cc
@pytest.mark.parametrize("dt", ["float32", "float16", "float64"])
@pytest.mark.parametrize("threads", [1, 2])
def test_lowered_gelu_is_one_loop(dt, threads, capsys):
    """Bias add + GELU (6 instructions, one a division): one kernel computes them, the other five run nothing, and the
    result equals the unfused kernels' bit for bit (erf from the same C library call)."""
    shape = (4, 64, 160)  # 40960 elements: past the parallel threshold at 2 threads
    m = _gelu(dt, shape)
    x = np.random.default_rng(1).standard_normal(shape).astype(dt)
    cm, got, want, ref = both(m, {"x": x}, threads)
    assert bitwise_equal(got["y"], want["y"])
    assert [c.split(":")[0] for c in chains(cm)] == ["elementwise chain of 6 in one loop"], chains(cm)
    calls = cm.last.compiled.program.calls
    assert sum(c.code.choice == "computed in the elementwise chain loop of a later instruction" for c in calls) == 5
    src, unfused = cm.last.compiled.source, ref.last.compiled.source
    defined = lambda s: len(re.findall(r"GLOW_KERNEL int glow_k_[0-9a-f]+\(", s))  # noqa: E731
    assert defined(unfused) - defined(src) >= 4  # add, mul, erf, add, mul, mul -> one chain (+ shared mul/add)
    a = x.astype(np.float64) + numpy_helper.to_array(m.graph.initializer[0]).astype(np.float64)
    from math import erf
    expect = a * 0.5 * (1 + np.vectorize(erf)(a / np.sqrt(2)))
    np.testing.assert_allclose(got["y"].astype(np.float64), expect, rtol={"float16": 1e-2}.get(dt, 1e-5),
                               atol={"float16": 1e-2}.get(dt, 1e-6))


@needs_cc
@pytest.mark.parametrize("dt", ["float32", "float64"])
@pytest.mark.parametrize("threads", [1, 2])
def test_product_into_sum_is_not_contracted(dt, threads):
    """t = x * y; o = t + z: separate kernels round the product, so the loop must not become an FMA (with
    -march=native and GCC's default -ffp-contract=fast it would, without the chain's barrier); numpy rounds
    twice too."""
    n = 1 << 16
    m = model([helper.make_node("Mul", ["x", "y"], ["t"]), helper.make_node("Add", ["t", "z"], ["o"]),
               helper.make_node("Sub", ["o", "t"], ["p"]), helper.make_node("Mul", ["p", "z"], ["q"]),
               helper.make_node("Add", ["q", "x"], ["r"])],
              [(k, dt, [n]) for k in "xyz"], [("r", dt)])
    rng = np.random.default_rng(2)
    f = {k: rng.standard_normal(n).astype(dt) for k in "xyz"}
    cm, got, want, _ = both(m, f, threads)
    assert chains(cm) and chains(cm)[0].startswith("elementwise chain of 5")
    t = f["x"] * f["y"]
    expect = ((t + f["z"]) - t) * f["z"] + f["x"]
    assert bitwise_equal(got["r"], want["r"]) and bitwise_equal(got["r"], expect)


@needs_cc
@pytest.mark.parametrize("dt", ["float32", "float64"])
@pytest.mark.parametrize("outer", ["Sin", "Cos"])
def test_sin_and_cos_of_atan_keep_nan(dt, outer):
    """GCC with -fno-math-errno folds sin(atan(x)) and cos(atan(x)) into x / sqrt(x*x + 1) and 1 / sqrt(x*x + 1)
    behind a branch that makes NaN 1 and 0 (glowc fuzz against onnxruntime, seed 20261204, g3420: the chain
    Atan -> Sin of NaN gave 1). Expected: numpy's sin / cos of arctan, NaN where x is NaN."""
    m = model([helper.make_node("Atan", ["x"], ["t"]), helper.make_node(outer, ["t"], ["y"])], [("x", dt, [40])],
              [("y", dt)])
    x = np.random.default_rng(3).standard_normal(40).astype(dt) * 4
    x[:4] = [np.nan, np.inf, -np.inf, -np.nan]
    cm, got, _, _ = both(m, {"x": x}, 1)
    assert chains(cm) and chains(cm)[0].startswith("elementwise chain of 2")
    want = (np.sin if outer == "Sin" else np.cos)(np.arctan(x.astype(np.float64)))
    np.testing.assert_array_equal(np.isnan(got["y"]), np.isnan(want))
    np.testing.assert_allclose(got["y"], want, rtol=4 * np.finfo(dt).eps, atol=2 * np.finfo(dt).eps)


@needs_cc
@pytest.mark.parametrize("threads", [1, 2])
def test_int32_chain_and_division_check(threads):
    """int32 chains (wrapping add/mul, max/min, neg, abs): bitwise as numpy. An integer division keeps its
    divisor check as a kernel of its own between chains, and a zero divisor is still reported."""
    shape = (8, 64, 80)
    inits = [numpy_helper.from_array(np.array(2 ** 30 + 7, np.int32), "big"),
             numpy_helper.from_array((np.arange(80) % 5 - 2).astype(np.int32), "row")]
    nodes = [helper.make_node("Mul", ["x", "big"], ["a"]), helper.make_node("Add", ["a", "row"], ["b"]),
             helper.make_node("Neg", ["b"], ["c"]), helper.make_node("Max", ["c", "x"], ["d"]),
             helper.make_node("Div", ["d", "k"], ["e"]), helper.make_node("Abs", ["e"], ["f"]),
             helper.make_node("Min", ["f", "b"], ["y"])]
    m = model(nodes, [("x", "int32", list(shape)), ("k", "int32", [1, 1, 80])], [("y", "int32")], inits)
    rng = np.random.default_rng(3)
    x = rng.integers(-2 ** 31, 2 ** 31, shape, dtype=np.int64).astype(np.int32)
    k = rng.integers(1, 9, (1, 1, 80)).astype(np.int32)
    cm, got, want, _ = both(m, {"x": x, "k": k}, threads)
    with np.errstate(over="ignore"):
        b = x * np.int32(2 ** 30 + 7) + (np.arange(80) % 5 - 2).astype(np.int32)
        d = np.maximum(-b, x)
        e = (np.trunc(d.astype(np.float64) / k)).astype(np.int32)  # |d| < 2**31: exact in float64
        expect = np.minimum(np.abs(e), b)
    assert bitwise_equal(got["y"], want["y"]) and bitwise_equal(got["y"], expect)
    # b is also read after the division: (mul, add) writes it; (neg, max) and (abs, min) around the division
    assert [re.sub(r", in\d+ read in place.*", "", c) for c in chains(cm)] == [
        "elementwise chain of 2 in one loop: t0 = mul(in0, in1); out = add(t0, in2)",
        "elementwise chain of 2 in one loop: t0 = neg(in0); out = max(t0, in1)",
        "elementwise chain of 2 in one loop: t0 = abs(in0); out = min(t0, in1)"], chains(cm)
    with pytest.raises(Exception, match="division"):
        cm.run({"x": x, "k": np.where(np.arange(80) == 7, 0, k).astype(np.int32)})


@needs_cc
def test_intermediate_read_elsewhere_stops_the_chain():
    """t = x * y is also read by a MatMul and by a graph output u = t + 1: it is written by its own kernel,
    and only the chains that do not need it in memory form (s = t - z; o = s * s)."""
    m = model([helper.make_node("Mul", ["x", "y"], ["t"]), helper.make_node("Sub", ["t", "z"], ["s"]),
               helper.make_node("Mul", ["s", "s"], ["o"]), helper.make_node("MatMul", ["t", "y"], ["mm"]),
               helper.make_node("Sigmoid", ["t"], ["u"])],
              [("x", "float32", [64, 64]), ("y", "float32", [64, 64]), ("z", "float32", [64, 64])],
              [("o", "float32"), ("mm", "float32"), ("u", "float32")])
    rng = np.random.default_rng(4)
    f = {k: rng.standard_normal((64, 64)).astype(np.float32) for k in "xyz"}
    cm, got, want, _ = both(m, f, 1)
    for k in want:
        assert bitwise_equal(got[k], want[k]), k
    listed = [(c.instr.op, c.code.choice) for c in cm.last.compiled.program.calls]
    assert [c for op, c in listed if op == "mul"][0] == "mul", listed  # t: its own kernel
    assert chains(cm) == ["elementwise chain of 2 in one loop: t0 = sub(in0, in1); out = mul(t0, t0)"], listed


@needs_cc
def test_chain_in_glowc_dump(tmp_path, capsys):
    """``glowc dump --source`` names the chain and its expression in the call's comment."""
    path = tmp_path / "gelu.onnx"
    path.write_bytes(_gelu("float32", (2, 8, 16)).SerializeToString())
    assert glowc(["dump", str(path), "--backend", "cpu", "--source"]) in (0, None)
    out = capsys.readouterr().out
    assert "elementwise chain of 6 in one loop: t0 = add(in0, in1); t1 = mul(t0, in2); t2 = erf(t1)" in out
