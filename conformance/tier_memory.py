"""Tier "memory": the compiled function stays inside its buffers and gives the same answers every run.

How: the memory plan is re-laid out before ``backend.compile`` (``compile_graph(before_compile=...)``) so that
every input, output and activation has its own slot with ``GUARD`` bytes of gap before and after it. When the
compiled function exposes its memory regions (``memory_regions()`` -> {name: writable bytes}, or the
interpreter's ``mutable``/``activations`` bytearrays) every gap is filled with a canary pattern before the run
and checked after it: any byte written outside a buffer is reported with the buffer it follows. Every case
also runs twice (bitwise-identical answers) and, in between, on other inputs (no state may leak between
runs), and its answers are checked as in the primitives tier.

Limits: a backend that copies the plan into memory of its own and exposes no regions is only checked through
its answers (out-of-bounds writes are then seen only when they corrupt live data); reads outside a buffer
are not detected (the canary is a plausible value); the constant region is not guarded.
"""
from __future__ import annotations

import numpy as np

from glow_core.memory import align_up

from . import tier_primitives as P
from .cases import Case, CaseFailure
from .checker import compare
from .harness import compile_primitive, feed, reference_primitive

GUARD = 64
CANARY = 0xA5
SUBJECTS = ("primitives/add/float32/65", "primitives/mul/int8/17", "primitives/matmul/float32/16x17@17x15",
            "primitives/conv/float32/2d_stride2_asym_pads", "primitives/conv/int8/2d_depthwise",
            "primitives/reduce_sum/float32/3x5x7/axes02/kd0", "primitives/max_pool/float32/2d_k3s2_pad1",
            "primitives/avg_pool/float16/2d_asym_pads/cip1", "primitives/pad/float32/interior",
            "primitives/concat/int16/axis1_3", "primitives/transpose/uint8/3d_201", "primitives/slice/float32/step3",
            "primitives/gather/float32/axis1_2d_idx/int64", "primitives/scatter_nd/float32/rows/add",
            "primitives/cast/float32/to_int8/random", "primitives/broadcast/float16/middle_2x1x3_to_2x7x3",
            "primitives/argmax/float32/3x5x7/axis1/kd0/last1", "primitives/exp/bfloat16/63",
            "primitives/select/int64/17", "primitives/gather_nd/int32/batch1", "primitives/copy/bool/3x5x7",
            "primitives/reduce_max/int8/2x65x9/axes1/kd0", "primitives/sigmoid/float32/3x5x7")


def spread(irf):
    """Give every input/output and activation its own slot with GUARD bytes around it."""
    plan = irf.plan
    off = GUARD
    for b in list(irf.inputs.values()) + list(irf.outputs.values()):
        b.offset = off
        off = align_up(off + max(b.size, 1), plan.alignment) + GUARD
    plan.mutable_size = off
    off = GUARD
    for b in irf.buffers:
        if b.kind == "activation":
            b.offset = off
            off = align_up(off + max(b.size, 1), plan.alignment) + GUARD
    plan.activations_size = off


def regions_of(compiled):
    """The compiled function's memory regions (``CompiledFunction.memory_regions()``), or None."""
    fn = getattr(compiled, "memory_regions", None)
    return fn() if fn is not None else None


def _occupied(irf, region):
    roots = [b for b in irf.buffers if b.base is None and b.kind == region]
    if region == "mutable":
        roots = list(irf.inputs.values()) + list(irf.outputs.values())
    return sorted((b.offset, b.offset + b.size, b.name) for b in roots)


def _gaps(irf, region, size):
    gaps, cur = [], 0
    for lo, hi, _ in _occupied(irf, region):
        if lo > cur:
            gaps.append((cur, lo))
        cur = max(cur, hi)
    if cur < size:
        gaps.append((cur, size))
    return gaps


def _check_canaries(irf, regs, desc, rerun):
    for region, buf in regs.items():
        mv = np.frombuffer(buf, np.uint8)
        for lo, hi in _gaps(irf, region, len(mv)):
            bad = np.flatnonzero(mv[lo:hi] != CANARY)
            if bad.size:
                first = lo + int(bad[0])
                prev = [n for a, e, n in _occupied(irf, region) if e <= first]
                where = f"after buffer '{prev[-1]}'" if prev else "before the first buffer"
                writers = [i.op for i in irf.instrs for b in i.outs if prev and b.root.name == prev[-1]]
                raise CaseFailure(f"{desc}\n  out-of-bounds write: {bad.size} guard byte(s) changed in the {region} "
                                  f"region at bytes [{first}, {lo + int(bad[-1]) + 1}) {where}"
                                  + (f" (written by {', '.join(sorted(set(writers)))})" if writers else "")
                                  + f"\n  rerun: {rerun}")


def _arm(irf, regs):
    for region, buf in regs.items():
        mv = np.frombuffer(buf, np.uint8)
        for lo, hi in _gaps(irf, region, len(mv)):
            mv[lo:hi] = CANARY


def memory_case(base: Case) -> Case:
    info = base.info
    prim, attrs, seed = base.subject, info["attrs"], info["seed"]
    case_id = "memory/" + base.id.split("/", 1)[1]

    def run(ctx):
        arrays = info["make"](np.random.default_rng(seed))
        res = compile_primitive(ctx.backend, prim, arrays, attrs, before_compile=spread)
        irf, fn = res.ir, res.compiled
        regs = regions_of(fn)
        desc = P._describe(prim, base.dtype, arrays, attrs, seed) + " [guarded memory plan]"
        rr = ctx.rerun(case_id)
        if regs is not None:
            _arm(irf, regs)
        out1 = fn.execute(feed(arrays))
        if regs is not None:
            _check_canaries(irf, regs, desc, rr)
        other = info["make"](np.random.default_rng(seed + 1))
        fn.execute(feed(other))
        out2 = fn.execute(feed(arrays))
        for k in out1:
            a, b = np.asarray(out1[k]), np.asarray(out2[k])
            if a.tobytes() != b.tobytes():
                raise CaseFailure(f"{desc}\n  output {k} differs between two runs on the same inputs (state leaks "
                                  f"between runs or the result depends on uninitialized memory)\n  rerun: {rr}")
        if ctx.is_reference:
            r = info["oracle"](arrays, attrs)
            wants = [r[0]]
            mags = [r[1]]
        else:
            wants = reference_primitive(prim, arrays, attrs)
            mags = P._magnitudes(prim, arrays, attrs, wants) or [None] * len(wants)
        n = info["n_of"](arrays, attrs) if info["n_of"] else 1
        for i, w in enumerate(wants):
            compare(np.asarray(out1[f"y{i}"]), np.asarray(w), info["tolerance"], desc, rr, n=n, magnitude=mags[i],
                    name=f"output y{i}")
    return Case(case_id, "memory", prim, base.dtype, run, ("memory",), dict(info))


def cases():
    by_id = {c.id: c for c in P.cases()}
    missing = [s for s in SUBJECTS if s not in by_id]
    if missing:
        raise ValueError(f"memory tier: unknown primitive cases {missing}")
    return [memory_case(by_id[s]) for s in SUBJECTS]


def model_memory_case(name, build) -> Case:
    """A whole network (activations, views, shared buffers) under the guarded plan."""
    import zlib

    from glow_core.api import compile_graph
    from glow_core.errors import UnsupportedOpError
    from glow_core.importer.onnx_import import import_model, load_model
    from glow_core.passes import run_pipeline

    from .cases import Unsupported
    from .onnx_cases import expected
    from .tier_models import _feeds
    case_id = f"memory/{name}/float32/guarded"
    seed = zlib.crc32(case_id.encode())

    def run(ctx):
        model = build()
        feeds = _feeds(model, np.random.default_rng(seed))
        try:
            fn = import_model(load_model(model)[0])
            run_pipeline(fn, ctx.backend.optimization_pipeline())
            res = compile_graph(fn, ctx.backend, {}, before_compile=spread)
        except UnsupportedOpError as e:
            raise Unsupported(str(e)) from None
        regs = regions_of(res.compiled)
        desc = f"memory case: model {name} float32, seed {seed} [guarded memory plan]"
        rr = ctx.rerun(case_id)
        if regs is not None:
            _arm(res.ir, regs)
        ins = {k: v for k, v in feeds.items() if k in res.ir.inputs}
        out1 = res.compiled.execute(ins)
        if regs is not None:
            _check_canaries(res.ir, regs, desc, rr)
        out2 = res.compiled.execute(ins)
        outs = [o.name for o in model.graph.output]
        want = expected(model, feeds, ctx, outs)
        for k in outs:
            if np.asarray(out1[k]).tobytes() != np.asarray(out2[k]).tobytes():
                raise CaseFailure(f"{desc}\n  output {k} differs between two runs on the same inputs\n  rerun: {rr}")
            compare(np.asarray(out1[k]), np.asarray(want[k]), "model", desc, rr, name=f"output {k}")
    return Case(case_id, "memory", name, "float32", run, ("memory",), {"seed": seed})


_cases_primitive = cases


def cases():  # noqa: F811
    from . import networks as M
    return _cases_primitive() + [model_memory_case("mlp", lambda: M.mlp(seed=3)),
                                 model_memory_case("lstm_unrolled", lambda: M.lstm_unrolled(seed=3)),
                                 model_memory_case("mobilenet", lambda: M.mobilenet(seed=3)),
                                 model_memory_case("unet", lambda: M.unet(seed=3, size=8))]
