"""How a primitive case is made and run: input generators, the expectation, and compile groups.

``make_case`` turns one line of data (primitive, dtype, variant, an input maker, attributes, an oracle) into a
Case. Inputs come from ``make(rng)`` with the case's own generator (its id and the session seed). The
expectation is the reference interpreter's kernel, or, when the backend under test is the interpreter itself,
the independent oracle; ``spec=True`` marks an oracle that is the specification (the storage-format casts):
it is then the expectation on every backend. Tolerances come from the primitive's tolerance class.

Compile groups: on backends other than the reference, the cases of one (primitive, dtype, thread count,
constant operands) are compiled together as one function and run once; a case that passes there is done, any
other is run, and judged, alone.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np

from glow_core.ops.registry import PRIMITIVES
from glow_core.types import dtype as gdtype

from . import oracles as O
from .cases import Case, CaseFailure, case_seed, profiles_for
from .checker import compare
from .harness import backend_attrs, compile_function, execute, feed, reference_primitive, run_primitive


def tolerance_class(prim: str) -> str:
    """The primitive's tolerance class, as its record names it (``PrimitiveDef.tolerance``)."""
    return PRIMITIVES[prim].tolerance


# -- input generation ------------------------------------------------------------------------------------
def rand(dt: str, shape, rng, lo=-10.0, hi=10.0):
    d = gdtype(dt)
    if d.is_bool:
        return rng.random(shape) < 0.5
    if d.is_int:
        ii = np.iinfo(d.np) if d.np.kind in "iu" else ml_dtypes.iinfo(d.np)
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
    """NaN, +-inf, +-0, denormals, the extremes, ones, rounding ties (floats); extremes and small values (ints)."""
    d = gdtype(dt)
    if d.is_bool:
        return np.array([False, True])
    if d.is_int:
        ii = np.iinfo(d.np)
        vals = {int(ii.min), int(ii.min) + 1, int(ii.max), int(ii.max) - 1, 0, 1, 2, 3, 7}
        if d.kind == "int":
            vals |= {-1, -2, -7}
        return np.array(sorted(vals), dtype=object).astype(d.np)
    fi = np.finfo(d.np) if dt in ("float32", "float64", "float16") else ml_dtypes.finfo(d.np)
    tiny = float(fi.tiny)
    vals = [np.nan, np.inf, -np.inf, 0.0, -0.0, tiny / 4, -tiny / 4, tiny, float(fi.max), -float(fi.max), 1.0,
            -1.0, 0.5, -0.5, 1.5, 2.5, -2.5, 3.0, 1e-3, 100.0, 0.75, -3.5]
    return np.array(vals, dtype=np.float64).astype(np.float32 if d.itemsize < 4 else np.float64).astype(d.np)


def acc_specials(dt: str, products=False) -> np.ndarray:
    """Special values for accumulations: NaN, +-inf, +-0 and denormals (sums) or small powers of two
    (products), never values whose partial sums or products overflow or underflow in an order-dependent way."""
    d = gdtype(dt)
    fi = np.finfo(d.np) if dt in ("float32", "float64", "float16") else ml_dtypes.finfo(d.np)
    more = [1.0, -1.0, 2.0] if products else [float(fi.tiny) / 4, -float(fi.tiny) / 4, float(fi.tiny)]
    return np.array([np.nan, np.inf, -np.inf, 0.0, -0.0] + more).astype(np.float32 if d.itemsize < 4 else
                                                                         np.float64).astype(d.np)


def sprinkle(x: np.ndarray, rng, fraction=0.15, values=None) -> np.ndarray:
    """``x`` with a fraction of its elements replaced by special values (NaN, +-inf, -0.0, denormals...)."""
    if not x.size:
        return x
    sp = specials(gdtype(x.dtype).name) if values is None else np.asarray(values).astype(x.dtype)
    pick = rng.random(x.shape) < fraction
    return np.where(pick, sp[rng.integers(0, sp.size, x.shape)], x).astype(x.dtype)


def num_range(dt, rng, shape, small=False):
    """Values that keep accumulations of integers exact-ish and floats O(1)."""
    d = gdtype(dt)
    if d.is_float:
        return rand(dt, shape, rng, -2, 2)
    if d.kind == "uint":
        return rand(dt, shape, rng, 0, 15 if small else 100)
    return rand(dt, shape, rng, -8 if small else -100, 8 if small else 100)


def pairs(a: np.ndarray):
    """All ordered pairs of the values of a (two flat arrays)."""
    i, j = np.meshgrid(np.arange(a.size), np.arange(a.size), indexing="ij")
    return a[i.reshape(-1)], a[j.reshape(-1)]


# -- expectations ---------------------------------------------------------------------------------------------
def magnitudes(prim, arrays, attrs):
    """Per-element sums of |terms| of accumulating primitives (the tolerance scale when the expectation is the
    interpreter's answer); None for the others."""
    if PRIMITIVES[prim].family not in ("matmul", "conv", "pool", "reduce") or not O.is_float(arrays[0].dtype):
        return None
    absd = [np.abs(a.astype(np.float64)) if O.is_float(a.dtype) else a for a in arrays]
    if prim == "matmul":
        return [O.matmul(*absd)[1]]
    if prim == "conv":
        return [O.conv(*absd, **attrs)[1]]
    if prim == "avg_pool":
        return [O.avg_pool(absd[0], **attrs)[1]]
    if prim == "reduce_sum":
        return [O.reduce("reduce_sum", absd[0], **attrs)[1]]
    return None


def describe(prim, dt, arrays, attrs, seed, threads):
    shapes = ", ".join(f"{a.dtype}{list(a.shape)}" for a in arrays)
    return (f"primitive {prim} dtype {dt}: operands {shapes}, attributes {attrs or '{}'}, seed {seed}"
            + (f", num_threads {threads}" if threads != 1 else ""))


#: (primitive, dtype, threads) -> {case id: (make, attrs)}: the cases compiled together by ``grouped_outputs``
GROUPS: dict = {}


def make_case(prim, dt, variant, make, attrs=None, oracle=None, n_of=None, profiles=None, threads=1, spec=False,
              group=True, consts=()):
    """One case: ``make(rng)`` returns the operands; ``oracle(arrays, attrs)`` -> (expected, magnitude) or a
    list of them; ``n_of(arrays, attrs)`` the reduction length; ``consts``: the indices of the operands that are
    constants (a backend may prepare them at compile time, e.g. the CPU conv engine's filters)."""
    attrs = dict(attrs or {})
    case_id = f"primitives/{prim}/{dt}/{variant}" + (f"/t{threads}" if threads != 1 else "")
    tol = tolerance_class(prim)
    key = (prim, dt, threads) + ((tuple(consts),) if consts else ())

    def run(ctx):
        seed = case_seed(case_id, ctx.seed)
        arrays = make(np.random.default_rng(seed))
        at = backend_attrs(ctx.backend, prim, attrs)
        desc, rr = describe(prim, dt, arrays, at, seed, threads), ctx.rerun(case_id)
        got = grouped_outputs(ctx, key, case_id) if ctx.group_compile and group else None
        if got is not None:
            try:
                check(ctx, arrays, got, desc, rr, at)
                return
            except CaseFailure:
                pass  # the fast path only ever passes a case: a failure is decided by the case compiled alone
        ctx.answers.clear()  # the group's is_op_supported answers are not this case's
        check(ctx, arrays, run_primitive(ctx, prim, arrays, at, desc, rr, threads, consts), desc, rr, at)

    def check(ctx, arrays, got, desc, rr, at):
        if ctx.is_reference or spec:
            r = oracle(arrays, attrs)
            wants, mags = ([r[0]], [r[1]]) if not isinstance(r, list) else ([x[0] for x in r], [x[1] for x in r])
        else:
            wants = reference_primitive(prim, arrays, at)
            mags = magnitudes(prim, arrays, attrs)
        n = n_of(arrays, attrs) if n_of else 1
        for i, (g, w) in enumerate(zip(got, wants)):
            compare(g, np.asarray(w), tol, desc, rr, n=n, magnitude=mags[i] if mags else None, name=f"output y{i}")
    if group:
        GROUPS.setdefault(key, {})[case_id] = (make, attrs)
    return Case(case_id, "primitives", prim, dt, run, profiles or profiles_for(dt),
                {"variant": variant, "attrs": attrs, "tolerance": tol, "make": make, "oracle": oracle,
                 "n_of": n_of, "threads": threads, "spec": spec, "group": key if group else None,
                 "consts": tuple(consts)})


def grouped_outputs(ctx, key, case_id):
    """This case's outputs from one function holding every case of ``key`` the backend supports, compiled
    and run once per process; None when unavailable (any trouble: every case of the group runs alone)."""
    if key not in ctx.cache:
        ctx.cache[key] = {}
        from glow_core.builder import Builder
        from glow_core.graph import Function
        from glow_core.types import tensor_type_of

        from .harness import check_supported
        prim, dt, threads = key[:3]
        consts = key[3] if len(key) > 3 else ()
        try:
            fn = Function(f"conformance_{prim}_{dt}")
            feeds, names = {}, {}
            for k, (cid, (mk, at)) in enumerate(GROUPS.get(key, {}).items()):
                at = backend_attrs(ctx.backend, prim, at)
                arrays = mk(np.random.default_rng(case_seed(cid, ctx.seed)))
                try:
                    check_supported(ctx.backend, prim, arrays, at)
                except Exception:  # noqa: BLE001  (declined cases run, and skip, on their own)
                    continue
                vals = [fn.constant(np.asarray(a), f"c{k}_c{i}") if i in consts else
                        fn.add_input(f"c{k}_x{i}", tensor_type_of(np.asarray(a))) for i, a in enumerate(arrays)]
                feeds.update({f"c{k}_x{i}": v for i, v in enumerate(feed(arrays).values()) if i not in consts})
                out = Builder(fn, where=f"case {cid}", fold=False, name=f"c{k}").emit(prim, *vals, **at)
                outs = out if isinstance(out, list) else [out]
                names[cid] = [f"c{k}_y{i}" for i in range(len(outs))]
                fn.outputs += outs
                fn.output_names += names[cid]
            if names:
                res = compile_function(ctx, fn, threads)
                outs = execute(ctx, res, feeds, f"compile group {prim}/{dt}", ctx.rerun(case_id))
                ctx.cache[key] = {cid: [np.asarray(outs[n]) for n in ns] for cid, ns in names.items()}
        except Exception:  # noqa: BLE001
            ctx.cache[key] = {}
    return ctx.cache[key].get(case_id)
