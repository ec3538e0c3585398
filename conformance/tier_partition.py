"""Tier "partition": a model split between the backend under test and the interpreter at every cut point gives
the results of the unsplit run.

For each model, the nodes the backend under test runs (its placement, in topological order: the primitives of
the lowering and the nodes it keeps whole) are cut at every point k: a ``SubsetBackend`` over the backend
under test refuses the nodes from k on, which then run on the interpreter, every value crossing the cut a
transfer between the two partitions' plans. The ``alternate`` case refuses every other node (as many
partitions as nodes). The expectation is the model compiled for the backend under test alone, compared with the
model tolerance. (A refused node that the backend keeps whole is lowered instead, and its primitives may stay on
the backend: such a cut still splits the model elsewhere, or runs unsplit, and must match all the same.)
"""
from __future__ import annotations

import numpy as np

from glow_conformance import example_models as core_models
from glow_core.api import plan_partitions
from glow_core.backend import DeviceCosts
from glow_core.discovery import get_backend
from glow_core.errors import UnsupportedOpError
from glow_core.ops.registry import get_op, is_primitive

from . import networks as M
from .cases import Case, CaseFailure, case_seed
from .checker import compare
from .harness import compile_model, run_compiled
from .subset import SubsetBackend

MODELS = {
    "linear_sigmoid": lambda: core_models.linear_sigmoid(seed=3),
    "cnn": lambda: core_models.cnn(seed=3),
    "resnet": lambda: core_models.resnet(seed=3, size=8, widths=(4, 8), blocks=1),
    "mobilenet": lambda: M.mobilenet(seed=3),
    "bert_encoder": lambda: M.bert_encoder(seed=3),
    "unet": lambda: M.unet(seed=3, size=8),
}

_UNSPLIT: dict = {}  # the unsplit run of the model whose cases are running

#: The wrapper computes instantly over a free link: the partitioner never returns a cut-off island to the host.
NO_ISLANDS = DeviceCosts(flops_per_second=float("inf"))


def _feeds(model, rng):
    from .tier_models import _feeds as f
    return f(model, rng)


def _units(backend, model) -> list[tuple[str, bool]]:
    """(name, kept whole) of the nodes ``backend`` runs in ``model``, in topological order (placed alone, or
    with the interpreter for what it refuses)."""
    interp = get_backend("interpreter")
    try:
        plan = plan_partitions(model, [backend] if backend is interp else [backend, interp])
    except UnsupportedOpError:
        return []
    return [(u.node.name, not is_primitive(u.node.op) and not get_op(u.node.op).is_extended)
            for u in plan.units if u.backend == 0]


def partition_case(mname, build, variant, refuse, must_split):
    case_id = f"partition/{mname}/float32/{variant}"

    def run(ctx):
        seed = case_seed(case_id, ctx.seed)
        model = build()
        feeds = _feeds(model, np.random.default_rng(seed))
        key = (id(ctx.backend), mname, seed)
        if key not in _UNSPLIT:
            _UNSPLIT.clear()  # one model's expectation at a time: the cases of a model run in a row
            _UNSPLIT[key] = run_compiled(ctx, compile_model(ctx, model), feeds)
        want = _UNSPLIT[key]
        sub = SubsetBackend(ctx.backend, refuse=refuse, costs=NO_ISLANDS)
        cm = compile_model(ctx, model, backend=[sub, get_backend("interpreter")])
        plan = cm.last.plan
        desc = (f"partition case {mname} {variant}: {len(refuse)} node(s) refused by backend '{ctx.backend.name}' run "
                f"on the interpreter ({len(plan.partitions)} partitions); results differ from the unsplit run "
                f"(seed {seed})")
        if must_split and {p.backend for p in plan.partitions} != {0, 1}:
            raise CaseFailure(f"{desc}\n  the model was not split between the two backends\n  rerun: "
                              f"{ctx.rerun(case_id)}")
        got = run_compiled(ctx, cm, feeds)
        for k in want:
            if k not in got:
                raise CaseFailure(f"{desc}\n  output {k} missing\n  rerun: {ctx.rerun(case_id)}")
            compare(np.asarray(got[k]), np.asarray(want[k]), "model", desc, ctx.rerun(case_id), name=f"output {k}")
    return Case(case_id, "partition", mname, "float32", run, ("partition",), {"refused": len(refuse)})


def cases(ctx):
    out = []
    for mname, build in MODELS.items():
        units = _units(ctx.backend, build())
        names = [n for n, _ in units]
        for k in range(1, len(units)):
            out.append(partition_case(mname, build, f"cut{k:03d}", names[k:],
                                      any(not whole for _, whole in units[k:])))
        if len(units) > 2:
            out.append(partition_case(mname, build, "alternate", names[1::2],
                                      any(not whole for _, whole in units[1::2])))
    return out
