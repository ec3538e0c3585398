"""Transposes folded into batched matmuls on the CPU backend (backends/cpu/fusion/transposes.py): the matmul reads
the transpose's source through strides (A row-strided, A column-strided, B row-strided, B transposed) or writes
its result through strides into the transpose's output. Checked against numpy (the ONNX semantics), bit for bit
against the unfolded program (``transpose_folding=False``: the same GEMM, the same sums), and in the listing."""
from __future__ import annotations

import os
import re
import shutil

import numpy as np
import pytest
from onnx import helper, numpy_helper

import glow_core
from glow_core.types import dtype as gdtype

needs_cc = pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None
                              and not os.environ.get("CC"), reason="no C compiler")


def heads_model(dt, batch, seq, heads, dim, seed=0, twice=False):
    """q/k/v head splits of x around two batched matmuls, the context merged back (a graph output), and
    tanh(x) transposed times a constant; with ``twice`` the k split is also read by a ReduceSum. Returns the
    model and its numpy expectation as a function of x."""
    rng = np.random.default_rng(seed)
    npdt = gdtype(dt).np
    hd = heads * dim
    w = {n: rng.standard_normal(s).astype(npdt) for n, s in
         (("wq", (hd,)), ("wk", (hd,)), ("wv", (hd,)), ("wp", (batch, seq, 40)))}
    inits = [numpy_helper.from_array(a, n) for n, a in w.items()]
    inits += [numpy_helper.from_array(np.array([batch, seq, heads, dim], np.int64), "split"),
              numpy_helper.from_array(np.array(1 / np.sqrt(dim), npdt), "scale"),
              numpy_helper.from_array(np.array([3], np.int64), "axes")]
    mk = helper.make_node
    nodes = [mk("Add", ["x", "wq"], ["q0"]), mk("Mul", ["x", "wk"], ["k0"]), mk("Sub", ["x", "wv"], ["v0"])]
    for n, perm in (("q", [0, 2, 1, 3]), ("k", [0, 2, 3, 1]), ("v", [0, 2, 1, 3])):
        nodes += [mk("Reshape", [n + "0", "split"], [n + "1"]), mk("Transpose", [n + "1"], [n], perm=perm)]
    nodes += [mk("MatMul", ["q", "k"], ["s"]), mk("Mul", ["s", "scale"], ["s1"]), mk("Sigmoid", ["s1"], ["p"]),
              mk("MatMul", ["p", "v"], ["c"]), mk("Transpose", ["c"], ["ctx"], perm=[0, 2, 1, 3]),
              mk("Tanh", ["x"], ["t"]), mk("Transpose", ["t"], ["tt"], perm=[0, 2, 1]),
              mk("MatMul", ["tt", "wp"], ["proj"])]
    outs = ["ctx", "proj"] + (["ksum"] if twice else [])
    if twice:
        nodes.append(mk("ReduceSum", ["k", "axes"], ["ksum"], keepdims=0))
    g = helper.make_graph(nodes, "heads", [helper.make_tensor_value_info("x", gdtype(dt).onnx, [batch, seq, hd])],
                          [helper.make_tensor_value_info(n, gdtype(dt).onnx, None) for n in outs], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8

    def expect(x):
        x = x.astype(np.float64)
        split = (batch, seq, heads, dim)
        q = (x + w["wq"]).reshape(split).transpose(0, 2, 1, 3)
        k = (x * w["wk"]).reshape(split).transpose(0, 2, 3, 1)
        v = (x - w["wv"]).reshape(split).transpose(0, 2, 1, 3)
        p = 1 / (1 + np.exp(-(q @ k) * (1 / np.sqrt(dim))))
        res = [(p @ v).transpose(0, 2, 1, 3), np.tanh(x).transpose(0, 2, 1) @ w["wp"].astype(np.float64)]
        return res + ([k.sum(axis=3)] if twice else [])
    return m, expect


def folds(cm) -> set:
    """The kinds of folding the CPU program shows in its matmuls' choices."""
    kinds = set()
    for c in cm.last.compiled.program.calls:
        for name, how, cols in re.findall(r"(a|b|c) (read|written) through strides \(batch \[[^\]]*\], rows \d+, "
                                          r"columns (\d+)\)", c.code.choice):
            kinds.add(name + ("_strided_cols" if cols != "1" else ""))
    return kinds


def folded_transposes(cm) -> int:
    return sum(c.instr.op == "transpose" and c.code.choice.startswith("folded") for c in cm.last.compiled.program.calls)


TOL = {"float32": (2e-4, 2e-5), "float64": (1e-10, 1e-12), "float16": (2e-2, 2e-2)}
#: name -> (dtype, batch, seq, heads, dim, threads, folds reached): seq and dim not multiples of the micro-tile;
#: the t2 line past the GEMM's parallel threshold (M * N * K > 524288); float16 runs the converting GEMM, which
#: keeps the copies.
CASES = {
    "b2_partial_tiles": ("float32", 2, 37, 3, 24, 1, {"b", "b_strided_cols", "c", "a_strided_cols"}),
    "b1_two_threads": ("float32", 1, 100, 2, 64, 2, {"a", "b", "b_strided_cols", "c", "a_strided_cols"}),
    "f64": ("float64", 2, 37, 3, 24, 1, {"b", "b_strided_cols", "c", "a_strided_cols"}),
    "f16_keeps_copies": ("float16", 2, 37, 3, 24, 1, set()),
}


@needs_cc
@pytest.mark.parametrize("name", list(CASES))
def test_folded_matmuls_match_numpy_and_the_unfolded_program(name):
    dt, batch, seq, heads, dim, threads, reached = CASES[name]
    m, expect = heads_model(dt, batch, seq, heads, dim)
    x = np.random.default_rng(1).standard_normal((batch, seq, heads * dim)).astype(gdtype(dt).np)
    cm = glow_core.compile(m, "cpu", num_threads=threads)
    ref = glow_core.compile(m, "cpu", num_threads=threads, transpose_folding=False)
    assert folds(cm) >= reached and (reached or not folds(cm))
    assert folds(ref) == set() and folded_transposes(ref) == 0
    names = [o.name for o in m.graph.output]
    got, unfolded = cm.run({"x": x}), ref.run({"x": x})
    rtol, atol = TOL[dt]
    for g, u, want in zip([got[n] for n in names], [unfolded[n] for n in names], expect(x)):
        assert np.array_equal(g, u)
        np.testing.assert_allclose(g.astype(np.float64), want, rtol=rtol, atol=atol)


@needs_cc
def test_a_transpose_read_twice_is_kept_and_right():
    m, expect = heads_model("float32", 2, 37, 3, 24, twice=True)
    x = np.random.default_rng(2).standard_normal((2, 37, 72)).astype(np.float32)
    cm = glow_core.compile(m, "cpu", num_threads=1)
    calls = cm.last.compiled.program.calls
    k = next(c for c in calls if c.instr.op == "transpose" and c.instr.attrs["perm"] == [0, 2, 3, 1])
    assert not k.code.choice.startswith("folded")
    assert "b_strided_cols" not in folds(cm)
    got = cm.run({"x": x})
    for g, want in zip([got[o.name] for o in m.graph.output], expect(x)):
        np.testing.assert_allclose(g, want, rtol=2e-4, atol=2e-5)


@needs_cc
def test_the_listing_names_each_fold():
    m, _ = heads_model("float32", 2, 37, 3, 24)
    src = glow_core.compile(m, "cpu", num_threads=1).last.compiled.program.source()
    assert re.search(r"transpose \S+: folded: \S+ reads its source through strides", src)
    assert re.search(r"transpose \S+: folded: \S+ writes its result through strides", src)
    assert "b read through strides (batch [2664, 24], rows 1, columns 72)" in src
    assert "glow_gemm_strided_f32(" in src


@needs_cc
def test_a_view_regrouping_the_batch_axes_is_folded():
    """q and k split into heads, then viewed as [batch * heads, ...] (a reshape of the transposes' outputs) before
    the matmul: read through strides over the transposes' own batch axes."""
    b, s, h, d = 2, 37, 3, 24
    rng = np.random.default_rng(4)
    w = rng.standard_normal(h * d).astype(np.float32)
    mk = helper.make_node
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.array([b, s, h, d], np.int64), "split"),
             numpy_helper.from_array(np.array([b * h, s, d], np.int64), "fq"),
             numpy_helper.from_array(np.array([b * h, d, s], np.int64), "fk")]
    nodes = [mk("Add", ["x", "w"], ["q0"]), mk("Mul", ["x", "w"], ["k0"]),
             mk("Reshape", ["q0", "split"], ["q1"]), mk("Transpose", ["q1"], ["q2"], perm=[0, 2, 1, 3]),
             mk("Reshape", ["k0", "split"], ["k1"]), mk("Transpose", ["k1"], ["k2"], perm=[0, 2, 3, 1]),
             mk("Reshape", ["q2", "fq"], ["q"]), mk("Reshape", ["k2", "fk"], ["k"]), mk("MatMul", ["q", "k"], ["y"])]
    g = helper.make_graph(nodes, "flat", [helper.make_tensor_value_info("x", 1, [b, s, h * d])],
                          [helper.make_tensor_value_info("y", 1, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    x = rng.standard_normal((b, s, h * d)).astype(np.float32)
    cm = glow_core.compile(m, "cpu", num_threads=1)
    assert folds(cm) >= {"a", "b_strided_cols"} and folded_transposes(cm) == 2
    got = cm.run({"x": x})["y"]
    assert np.array_equal(got, glow_core.compile(m, "cpu", num_threads=1, transpose_folding=False).run({"x": x})["y"])
    xd = x.astype(np.float64)
    q = (xd + w).reshape(b, s, h, d).transpose(0, 2, 1, 3).reshape(b * h, s, d)
    k = (xd * w).reshape(b, s, h, d).transpose(0, 2, 3, 1).reshape(b * h, d, s)
    np.testing.assert_allclose(got, q @ k, rtol=2e-4, atol=2e-5)


@needs_cc
@pytest.mark.parametrize("dt, seq, keys, threads", [("float32", 1, 37, 1), ("float64", 1, 37, 1),
                                                    ("float32", 8, 300, 2)])
def test_grouped_query_heads_are_read_in_place(dt, seq, keys, threads):
    """Grouped-query attention's repeat_kv (Unsqueeze, Expand, Reshape) and the keys' transpose: the matmuls read the
    key and value heads where they lie (stride 0 over a group's query heads, the keys by columns), the broadcasts
    and the transpose run no kernel; numpy's result, and bit for bit the unfolded program's (a decode step: the
    plain loops; a block of 8 queries: the GEMM)."""
    from glow_conformance import networks
    m = networks.gqa_heads(seed=5, dt=dt, seq=seq, keys=keys)
    rng = np.random.default_rng(0)
    npdt = gdtype(dt).np
    f = {"q": rng.standard_normal((1, 6, seq, 16)).astype(npdt), "k": rng.standard_normal((1, 2, keys, 16)).astype(
        npdt), "v": rng.standard_normal((1, 2, keys, 16)).astype(npdt)}
    cm = glow_core.compile(m, "cpu", num_threads=threads)
    got = cm.run(f)[m.graph.output[0].name]
    calls = cm.last.compiled.program.calls
    moved = [c.code.choice for c in calls if c.instr.op in ("broadcast", "transpose") and
             c.instr.outs[0].type.shape[-2:] in ((keys, 16), (16, keys))]
    assert len(moved) == 3 and all("in place through strides" in c for c in moved), moved
    k, v = (np.repeat(f[n].astype(np.float64), 3, axis=1) for n in "kv")
    p = 1 / (1 + np.exp(-(f["q"].astype(np.float64) @ k.transpose(0, 1, 3, 2)) / 4))
    np.testing.assert_allclose(got, p @ v, rtol=1e-4, atol=1e-5)
    ref = glow_core.compile(m, "cpu", num_threads=threads, transpose_folding=False).run(f)[m.graph.output[0].name]
    assert np.asarray(got).tobytes() == np.asarray(ref).tobytes()
