"""Tier "memory": the compiled function stays inside its buffers and gives the same answers every run.

Every case compiles on the guarded plan of ``guards.spread`` (every input, output, activation and scratch
buffer in its own slot, guard bytes around it and at both ends of each region) and runs with the guards armed
and checked (``harness.execute``); it then runs on other inputs, and again on the first ones: the answers must
be bitwise identical (no state may leak between runs, no result may depend on uninitialized memory), and
they are checked as in the primitives tier. Subjects: primitive cases (including GEMM, im2col, depthwise and
parallel ones) and whole networks (activations, views, shared buffers).

A backend whose compiled functions expose no memory (``memory_regions()`` returns None) gets the same runs
and checks of its answers, then the case is skipped with that reason (kind ``no-memory-regions``): its memory
profile is reported as not checked. Reads outside a buffer are not detected.
"""
from __future__ import annotations

import fnmatch

import numpy as np

from . import tier_primitives as P
from .cases import Case, CaseFailure, Unsupported, case_seed
from .checker import compare
from .guards import regions_of
from .harness import backend_attrs, compile_function, compile_primitive, execute, feed, reference_primitive
from .primitive_cases import describe, magnitudes

#: Primitive cases run under the memory tier (fnmatch patterns over primitive case ids: the first match each).
SUBJECTS = ("primitives/add/float32/17", "primitives/mul/int8/2x3x4x17", "primitives/matmul/float32/16x17@17x15",
            "primitives/matmul/float32/gemm/*", "primitives/matmul/float16/gemm/*",
            "primitives/matmul/float64/gemm/*/t2", "primitives/conv/float32/2d_stride2_asym_pads",
            "primitives/conv/float32/1x1", "primitives/conv/int8/2d_depthwise",
            "primitives/conv/float32/2d_depthwise_batch2_pad_past_kernel", "primitives/conv/float16/*",
            "primitives/conv/float32/2d_parallel_im2col/t2", "primitives/conv/float32/1d_tile_*",
            "primitives/reduce_sum/float32/3x4x5x6/axes02/*", "primitives/max_pool/float32/2d_k3s2_pad1",
            "primitives/avg_pool/float16/2d_asym_pads/cip1", "primitives/pad/float32/interior",
            "primitives/concat/int16/axis1_3", "primitives/transpose/uint8/3d_201", "primitives/slice/float32/step3",
            "primitives/gather/float32/axis1_2d_idx/int64", "primitives/scatter_nd/float32/rows/add",
            "primitives/cast/float32/to_int8/random", "primitives/cast/float32/to_float8e4m3fn/boundaries",
            "primitives/broadcast/float16/middle_2x1x3_to_2x7x3", "primitives/argmax/float32/3x4x5x6/axis1/kd0/last1",
            "primitives/exp/bfloat16/17", "primitives/select/int64/17", "primitives/gather_nd/int32/batch1",
            "primitives/copy/bool/3x5x7", "primitives/reduce_max/int8/2x65x9/axes1/kd0",
            "primitives/sigmoid/float32/2x3x4x17")


def _not_checked(ctx, case_id):
    return Unsupported(f"the answers were checked, the guard bytes could not be: the compiled function of "
                       f"backend '{ctx.backend.name}' exposes no memory regions (memory_regions() returned None)",
                       kind="no-memory-regions")


def memory_case(base: Case) -> Case:
    info = base.info
    prim, attrs, threads = base.subject, info["attrs"], info["threads"]
    case_id = "memory/" + base.id.split("/", 1)[1]

    def run(ctx):
        seed = case_seed(base.id, ctx.seed)
        arrays = info["make"](np.random.default_rng(seed))
        at = backend_attrs(ctx.backend, prim, attrs)
        desc = describe(prim, base.dtype, arrays, at, seed, threads) + " [guarded memory plan]"
        rr = ctx.rerun(case_id)
        res = compile_primitive(ctx, prim, arrays, at, threads)
        out1 = execute(ctx, res, feed(arrays), desc, rr)
        execute(ctx, res, feed(info["make"](np.random.default_rng(seed + 1))), desc, rr)
        out2 = execute(ctx, res, feed(arrays), desc, rr)
        for k in out1:
            if np.asarray(out1[k]).tobytes() != np.asarray(out2[k]).tobytes():
                raise CaseFailure(f"{desc}\n  output {k} differs between two runs on the same inputs (state leaks "
                                  f"between runs or the result depends on uninitialized memory)\n  rerun: {rr}")
        if ctx.is_reference or info["spec"]:
            r = info["oracle"](arrays, attrs)
            wants, mags = [r[0]], [r[1]]
        else:
            wants = reference_primitive(prim, arrays, at)
            mags = magnitudes(prim, arrays, attrs) or [None] * len(wants)
        n = info["n_of"](arrays, attrs) if info["n_of"] else 1
        for i, w in enumerate(wants):
            compare(np.asarray(out1[f"y{i}"]), np.asarray(w), info["tolerance"], desc, rr, n=n, magnitude=mags[i],
                    name=f"output y{i}")
        if regions_of(res.compiled) is None:
            raise _not_checked(ctx, case_id)
    return Case(case_id, "memory", prim, base.dtype, run, ("memory",), dict(info, group=None))


def model_memory_case(name, build) -> Case:
    """A whole network (activations, views, shared buffers) under the guarded plan."""
    from glow_core.errors import UnsupportedOpError
    from glow_core.importer.onnx_import import import_model, load_model
    from glow_core.passes import run_pipeline

    from .harness import refusal
    from .onnx_cases import expected
    from .tier_models import _feeds
    case_id = f"memory/{name}/float32/guarded"

    def run(ctx):
        seed = case_seed(case_id, ctx.seed)
        model = build()
        feeds = _feeds(model, np.random.default_rng(seed))
        try:
            fn = import_model(load_model(model)[0])
            run_pipeline(fn, ctx.backend.optimization_pipeline())
        except UnsupportedOpError as e:
            raise refusal(ctx, e, "compiling") from None
        res = compile_function(ctx, fn)
        desc = f"memory case: model {name} float32, seed {seed} [guarded memory plan]"
        rr = ctx.rerun(case_id)
        out1 = execute(ctx, res, feeds, desc, rr)
        out2 = execute(ctx, res, feeds, desc, rr)
        outs = [o.name for o in model.graph.output]
        want = expected(model, feeds, ctx, outs)
        for k in outs:
            if np.asarray(out1[k]).tobytes() != np.asarray(out2[k]).tobytes():
                raise CaseFailure(f"{desc}\n  output {k} differs between two runs on the same inputs\n  rerun: {rr}")
            compare(np.asarray(out1[k]), np.asarray(want[k]), "model", desc, rr, name=f"output {k}")
        if regions_of(res.compiled) is None:
            raise _not_checked(ctx, case_id)
    return Case(case_id, "memory", name, "float32", run, ("memory",), {})


def cases():
    from . import networks as M
    prims = P.cases()
    chosen = []
    for pat in SUBJECTS:
        hit = next((c for c in prims if fnmatch.fnmatchcase(c.id, pat)), None)
        if hit is None:
            raise ValueError(f"memory tier: no primitive case matches {pat!r}")
        chosen.append(memory_case(hit))
    return chosen + [model_memory_case("mlp", lambda: M.mlp(seed=3)),
                     model_memory_case("lstm_unrolled", lambda: M.lstm_unrolled(seed=3)),
                     model_memory_case("mobilenet", lambda: M.mobilenet(seed=3)),
                     model_memory_case("unet", lambda: M.unet(seed=3, size=8)),
                     model_memory_case("head_transposes", lambda: M.head_transposes(seed=3))]
