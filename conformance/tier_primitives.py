"""Tier "primitives": every primitive x every dtype it accepts x shapes x attribute variants, one line each.

Shapes cover scalars, single elements, odd and prime sizes, sizes around the 8/16/64-element vector widths
and tile edges, zero-size tensors and one large tensor; inputs are seeded random values in the primitive's
domain plus a "specials" variant (NaN, +-inf, -0.0, denormals, extremes, rounding ties) where meaningful.
Each case runs a one-node graph through the backend; the expectation is the reference interpreter's kernel,
or, when the backend under test is the interpreter, the independent oracle in ``oracles.py``.
"""
from __future__ import annotations

import zlib

import ml_dtypes
import numpy as np

from glow_core.ops.registry import PRIMITIVES
from glow_core.types import FLOATS, INTS, NUMERIC, dtype as gdtype

from . import oracles as O
from .cases import Case, CaseFailure, profiles_for
from .checker import compare
from .harness import reference_primitive, run_primitive

BOOL = ("bool",)
MAIN = NUMERIC + BOOL
SHAPES = [(), (1,), (7,), (8,), (9,), (16,), (17,), (63,), (65,), (0,), (3, 0, 2), (3, 5, 7), (2, 3, 4, 17)]
LARGE = (129, 517)  # 66693 elements: many vector widths and a partial last tile
LARGE_DTYPES = ("float32", "float16", "int32", "int8", "bool")


def seed_of(case_id: str) -> int:
    return zlib.crc32(case_id.encode())


# -- input generation ------------------------------------------------------------------------------------
def rand(dt: str, shape, rng, lo=-10.0, hi=10.0):
    d = gdtype(dt)
    if d.is_bool:
        return rng.random(shape) < 0.5
    if d.is_int:
        ii = np.iinfo(d.np) if d.itemsize >= 1 and d.np.kind in "iu" else ml_dtypes.iinfo(d.np)
        a, b = max(int(lo), int(ii.min)), min(int(hi), int(ii.max))
        return rng.integers(a, b, size=shape, endpoint=True).astype(d.np)
    return rng.uniform(lo, hi, size=shape).astype(np.float32 if d.itemsize < 4 else np.float64).astype(d.np)


def full_range(dt, shape, rng):
    d = gdtype(dt)
    if d.is_int:
        ii = np.iinfo(d.np)
        return rng.integers(int(ii.min), int(ii.max), size=shape, endpoint=True, dtype=d.np)
    return rand(dt, shape, rng)


def specials(dt: str) -> np.ndarray:
    d = gdtype(dt)
    if d.is_bool:
        return np.array([False, True])
    if d.is_int:
        ii = np.iinfo(d.np)
        vals = {int(ii.min), int(ii.min) + 1, int(ii.max), int(ii.max) - 1, 0, 1, 2, 3, 7}
        if d.kind == "int":
            vals |= {-1, -2, -7}
        return np.array(sorted(vals)).astype(d.np)
    fi = O.np.finfo(d.np) if dt in ("float32", "float64", "float16") else ml_dtypes.finfo(d.np)
    tiny = float(fi.tiny)
    vals = [np.nan, np.inf, -np.inf, 0.0, -0.0, tiny / 4, -tiny / 4, tiny, float(fi.max), -float(fi.max), 1.0,
            -1.0, 0.5, -0.5, 1.5, 2.5, -2.5, 3.0, 1e-3, 100.0, 0.75, -3.5]
    return np.array(vals, dtype=np.float64).astype(np.float32 if d.itemsize < 4 else np.float64).astype(d.np)


def pairs(a: np.ndarray):
    """All ordered pairs of the values of a (two flat arrays)."""
    i, j = np.meshgrid(np.arange(a.size), np.arange(a.size), indexing="ij")
    return a[i.reshape(-1)], a[j.reshape(-1)]


# -- elementwise input domains --------------------------------------------------------------------------------
DOMAIN = {"log": (0.01, 100), "sqrt": (0, 100), "reciprocal": (0.1, 10), "tan": (-1.3, 1.3), "asin": (-0.99, 0.99),
          "acos": (-0.99, 0.99), "atanh": (-0.99, 0.99), "acosh": (1, 10), "sinh": (-5, 5), "cosh": (-5, 5),
          "tanh": (-5, 5), "erf": (-3, 3)}


def _ew_inputs(prim, dt, shape, rng, variant):
    p = PRIMITIVES[prim]
    nin = len(p.inputs)
    if variant == "specials":
        s = specials(dt)
        if nin == 1:
            return [s]
        a, b = pairs(s)
        if prim in ("div", "mod") and gdtype(dt).is_int:
            keep = b != 0
            a, b = a[keep], b[keep]
        if prim == "pow" and gdtype(dt).is_int:
            b = np.abs(b.astype(np.int64)) % 5
            b = b.astype(gdtype(dt).np)
        if prim in ("shl", "shr"):
            b = (b.astype(np.uint64) % np.uint64(gdtype(dt).itemsize * 8 + 3)).astype(gdtype(dt).np)
        return [a, b]
    d = gdtype(dt)
    if nin == 1:
        if prim in ("floor", "ceil", "round"):
            x = np.where(rng.random(shape) < 0.5, rng.integers(-20, 20, shape) / 2.0, rng.uniform(-10, 10, shape))
            return [np.asarray(x).astype(np.float32).astype(d.np) if d.itemsize < 4 else np.asarray(x, d.np)]
        if d.is_int and prim == "bitwise_not":
            return [full_range(dt, shape, rng)]
        lo, hi = DOMAIN.get(prim, (-10, 10))
        if prim == "reciprocal":
            x = rand(dt, shape, rng, lo, hi)
            return [np.where(rng.random(shape) < 0.5, -x, x).astype(x.dtype)]
        if prim in ("isnan", "isinf"):
            x = rand(dt, shape, rng)
            sp = specials(dt)
            pick = rng.integers(0, sp.size, size=shape)
            return [np.where(rng.random(shape) < 0.3, sp[pick], x).astype(x.dtype)]
        return [rand(dt, shape, rng, lo, hi) if d.is_float else full_range(dt, shape, rng)]
    if d.is_bool:
        return [rand(dt, shape, rng), rand(dt, shape, rng)]
    if prim == "pow":
        if d.is_int:
            return [rand(dt, shape, rng, -4, 4), rand(dt, shape, rng, 0, 6)]
        return [rand(dt, shape, rng, 0.1, 4), rand(dt, shape, rng, -3, 3)]
    if prim in ("shl", "shr"):
        return [full_range(dt, shape, rng), rand(dt, shape, rng, 0, d.itemsize * 8 + 2)]
    if d.is_int:
        a, b = full_range(dt, shape, rng), full_range(dt, shape, rng)
        if prim in ("div", "mod"):
            b = np.where(b == 0, np.ones_like(b), b)
            small = rand(dt, shape, rng, -20, 20)  # small divisors too, so that quotients are not all 0/-1
            b = np.where(rng.random(shape) < 0.5, np.where(small == 0, np.ones_like(small), small), b)
        if prim in ("eq", "lt", "le", "gt", "ge"):
            b = np.where(rng.random(shape) < 0.3, a, b)  # equal operands too
        return [a, b]
    a = (rng.standard_normal(shape) * 10.0 ** rng.uniform(-2, 2, shape))
    b = (rng.standard_normal(shape) * 10.0 ** rng.uniform(-2, 2, shape))
    if prim in ("eq", "lt", "le", "gt", "ge", "max", "min"):
        b = np.where(rng.random(shape) < 0.3, a, b)
    if prim == "mod":
        b = np.where(rng.random(shape) < 0.5, 1, -1) * rng.uniform(0.5, 5, shape)
    cv = (lambda v: np.asarray(v).astype(np.float32).astype(d.np)) if d.itemsize < 4 else (
        lambda v: np.asarray(v).astype(d.np))
    return [cv(a), cv(b)]


def _ew_oracle(prim, arrays, attrs):
    if len(arrays) == 1:
        return O.unary(prim, arrays[0]), None
    if prim == "select":
        return np.where(*arrays), None
    return O.binary(prim, *arrays, **attrs), None


# -- case construction ---------------------------------------------------------------------------------------
def _describe(prim, dt, arrays, attrs, seed):
    shapes = ", ".join(f"{a.dtype}{list(a.shape)}" for a in arrays)
    return f"primitive {prim} dtype {dt}: operands {shapes}, attributes {attrs or '{}'}, seed {seed}"


def make_case(prim, dt, variant, make, attrs=None, oracle=None, n_of=None, profiles=None):
    """One case: ``make(rng)`` returns the operands; ``oracle(arrays, attrs)`` -> (expected, magnitude). The
    tolerance is the class the primitive's record names."""
    attrs = dict(attrs or {})
    case_id = f"primitives/{prim}/{dt}/{variant}"
    seed = seed_of(case_id)
    tol = PRIMITIVES[prim].tolerance

    def run(ctx):
        arrays = make(np.random.default_rng(seed))
        got = grouped_outputs(ctx, prim, dt, case_id) if ctx.group_compile else None
        if got is not None:
            try:
                check(ctx, arrays, got)
                return
            except CaseFailure:
                pass  # the fast path only ever passes a case: a failure is decided by the case compiled alone
        check(ctx, arrays, run_primitive(ctx.backend, prim, arrays, attrs))

    def check(ctx, arrays, got):
        if ctx.is_reference:
            r = oracle(arrays, attrs)
            wants, mags = ([r[0]], [r[1]]) if not isinstance(r, list) else ([x[0] for x in r], [x[1] for x in r])
        else:
            wants, mags = reference_primitive(prim, arrays, attrs), None
            mags = _magnitudes(prim, arrays, attrs, wants)
        n = n_of(arrays, attrs) if n_of else 1
        for i, (g, w) in enumerate(zip(got, wants)):
            compare(g, np.asarray(w), tol, _describe(prim, dt, arrays, attrs, seed), ctx.rerun(case_id), n=n,
                    magnitude=mags[i] if mags else None, name=f"output y{i}")
    GROUPS.setdefault((prim, dt), []).append((case_id, make, attrs, seed))
    return Case(case_id, "primitives", prim, dt, run, profiles or profiles_for(dt),
                {"variant": variant, "attrs": attrs, "seed": seed, "tolerance": tol, "make": make, "oracle": oracle,
                 "n_of": n_of})


#: (primitive, dtype) -> [(case id, make, attrs, seed)]: the cases compiled together by ``grouped_outputs``
GROUPS: dict = {}


def grouped_outputs(ctx, prim, dt, case_id):
    """This case's outputs from one function holding every case of (prim, dtype) the backend supports, compiled
    and run once per session (a fast path for backends with slow compilers); None when unavailable."""
    key = ("group", prim, dt)
    if key not in ctx.cache:
        ctx.cache[key] = {}
        from glow_core.api import compile_graph
        from glow_core.builder import Builder
        from glow_core.graph import Function
        from glow_core.types import tensor_type_of
        from .harness import check_supported
        try:
            fn = Function(f"conformance_{prim}_{dt}")
            feeds, names = {}, {}
            for k, (cid, mk, at, sd) in enumerate(GROUPS.get((prim, dt), [])):
                arrays = mk(np.random.default_rng(sd))
                try:
                    check_supported(ctx.backend, prim, arrays, at)
                except Exception:  # noqa: BLE001  (declined cases run, and skip, on their own)
                    continue
                vals = [fn.add_input(f"c{k}_x{i}", tensor_type_of(np.asarray(a))) for i, a in enumerate(arrays)]
                feeds.update({f"c{k}_x{i}": np.ascontiguousarray(a).reshape(np.shape(a)) for i, a in enumerate(arrays)})
                out = Builder(fn, where=f"case {cid}", fold=False, name=f"c{k}").emit(prim, *vals, **at)
                names[cid] = [f"c{k}_y{i}" for i in range(len(out if isinstance(out, list) else [out]))]
                fn.outputs += out if isinstance(out, list) else [out]
                fn.output_names += names[cid]
            if names:
                res = compile_graph(fn, ctx.backend, {"optimize": False})
                outs = res.compiled.execute({k: v for k, v in feeds.items() if k in res.ir.inputs})
                ctx.cache[key] = {cid: [np.asarray(outs[n]) for n in ns] for cid, ns in names.items()}
        except Exception:  # noqa: BLE001  (any trouble: every case of the group runs alone)
            ctx.cache[key] = {}
    return ctx.cache[key].get(case_id)


def _magnitudes(prim, arrays, attrs, wants):
    """|terms| sums for accumulating primitives (the tolerance scale when the expectation is the interpreter)."""
    fam = PRIMITIVES[prim].family
    if fam not in ("matmul", "conv", "pool", "reduce") or not O.is_float(arrays[0].dtype):
        return None
    absd = [np.abs(a.astype(np.float64)) if O.is_float(a.dtype) else a for a in arrays]
    if prim == "matmul":
        return [O.matmul(*absd)[1]]
    if prim == "conv":
        return [O.conv(*absd, **attrs)[1]]
    if prim == "avg_pool":
        return [O.avg_pool(absd[0], **attrs)[1]]
    if prim in ("reduce_sum",):
        return [O.reduce("reduce_sum", absd[0], **attrs)[1]]
    return None


def elementwise_cases():
    out = []
    for prim, p in PRIMITIVES.items():
        if p.family != "elementwise" or prim not in O.ELEMENTWISE:
            continue
        dts = (MAIN if prim == "select" else p.dtypes)
        for dt in dts:
            attr_variants = [{"fmod": 0}, {"fmod": 1}] if prim == "mod" else [{}]
            for attrs in attr_variants:
                tag = f"fmod{attrs['fmod']}/" if attrs else ""
                shapes = list(SHAPES) + ([LARGE] if dt in LARGE_DTYPES else [])
                for shape in shapes:
                    label = "x".join(map(str, shape)) if shape else "scalar"
                    if prim == "select":
                        def mk(rng, shape=shape, dt=dt):
                            return [rng.random(shape) < 0.5, rand(dt, shape, rng), rand(dt, shape, rng)]
                    else:
                        def mk(rng, prim=prim, dt=dt, shape=shape):
                            return _ew_inputs(prim, dt, shape, rng, "random")
                    out.append(make_case(prim, dt, f"{tag}{label}", mk, attrs,
                                         lambda a, at, prim=prim: _ew_oracle(prim, a, at)))
                if prim != "select" and not (dt == "bool" and len(p.inputs) == 1 and prim != "not"):
                    out.append(make_case(prim, dt, f"{tag}specials",
                                         lambda rng, prim=prim, dt=dt: _ew_inputs(prim, dt, (), rng, "specials"),
                                         attrs, lambda a, at, prim=prim: _ew_oracle(prim, a, at)))
    return out


CAST_DTYPES = FLOATS + INTS + BOOL
STORAGE = ("float8e4m3fn", "float8e4m3fnuz", "float8e5m2", "float8e5m2fnuz", "float4e2m1", "int4", "uint4",
           "float6e2m3", "float6e3m2", "int2", "uint2")


def cast_cases():
    out = []
    for src in CAST_DTYPES:
        for dst in CAST_DTYPES:
            for variant in ("random", "specials", "17x0", "65"):
                def mk(rng, src=src, variant=variant):
                    if variant == "specials":
                        s = specials(src)
                        if gdtype(dst).is_int and gdtype(src).is_float:
                            # the contract leaves float -> integer undefined at |x| >= 2**63 and for +-inf
                            s = s[~(np.abs(s.astype(np.float64)) >= 2.0 ** 63)]
                        return [s]
                    shape = {"random": (3, 11), "17x0": (17, 0), "65": (65,)}[variant]
                    return [full_range(src, shape, rng) if gdtype(src).is_int else rand(src, shape, rng, -300, 300)]
                out.append(make_case("cast", src, f"to_{dst}/{variant}", mk, {"to": dst},
                                     lambda a, at: (O.cast(a[0], at["to"]), None),
                                     profiles=profiles_for(src) + profiles_for(dst)))
    for st in STORAGE:  # float32 <-> storage-only types, values inside the target's range
        d = gdtype(st)
        lim = 3.0 if d.itemsize == 1 and "4" in st or "6" in st or st.endswith("2") else 100.0

        def mk_to(rng, st=st, lim=lim):
            if gdtype(st).is_int:
                ii = ml_dtypes.iinfo(gdtype(st).np)
                return [rng.integers(int(ii.min), int(ii.max), size=(5, 13), endpoint=True).astype(np.float32)]
            return [rng.uniform(-lim, lim, (5, 13)).astype(np.float32).astype(gdtype(st).np).astype(np.float32)]

        def oracle_to(a, at):
            return a[0].astype(gdtype(at["to"]).np), None
        out.append(make_case("cast", "float32", f"to_{st}/in_range", mk_to, {"to": st}, oracle_to,
                             profiles=("storage-formats",)))

        def mk_from(rng, st=st):
            return [mk_to(rng)[0].astype(gdtype(st).np)]
        out.append(make_case("cast", st, "to_float32/all", mk_from, {"to": "float32"},
                             lambda a, at: (a[0].astype(np.float32), None), profiles=("storage-formats",)))
    by_size = {}
    for dt in FLOATS + INTS:
        by_size.setdefault(gdtype(dt).itemsize, []).append(dt)
    for group in by_size.values():
        for src in group:
            for dst in group:
                for shape in ((), (7,), (4, 33)):
                    def mk(rng, src=src, shape=shape):
                        raw = rng.integers(0, 256, size=int(np.prod(shape)) * gdtype(src).itemsize, dtype=np.uint8)
                        return [raw.view(gdtype(src).np).reshape(shape)]
                    label = "x".join(map(str, shape)) or "scalar"
                    out.append(make_case("bitcast", src, f"to_{dst}/{label}", mk, {"to": dst},
                                         lambda a, at: (O.bitcast(a[0], at["to"]), None)))
    return out


STORAGE_SOURCES = ("float32", "float64", "float16", "bfloat16", "int32", "uint8")


def _storage_values(st, n, rng):
    """``n`` representable values of storage type ``st`` (no NaN; infinities where the type has them)."""
    d = gdtype(st)
    if d.is_int:
        ii = ml_dtypes.iinfo(d.np)
        return rng.integers(int(ii.min), int(ii.max), size=n, endpoint=True).astype(d.np)
    codes = np.arange(256, dtype=np.uint8).view(d.np) if d.itemsize == 1 and "4" not in st and "6" not in st \
        else (np.arange(-64, 65) / 8.0).astype(d.np)
    vals = np.unique(codes.astype(np.float64))
    vals = vals[~np.isnan(vals)]
    return rng.choice(vals, size=n).astype(d.np)


def storage_cases():
    """Casts to the storage-only types from several sources with values far outside their range (saturate 0 and
    1), casts from every value of a storage type to other types, and moving storage-type elements."""
    out = []
    for st in STORAGE:
        for src in STORAGE_SOURCES:
            for sat in (0, 1):
                def mk(rng, src=src, st=st):
                    if gdtype(src).is_int:
                        return [full_range(src, (64,), rng)]
                    x = (rng.standard_normal(64) * rng.choice([1e-3, 1e-1, 1.0, 1e2, 1e5], 64)).astype(gdtype(src).np)
                    if gdtype(st).is_int:  # NaN and +-inf (1e5 overflows float16) to an integer are undefined
                        return [x[np.isfinite(x.astype(np.float64))]]
                    if st.startswith(("float4", "float6")):
                        return [x]  # NaN is undefined for these targets
                    x[:3] = [np.nan, np.inf, -np.inf]
                    return [x]
                out.append(make_case("cast", src, f"to_{st}/saturate{sat}/wide_range", mk,
                                     {"to": st, "saturate": sat},
                                     lambda a, at: (O.cast_storage(a[0], at["to"], at["saturate"]), None),
                                     profiles=("storage-formats",)))
        nxt = STORAGE[(STORAGE.index(st) + 1) % len(STORAGE)]
        for to in ("float16", "int32", "bool", nxt):
            def mk_from(rng, st=st, to=to):
                x = _storage_values(st, 96, rng)
                if to == "int32" and gdtype(st).is_float:
                    x = x[np.isfinite(x.astype(np.float64))]  # +-inf to an integer is undefined
                return [x]
            out.append(make_case("cast", st, f"to_{to}/values", mk_from, {"to": to},
                                 lambda a, at: (O.cast_storage(a[0], at["to"]), None), profiles=("storage-formats",)))
        for prim, shape, attrs, oracle in (
                ("transpose", (4, 6), {"perm": [1, 0]}, lambda a, at: np.transpose(a[0]).copy()),
                ("reshape", (4, 6), {"shape": [3, 8]}, lambda a, at: a[0].reshape(at["shape"])),
                ("concat", (4, 6), {"axis": 1}, lambda a, at: np.concatenate([a[0], a[0]], 1)),
                ("slice", (4, 6), {"starts": [3, 1], "ends": [-1, 6], "steps": [-2, 2]},
                 lambda a, at: O.slice_(a[0], **at))):
            def mk_mv(rng, st=st, shape=shape, prim=prim):
                x = _storage_values(st, int(np.prod(shape)), rng).reshape(shape)
                return [x, x] if prim == "concat" else [x]
            out.append(make_case(prim, st, f"storage/{prim}", mk_mv, attrs, lambda a, at, o=oracle: (o(a, at), None),
                                 profiles=("storage-formats",)))
    return out


def _num_range(dt, rng, shape, small=False):
    d = gdtype(dt)
    if d.is_float:
        return rand(dt, shape, rng, -2, 2)
    if d.kind == "uint":
        return rand(dt, shape, rng, 0, 15 if small else 100)
    return rand(dt, shape, rng, -8 if small else -100, 8 if small else 100)


MATMUL_SHAPES = [((1, 1), (1, 1)), ((3, 5), (5, 7)), ((8, 8), (8, 8)), ((16, 17), (17, 15)), ((1, 64), (64, 65)),
                 ((2, 9, 33), (2, 33, 5)), ((2, 3, 4, 6), (2, 3, 6, 2)), ((2, 0), (0, 3)), ((0, 4), (4, 3)),
                 ((33, 129), (129, 31)), ((2, 37, 53), (2, 53, 41))]


def matmul_cases():
    out = []
    for dt in NUMERIC:
        for sa, sb in MATMUL_SHAPES:
            label = f"{'x'.join(map(str, sa))}@{'x'.join(map(str, sb))}"
            out.append(make_case("matmul", dt, label,
                                 lambda rng, dt=dt, sa=sa, sb=sb: [_num_range(dt, rng, sa), _num_range(dt, rng, sb)],
                                 {}, lambda a, at: O.matmul(*a), n_of=lambda a, at: a[0].shape[-1]))
        if gdtype(dt).is_int:
            out.append(make_case("matmul", dt, "wraparound/5x9@9x4",
                                 lambda rng, dt=dt: [full_range(dt, (5, 9), rng), full_range(dt, (9, 4), rng)],
                                 {}, lambda a, at: O.matmul(*a)))
    return out


# (x shape, w shape, strides, dilations, pads, group)
CONV_VARIANTS = {
    "1d": ((1, 3, 11), (4, 3, 3), [1], [1], [0, 0], 1),
    "2d_pad1": ((1, 3, 8, 8), (5, 3, 3, 3), [1, 1], [1, 1], [1, 1, 1, 1], 1),
    "2d_stride2_asym_pads": ((2, 4, 9, 7), (6, 4, 3, 2), [2, 2], [1, 1], [0, 1, 1, 0], 1),
    "2d_dilation2": ((1, 2, 10, 10), (3, 2, 3, 3), [1, 1], [2, 2], [0, 0, 0, 0], 1),
    "2d_stride_dilation_3x1": ((1, 2, 13, 11), (3, 2, 2, 3), [3, 1], [2, 3], [1, 0, 2, 1], 1),
    "2d_group2": ((1, 4, 7, 7), (6, 2, 3, 3), [1, 1], [1, 1], [1, 1, 1, 1], 2),
    "2d_depthwise": ((1, 6, 9, 9), (6, 1, 3, 3), [2, 2], [1, 1], [1, 1, 1, 1], 6),
    "2d_depthwise_batch2_pad_past_kernel": ((2, 5, 6, 7), (5, 1, 3, 3), [1, 1], [1, 1], [3, 0, 1, 4], 5),
    "2d_depthwise_stride_dilation": ((1, 4, 11, 10), (4, 1, 3, 2), [2, 3], [2, 2], [0, 2, 1, 1], 4),
    "1d_depthwise_dilated": ((1, 3, 17), (3, 1, 4), [1], [3], [2, 5], 3),
    "3d_depthwise": ((1, 3, 4, 5, 6), (3, 1, 2, 3, 3), [1, 2, 1], [1, 1, 2], [1, 0, 1, 0, 1, 2], 3),
    "2d_channel_multiplier2": ((1, 3, 7, 7), (6, 1, 3, 3), [1, 1], [1, 1], [1, 1, 1, 1], 3),
    "2d_1x1_wide": ((1, 17, 5, 5), (33, 17, 1, 1), [1, 1], [1, 1], [0, 0, 0, 0], 1),
    "2d_full_kernel": ((1, 1, 5, 5), (2, 1, 5, 5), [3, 3], [1, 1], [2, 2, 2, 2], 1),
    "2d_65_channels": ((1, 65, 4, 4), (9, 65, 3, 3), [1, 1], [1, 1], [1, 1, 1, 1], 1),
    "3d": ((1, 2, 4, 5, 6), (3, 2, 2, 3, 2), [1, 2, 1], [1, 1, 2], [1, 0, 1, 0, 1, 1], 1),
    "2d_group2_stride_dilation_batch2": ((2, 4, 9, 8), (6, 2, 3, 2), [2, 1], [1, 2], [1, 0, 2, 1], 2),
    "2d_8x20x20_to_16": ((1, 8, 20, 20), (16, 8, 3, 3), [1, 1], [1, 1], [1, 1, 1, 1], 1),
}


def conv_cases():
    out = []
    for dt in NUMERIC:
        for name, (xs, ws, st, dl, pd, g) in CONV_VARIANTS.items():
            attrs = {"strides": st, "dilations": dl, "pads": pd, "group": g}

            def mk(rng, dt=dt, xs=xs, ws=ws):
                return [_num_range(dt, rng, xs, True), _num_range(dt, rng, ws, True),
                        _num_range(dt, rng, (ws[0],), True)]
            out.append(make_case("conv", dt, name, mk, attrs, lambda a, at: O.conv(*a, **at),
                                 n_of=lambda a, at: int(np.prod(a[1].shape[1:])) + 1))
    return out


# (x shape, kernel, strides, dilations, pads)
POOL_VARIANTS = {
    "1d_k3": ((1, 2, 11), [3], [1], [1], [0, 0]),
    "2d_k2s2": ((1, 3, 8, 8), [2, 2], [2, 2], [1, 1], [0, 0, 0, 0]),
    "2d_k3s2_pad1": ((2, 2, 9, 7), [3, 3], [2, 2], [1, 1], [1, 1, 1, 1]),
    "2d_asym_pads": ((1, 2, 6, 7), [3, 2], [1, 2], [1, 1], [0, 1, 2, 0]),
    "2d_dilated": ((1, 1, 10, 10), [2, 3], [1, 1], [2, 2], [1, 1, 1, 1]),
    "3d": ((1, 2, 5, 4, 6), [2, 2, 3], [1, 2, 1], [1, 1, 1], [0, 1, 0, 1, 1, 1]),
    "2d_global_65": ((1, 65, 6, 6), [6, 6], [1, 1], [1, 1], [0, 0, 0, 0]),
    "2d_dilated_strided_asym": ((2, 3, 7, 8), [3, 2], [2, 2], [1, 2], [1, 0, 1, 1]),
    "1d_k4s3_pads": ((1, 2, 9), [4], [3], [1], [2, 1]),
}


def pool_cases():
    out = []
    for prim, dts in (("max_pool", NUMERIC), ("avg_pool", FLOATS)):
        for dt in dts:
            for name, (xs, k, st, dl, pd) in POOL_VARIANTS.items():
                cips = (0, 1) if prim == "avg_pool" else (None,)
                for cip in cips:
                    attrs = {"kernel": k, "strides": st, "dilations": dl, "pads": pd}
                    if cip is not None:
                        attrs["count_include_pad"] = cip
                    fn = O.max_pool if prim == "max_pool" else O.avg_pool
                    out.append(make_case(prim, dt, name + ("" if cip is None else f"/cip{cip}"),
                                         lambda rng, dt=dt, xs=xs: [_num_range(dt, rng, xs)], attrs,
                                         lambda a, at, fn=fn: fn(a[0], **at),
                                         n_of=lambda a, at: int(np.prod(at["kernel"]))))
    return out


# (shape, axes, keepdims)
REDUCE_VARIANTS = [((3, 5, 7), [0], 1), ((3, 5, 7), [1], 0), ((3, 5, 7), [2], 1), ((3, 5, 7), [0, 2], 0),
                   ((3, 5, 7), [0, 1, 2], 0), ((3, 5, 7), [], 1), ((), [], 0), ((17,), [0], 1),
                   ((4, 0, 3), [1], 1), ((2, 65, 9), [1], 0), ((64, 1031), [1], 0),
                   ((2, 0), [0, 1], 0)]


def reduce_cases():
    out = []
    for prim in ("reduce_sum", "reduce_prod", "reduce_max", "reduce_min"):
        for dt in PRIMITIVES[prim].dtypes:
            for shape, axes, kd in REDUCE_VARIANTS:
                if prim == "reduce_prod" and shape == (64, 1031):
                    continue
                label = f"{'x'.join(map(str, shape)) or 'scalar'}/axes{''.join(map(str, axes)) or '-'}/kd{kd}"

                def mk(rng, dt=dt, shape=shape, prim=prim):
                    if prim == "reduce_prod":
                        if gdtype(dt).is_float:
                            return [rand(dt, shape, rng, 0.5, 1.5)]
                        return [full_range(dt, shape, rng)]
                    if gdtype(dt).is_int and prim == "reduce_sum":
                        return [full_range(dt, shape, rng)]  # sums wrap
                    return [rand(dt, shape, rng) if gdtype(dt).is_float or gdtype(dt).is_bool
                            else full_range(dt, shape, rng)]
                n_of = (lambda a, at: int(np.prod([a[0].shape[i] for i in at["axes"]])))
                out.append(make_case(prim, dt, label, mk, {"axes": axes, "keepdims": kd},
                                     lambda a, at, prim=prim: O.reduce(prim, a[0], **at), n_of=n_of))
    for prim in ("argmax", "argmin"):
        for dt in NUMERIC:
            for axis in (0, 1, 2):
                for kd in (0, 1):
                    for last in (0, 1):
                        attrs = {"axis": axis, "keepdims": kd, "select_last_index": last}
                        out.append(make_case(prim, dt, f"3x5x7/axis{axis}/kd{kd}/last{last}",
                                             lambda rng, dt=dt: [rand(dt, (3, 5, 7), rng, 0, 3)
                                                                 if not gdtype(dt).is_float else
                                                                 np.round(rand(dt, (3, 5, 7), rng, 0, 3))],
                                             attrs, lambda a, at, prim=prim: O.arg(prim, a[0], **at)))
    return out


MOVE_DTYPES = MAIN + ("float8e4m3fn", "int4")


def _mv(dt, shape, rng):
    d = gdtype(dt)
    if d.is_bool or d.is_float and d.itemsize >= 2:
        return rand(dt, shape, rng)
    if d.name in ("int4",) or d.itemsize == 1 and d.is_float:
        return rng.integers(-7, 7, size=shape).astype(np.float32).astype(d.np)
    return full_range(dt, shape, rng)


#: One line per case: (primitive, variant, operand shapes, attributes, oracle). Each line is a case for every dtype
#: the primitive's record accepts (MOVE_DTYPES for the movement primitives), on seeded random operands; the oracle
#: ``(arrays, attrs) -> expected array`` is numpy written from the primitive's definition (None: the one in
#: oracles.py). Adding a primitive adds its line here (see vendor_guide/adding_a_primitive.md).
LINES = [
    ("reshape", "6x4_to_2x3x4", [(6, 4)], {"shape": [2, 3, 4]}, lambda a, at: a[0].reshape(at["shape"])),
    ("reshape", "scalar_to_1x1", [()], {"shape": [1, 1]}, lambda a, at: a[0].reshape(at["shape"])),
    ("reshape", "0x5_to_5x0", [(0, 5)], {"shape": [5, 0]}, lambda a, at: a[0].reshape(at["shape"])),
    ("transpose", "2d", [(7, 9)], {"perm": [1, 0]}, lambda a, at: np.transpose(a[0], at["perm"]).copy()),
    ("transpose", "3d_201", [(3, 5, 17)], {"perm": [2, 0, 1]}, lambda a, at: np.transpose(a[0], at["perm"]).copy()),
    ("transpose", "4d_0213", [(2, 3, 4, 5)], {"perm": [0, 2, 1, 3]},
     lambda a, at: np.transpose(a[0], at["perm"]).copy()),
    ("transpose", "large_65x1031", [(65, 1031)], {"perm": [1, 0]}, lambda a, at: np.transpose(a[0]).copy()),
    ("transpose", "4d_2031", [(2, 3, 4, 5)], {"perm": [2, 0, 3, 1]}, lambda a, at: np.transpose(a[0], at["perm"]).copy()),
    ("broadcast", "1_to_17", [(1,)], {"shape": [17]}, lambda a, at: np.broadcast_to(a[0], at["shape"]).copy()),
    ("broadcast", "row_3x1_to_3x9", [(3, 1)], {"shape": [3, 9]},
     lambda a, at: np.broadcast_to(a[0], at["shape"]).copy()),
    ("broadcast", "col_1x9_to_5x9", [(1, 9)], {"shape": [5, 9]},
     lambda a, at: np.broadcast_to(a[0], at["shape"]).copy()),
    ("broadcast", "middle_2x1x3_to_2x7x3", [(2, 1, 3)], {"shape": [2, 7, 3]},
     lambda a, at: np.broadcast_to(a[0], at["shape"]).copy()),
    ("broadcast", "outer_1x4x1_to_3x4x65", [(1, 4, 1)], {"shape": [3, 4, 65]},
     lambda a, at: np.broadcast_to(a[0], at["shape"]).copy()),
    ("broadcast", "to_zero_1x3_to_0x3", [(1, 3)], {"shape": [0, 3]},
     lambda a, at: np.broadcast_to(a[0], at["shape"]).copy()),
    ("slice", "step1", [(10, 7)], {"starts": [2, 1], "ends": [9, 7], "steps": [1, 1]}, None),
    ("slice", "step3", [(17, 9)], {"starts": [1, 0], "ends": [17, 9], "steps": [3, 2]}, None),
    ("slice", "negative_step", [(9, 5)], {"starts": [8, 4], "ends": [-1, 0], "steps": [-1, -2]}, None),
    ("slice", "empty", [(6, 5)], {"starts": [3, 0], "ends": [3, 5], "steps": [1, 1]}, None),
    ("slice", "3d_last", [(2, 3, 65)], {"starts": [0, 1, 63], "ends": [2, 3, 65], "steps": [1, 1, 1]}, None),
    ("slice", "3d_mixed_steps", [(6, 7, 8)], {"starts": [1, 6, 0], "ends": [5, -1, 8], "steps": [2, -2, 3]}, None),
    ("concat", "axis0_2", [(2, 3), (5, 3)], {"axis": 0}, lambda a, at: np.concatenate(a, at["axis"])),
    ("concat", "axis1_3", [(2, 3), (2, 1), (2, 17)], {"axis": 1}, lambda a, at: np.concatenate(a, at["axis"])),
    ("concat", "axis2_zero_part", [(2, 3, 4), (2, 3, 0), (2, 3, 5)], {"axis": 2},
     lambda a, at: np.concatenate(a, at["axis"])),
    ("concat", "single", [(4, 4)], {"axis": 0}, lambda a, at: np.concatenate(a, at["axis"])),
    ("pad", "2d", [(3, 4)], {"pads": [1, 0, 2, 3], "value": 0.0, "interior": [0, 0]}, None),
    ("pad", "interior", [(3, 4)], {"pads": [0, 1, 1, 0], "value": 1.0, "interior": [1, 2]}, None),
    ("pad", "1d_value", [(17,)], {"pads": [5, 2], "value": 3.0, "interior": [0]}, None),
    ("pad", "zero_size", [(0, 3)], {"pads": [1, 1, 0, 2], "value": 1.0, "interior": [0, 0]}, None),
    ("pad", "3d", [(2, 3, 4)], {"pads": [0, 1, 2, 1, 0, 3], "value": 0.0, "interior": [0, 1, 0]}, None),
    ("copy", "3x5x7", [(3, 5, 7)], {}, lambda a, at: a[0].copy()),
]
DEFAULT_ORACLES = {"slice": lambda a, at: O.slice_(a[0], **at), "pad": lambda a, at: O.pad(a[0], **at)}


def line_cases():
    out = []
    for prim, label, shapes, attrs, oracle in LINES:
        oracle = oracle or DEFAULT_ORACLES[prim]
        p = PRIMITIVES[prim]
        for dt in (MOVE_DTYPES if p.movement else p.dtypes):
            if prim == "pad" and dt in ("float8e4m3fn", "int4") and attrs.get("value"):
                continue
            out.append(make_case(prim, dt, label, lambda rng, dt=dt, shapes=shapes: [_mv(dt, s, rng) for s in shapes],
                                 attrs, lambda a, at, o=oracle: (o(a, at), None)))
    return out


def index_cases():
    out = []
    for dt in MAIN:
        for it in ("int64", "int32"):
            for label, xs, ish, axis in (("axis0", (7, 5), (4,), 0), ("axis1_2d_idx", (3, 9, 2), (2, 3), 1),
                                         ("last_scalar_idx", (4, 6), (), 1), ("axis0_65", (65, 3), (130,), 0)):
                def mk(rng, dt=dt, xs=xs, ish=ish, axis=axis, it=it):
                    return [_mv(dt, xs, rng), rng.integers(0, xs[axis], size=ish).astype(it)]
                out.append(make_case("gather", dt, f"{label}/{it}", mk, {"axis": axis},
                                     lambda a, at: (np.take(a[0], a[1], axis=at["axis"]), None)))
        for label, xs, ish, bd, it in (("k2", (4, 5, 3), (6, 2), 0, "int64"), ("k1", (7, 3), (2, 2, 1), 0, "int64"),
                                       ("batch1", (2, 5, 3), (2, 4, 1), 1, "int64"),
                                       ("k_full", (3, 4), (5, 2), 0, "int64"),
                                       ("batch1/int32", (2, 5, 6), (2, 3, 1), 1, "int32")):
            def mk(rng, dt=dt, xs=xs, ish=ish, bd=bd, it=it):
                k = ish[-1]
                idx = np.stack([rng.integers(0, xs[bd + j], size=ish[:-1]) for j in range(k)], -1).astype(it)
                return [_mv(dt, xs, rng), idx]
            out.append(make_case("gather_nd", dt, label, mk, {"batch_dims": bd},
                                 lambda a, at: (O.gather_nd(a[0], a[1], **at), None)))
        reds = ("none",) if dt == "bool" else ("none", "add", "mul", "max", "min")
        for red in reds:
            def mk(rng, dt=dt, red=red):
                x = _mv(dt, (6, 4), rng)
                rows = rng.permutation(6)[:3] if red == "none" else rng.integers(0, 6, size=5)  # duplicates combine
                idx = rows.reshape(-1, 1).astype(np.int64)
                return [x, idx, _mv(dt, (idx.shape[0], 4), rng)]
            out.append(make_case("scatter_nd", dt, f"rows/{red}", mk, {"reduction": red},
                                 lambda a, at: (O.scatter_nd(*a, **at), None)))
    return out


def cases():
    return (elementwise_cases() + cast_cases() + storage_cases() + matmul_cases() + conv_cases() + pool_cases()
            + reduce_cases() + line_cases() + index_cases())


def uncovered() -> list[str]:
    """Registered primitives no case exercises (a new primitive needs its line in LINES)."""
    return sorted(set(PRIMITIVES) - {c.subject for c in cases()})
