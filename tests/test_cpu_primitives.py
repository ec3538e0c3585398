"""Every primitive on the CPU backend against the interpreter's reference kernels, for every dtype it accepts.

Cases are data (one line per case); all cases of one dtype are compiled into one function (one C compile),
run once, and checked by one checker: exact for integers, bool and data movement, a few ULPs for floats.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from glow_core.builder import Builder
from glow_core.graph import Function
from glow_core.ir import attach_scratch, generate_ir, plan_memory, share_buffers, verify_ir
from glow_core.types import FLOATS, INTS, NUMERIC, SIGNED, UNSIGNED, TensorType
from glow_cpu.backend import CPUBackend
from glow_interpreter.kernels import run_primitive

ALL_DT = NUMERIC + ("bool",)
S = (3, 5, 7)

# (op, dtypes, input shapes, attrs, input kinds) -- kinds: "any", "pos" (> 0), "nz" (non-zero), "small",
# "shift" (0..bits+2), "bool", "i32idx:DIM", "i64idx:DIM"
CASES = [(op, FLOATS, [S], {}, ["any"]) for op in (
    "exp", "log", "sqrt", "reciprocal", "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh",
    "acosh", "atanh", "tanh", "sigmoid", "erf", "floor", "ceil", "round", "isnan", "isinf")]
CASES += [(op, NUMERIC, [S], {}, ["any"]) for op in ("neg", "abs", "sign")]
CASES += [
    ("not", ("bool",), [S], {}, ["bool"]),
    ("bitwise_not", INTS, [S], {}, ["any"]),
]
CASES += [(op, NUMERIC, [S, S], {}, ["any", "any"]) for op in ("add", "sub", "mul", "max", "min", "lt", "le",
                                                                 "gt", "ge")]
CASES += [
    ("eq", ALL_DT, [S, S], {}, ["small", "small"]),
    ("div", NUMERIC, [S, S], {}, ["any", "nz"]),
    ("mod", NUMERIC, [S, S], {"fmod": 0}, ["any", "nz"]),
    ("mod", NUMERIC, [S, S], {"fmod": 1}, ["any", "nz"]),
    ("pow", FLOATS, [S, S], {}, ["any", "any"]),
    ("pow", INTS, [S, S], {}, ["small", "small"]),
    ("and", ("bool",), [S, S], {}, ["bool", "bool"]),
    ("or", ("bool",), [S, S], {}, ["bool", "bool"]),
    ("xor", ("bool",), [S, S], {}, ["bool", "bool"]),
    ("bitwise_and", INTS, [S, S], {}, ["any", "any"]),
    ("bitwise_or", INTS, [S, S], {}, ["any", "any"]),
    ("bitwise_xor", INTS, [S, S], {}, ["any", "any"]),
    ("shl", UNSIGNED, [S, S], {}, ["any", "shift"]),
    ("shr", UNSIGNED, [S, S], {}, ["any", "shift"]),
    ("select", ALL_DT, [S, S, S], {}, ["bool", "any", "any"]),
    ("copy", ALL_DT, [S], {}, ["any"]),
    ("reshape", ALL_DT, [S], {"shape": [5, 21]}, ["any"]),
    ("transpose", ALL_DT, [(2, 3, 4, 5)], {"perm": [2, 0, 3, 1]}, ["any"]),
    ("broadcast", ALL_DT, [(3, 1, 7)], {"shape": [3, 4, 7]}, ["any"]),
    ("slice", ALL_DT, [(6, 7, 8)], {"starts": [1, 6, 0], "ends": [5, -1, 8], "steps": [2, -2, 3]}, ["any"]),
    ("concat", ALL_DT, [(2, 3, 4), (2, 1, 4), (2, 0, 4), (2, 2, 4)], {"axis": 1}, ["any"] * 4),
    ("pad", ALL_DT, [(2, 3, 4)], {"pads": [1, 0, 2, 0, 3, 1], "value": 1.0, "interior": [0, 2, 1]}, ["any"]),
    ("gather", ALL_DT, [(5, 6, 4), (2, 3)], {"axis": 1}, ["any", "i64idx:6"]),
    ("gather", ALL_DT, [(5, 6), (4,)], {"axis": 0}, ["any", "i32idx:5"]),
    ("gather_nd", ALL_DT, [(4, 5, 6), (3, 2)], {"batch_dims": 0}, ["any", "i64idx:4"]),
    ("gather_nd", ALL_DT, [(2, 5, 6), (2, 3, 1)], {"batch_dims": 1}, ["any", "i32idx:5"]),
    ("scatter_nd", ALL_DT, [(5, 4), (3, 1), (3, 4)], {"reduction": "none"}, ["any", "i64idx:5u", "any"]),
    ("scatter_nd", NUMERIC, [(5, 4), (6, 1), (6, 4)], {"reduction": "add"}, ["small", "i64idx:5", "small"]),
    ("scatter_nd", NUMERIC, [(5, 4), (6, 1), (6, 4)], {"reduction": "mul"}, ["small", "i64idx:5", "small"]),
    ("scatter_nd", NUMERIC, [(5, 4), (6, 1), (6, 4)], {"reduction": "max"}, ["any", "i64idx:5", "any"]),
    ("scatter_nd", NUMERIC, [(5, 4), (6, 1), (6, 4)], {"reduction": "min"}, ["any", "i64idx:5", "any"]),
    ("reduce_sum", NUMERIC, [(4, 5, 6)], {"axes": [0, 2], "keepdims": 1}, ["small"]),
    ("reduce_sum", NUMERIC, [(4, 5, 6)], {"axes": [1], "keepdims": 0}, ["small"]),
    ("reduce_sum", NUMERIC, [(4, 0, 6)], {"axes": [1], "keepdims": 0}, ["small"]),
    ("reduce_prod", NUMERIC, [(4, 3, 2)], {"axes": [1, 2], "keepdims": 0}, ["small"]),
    ("reduce_max", ALL_DT, [(4, 5, 6)], {"axes": [2], "keepdims": 1}, ["any"]),
    ("reduce_min", ALL_DT, [(4, 5, 6)], {"axes": [0, 1, 2], "keepdims": 0}, ["any"]),
    ("reduce_max", NUMERIC, [(4, 0, 6)], {"axes": [1], "keepdims": 1}, ["any"]),
    ("argmax", NUMERIC, [(4, 5, 6)], {"axis": 1, "keepdims": 1, "select_last_index": 0}, ["small"]),
    ("argmax", NUMERIC, [(4, 5, 6)], {"axis": 2, "keepdims": 0, "select_last_index": 1}, ["small"]),
    ("argmin", NUMERIC, [(4, 5, 6)], {"axis": 0, "keepdims": 0, "select_last_index": 0}, ["small"]),
    ("argmin", NUMERIC, [(4, 5, 6)], {"axis": 1, "keepdims": 1, "select_last_index": 1}, ["small"]),
    ("matmul", NUMERIC, [(3, 4), (4, 5)], {}, ["small", "small"]),
    ("matmul", NUMERIC, [(2, 37, 53), (2, 53, 41)], {}, ["small", "small"]),
    ("conv", NUMERIC, [(2, 4, 9, 8), (6, 2, 3, 2), (6,)], {"strides": [2, 1], "dilations": [1, 2],
                                                             "pads": [1, 0, 2, 1], "group": 2},
     ["small", "small", "small"]),
    ("conv", NUMERIC, [(1, 3, 10), (4, 3, 3), (4,)], {"strides": [1], "dilations": [1], "pads": [1, 1]},
     ["small"] * 3),
    ("conv", NUMERIC, [(1, 2, 4, 5, 4), (3, 2, 2, 3, 2), (3,)], {"strides": [1, 2, 1], "dilations": [1, 1, 1],
                                                                "pads": [0, 1, 1, 1, 0, 0]}, ["small"] * 3),
    ("conv", NUMERIC, [(2, 8, 6, 6), (16, 8, 1, 1), (16,)], {"strides": [1, 1], "dilations": [1, 1],
                                                              "pads": [0, 0, 0, 0]}, ["small"] * 3),
    ("conv", FLOATS, [(1, 8, 20, 20), (16, 8, 3, 3), (16,)], {"strides": [1, 1], "dilations": [1, 1],
                                                               "pads": [1, 1, 1, 1]}, ["small"] * 3),
    ("max_pool", NUMERIC, [(2, 3, 7, 8)], {"kernel": [3, 2], "strides": [2, 2], "dilations": [1, 2],
                                           "pads": [1, 0, 1, 1]}, ["any"]),
    ("avg_pool", FLOATS, [(2, 3, 7, 8)], {"kernel": [3, 3], "strides": [2, 1], "dilations": [1, 1],
                                          "pads": [1, 1, 1, 1], "count_include_pad": 0}, ["any"]),
    ("avg_pool", FLOATS, [(1, 2, 9)], {"kernel": [4], "strides": [3], "dilations": [1], "pads": [2, 1],
                                       "count_include_pad": 1}, ["any"]),
]
CASES += [("cast", ALL_DT, [S], {"to": to}, ["cast"]) for to in ALL_DT]
CASES += [("bitcast", ("float32", "int32", "uint32"), [S], {"to": to}, ["any"]) for to in ("float32", "int32",
                                                                                        "uint32")]
ACCUMULATING = {"matmul", "conv", "avg_pool", "reduce_sum", "reduce_prod"}
EXACT_FLOAT = {"copy", "reshape", "transpose", "broadcast", "slice", "concat", "pad", "gather", "gather_nd",
               "scatter_nd", "select", "neg", "abs", "max", "min", "floor", "ceil", "round", "isnan", "isinf",
               "eq", "lt", "le", "gt", "ge", "bitcast", "max_pool", "reduce_max", "reduce_min", "argmax", "argmin",
               "add", "sub", "mul", "div", "sign"}


def make_input(kind, shape, dt, rng):
    npd = TensorType(dt, ()).dtype.np
    n = int(np.prod(shape))
    if kind == "bool" or dt == "bool":
        return rng.random(shape) < 0.5
    if kind.startswith(("i64idx", "i32idx")):
        dim = kind.split(":")[1]
        unique = dim.endswith("u")
        dim = int(dim.rstrip("u"))
        t = np.int64 if kind.startswith("i64") else np.int32
        if unique:
            flat = rng.permutation(dim)[:n]
            return flat.reshape(shape).astype(t)
        return rng.integers(0, dim, shape).astype(t)
    if dt in FLOATS:
        if kind == "small":
            x = rng.integers(-4, 5, shape).astype(np.float64) * 0.5 + (rng.random(shape) * 0.25 if dt != "bfloat16"
                                                                       else 0)
        else:
            x = rng.standard_normal(shape) * 2.0
            if kind == "cast":
                x = x * 100
            if kind in ("any", "cast") and n >= 8:
                flat = x.reshape(-1)
                flat[:5] = [np.nan, np.inf, -np.inf, 0.0, -0.0]
            if kind == "nz":
                x[x == 0] = 1.0
        return x.astype(npd)
    info = np.iinfo(npd)
    if kind in ("small", "cast"):
        lo, hi = (-5, 6) if dt in SIGNED else (0, 6)
        if kind == "cast":
            lo, hi = max(info.min, -300), min(info.max, 300)
        return rng.integers(lo, hi, shape).astype(npd)
    if kind == "shift":
        return rng.integers(0, info.bits + 3, shape).astype(npd)
    x = rng.integers(info.min, info.max, shape, dtype=npd, endpoint=True)
    if kind == "nz":
        x[x == 0] = 1
        if dt in SIGNED and n >= 2:
            x.reshape(-1)[0] = -1  # INT_MIN / -1 below
    if kind == "any" and dt in SIGNED and n >= 2:
        x.reshape(-1)[0] = info.min
    return x


def build(dt, rng):
    """One Function holding every case of dtype ``dt``; returns (function, [(case id, op, inputs, attrs)])."""
    fn = Function(f"prims_{dt}")
    b = Builder(fn, where="test", fold=False)
    cases, outs, names = [], [], []
    for ci, (op, dts, shapes, attrs, kinds) in enumerate(CASES):
        if dt not in dts:
            continue
        arrays = []
        for k, (shape, kind) in enumerate(zip(shapes, kinds)):
            a_dt = dt
            if kind == "bool":
                a_dt = "bool"
            elif kind.startswith("i64"):
                a_dt = "int64"
            elif kind.startswith("i32"):
                a_dt = "int32"
            arrays.append(make_input(kind, shape, a_dt, rng))
        vals = [fn.add_input(f"c{ci}_in{k}", TensorType(TensorType(a.dtype, ()).dtype, a.shape))
                for k, a in enumerate(arrays)]
        out = b.emit(op, *vals, **attrs)
        outs.append(out)
        names.append(f"c{ci}_out")
        cases.append((f"{op}{attrs}", op, arrays, attrs, {v.name: a for v, a in zip(vals, arrays)}))
    fn.set_outputs(outs, names)
    return fn, cases


def compile_cpu(fn, **options):
    irf = generate_ir(fn)
    share_buffers(irf)
    verify_ir(irf)
    backend = CPUBackend()
    attach_scratch(irf, backend.scratch_bytes)
    plan_memory(irf)
    return irf, backend.compile(irf, {"num_threads": 1, **options})


def tolerance(op, dt):
    if dt in ("float16", "bfloat16"):
        ulp = 2.0 ** -10 if dt == "float16" else 2.0 ** -7
        return (4 * ulp if op in ACCUMULATING else 1.01 * ulp), 1e-6
    eps = 1.2e-7 if dt != "float64" else 2.3e-16
    return (1e3 * eps if op in ACCUMULATING else 8 * eps), (1e3 * eps if op in ACCUMULATING else 0)


def check(case_id, op, got, want, in_dt):
    assert got.dtype == want.dtype and got.shape == want.shape, f"{case_id}: {got.dtype}{got.shape} vs " \
                                                                f"{want.dtype}{want.shape}"
    if want.dtype.kind in "biu" or op in EXACT_FLOAT:
        if want.dtype.kind == "f" or want.dtype in (np.dtype(ml_dtypes.bfloat16),):
            g, w = got.astype(np.float64), want.astype(np.float64)
            ok = (g == w) | (np.isnan(g) & np.isnan(w))
            if op in ("add", "sub", "mul", "div") and in_dt in ("float16", "bfloat16", "float32", "float64"):
                rtol, atol = tolerance(op, in_dt)
                ok |= np.isclose(g, w, rtol=rtol, atol=atol)
            assert ok.all(), f"{case_id}: got {g[~ok][:5]} want {w[~ok][:5]}"
        else:
            np.testing.assert_array_equal(got, want, err_msg=case_id)
        return
    rtol, atol = tolerance(op, in_dt if in_dt in FLOATS else want.dtype.name)
    g, w = got.astype(np.float64), want.astype(np.float64)
    scale = np.abs(w[np.isfinite(w)]).max() if np.isfinite(w).any() else 1.0
    if op in ACCUMULATING:
        atol = atol * max(scale, 1.0) * 10
    ok = (np.isnan(g) & np.isnan(w)) | (g == w) | (np.abs(g - w) <= atol + rtol * np.abs(w))
    assert ok.all(), f"{case_id}: got {g[~ok][:5]} want {w[~ok][:5]}"


@pytest.mark.parametrize("dt", ALL_DT)
def test_primitives(dt):
    rng = np.random.default_rng(abs(hash(dt)) % 2 ** 32)
    fn, cases = build(dt, rng)
    irf, cf = compile_cpu(fn)
    feed = {k: a for c in cases for k, a in c[4].items()}
    got = cf.execute(feed)
    failures = []
    for name, (case_id, op, arrays, attrs, _) in zip(fn.output_names, cases):
        want = run_primitive(op, arrays, attrs, [got[name].dtype])[0]
        try:
            check(f"{dt} {case_id}", op, got[name], want, dt)
        except AssertionError as e:
            failures.append(str(e)[:400])
    assert not failures, "\n".join(failures)


STORAGE = ("float8e4m3fn", "float8e4m3fnuz", "float8e5m2", "float8e5m2fnuz", "float4e2m1", "int4", "uint4", "int2",
           "uint2", "float8e8m0", "float6e2m3", "float6e3m2")


@pytest.mark.parametrize("saturate", [0, 1])
def test_storage_only_casts_and_movement(saturate):
    """Casts to and from the storage-only 1-byte types (all sources), and moving them, match the reference."""
    rng = np.random.default_rng(7)
    fn = Function("storage")
    b = Builder(fn, where="test", fold=False)
    outs, names, feed, cases = [], [], {}, []
    srcs = ("float32", "float64", "float16", "bfloat16", "int32", "uint8")
    for k, st in enumerate(STORAGE):
        for j, src in enumerate(srcs):
            x = make_input("cast", (64,), src, rng)
            if src in FLOATS:
                x = (x.astype(np.float64) * rng.choice([1e-3, 1e-1, 1, 1e2, 1e5], 64)).astype(x.dtype)
            v = fn.add_input(f"s{k}_{j}", TensorType(src, x.shape))
            feed[v.name] = x
            cases.append((f"{src}->{st}", "cast", [x], {"to": st, "saturate": saturate}))
            outs.append(b.emit("cast", v, to=st, saturate=saturate))
            names.append(f"o{len(names)}")
        codes = np.arange(256, dtype=np.uint8)
        valid = np.asarray(run_primitive("cast", [codes.view(TensorType(st, ()).dtype.np)], {"to": st})[0])
        v = fn.add_input(f"b{k}", TensorType(st, (256,)))
        feed[v.name] = valid
        for to in ("float32", "float16", "int32", "bool", STORAGE[(k + 1) % len(STORAGE)]):
            cases.append((f"{st}->{to}", "cast", [valid], {"to": to, "saturate": saturate}))
            outs.append(b.emit("cast", v, to=to, saturate=saturate))
            names.append(f"o{len(names)}")
        r = b.emit("reshape", v, shape=[16, 16])
        cases.append((f"transpose {st}", "transpose", [valid.reshape(16, 16)], {"perm": [1, 0]}))
        outs.append(b.emit("transpose", r, perm=[1, 0]))
        names.append(f"o{len(names)}")
    fn.set_outputs(outs, names)
    _, cf = compile_cpu(fn)
    got = cf.execute(feed)
    bad = []
    for name, (cid, op, arrays, attrs) in zip(names, cases):
        want = run_primitive(op, arrays, attrs, [got[name].dtype])[0]
        g, w = got[name].view(np.uint8) if got[name].dtype.itemsize == 1 else got[name], want
        w = w.view(np.uint8) if w.dtype.itemsize == 1 else w
        if not np.array_equal(g, w, equal_nan=g.dtype.kind == "f"):
            bad.append(f"{cid}: {int((g != w).sum())} differ")
    assert not bad, bad
