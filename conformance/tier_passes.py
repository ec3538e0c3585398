"""Tier "passes": every graph pass, and the IR buffer-sharing passes, leave results unchanged.

Each case compiles one model twice for the backend under test: a baseline without graph optimizations and
without buffer sharing, and a build with only the pass under test (a proxy backend whose
``optimization_pipeline()`` is that one pass; "ir-buffer-sharing" turns on only ``should_share_buffers()``),
and compares the two answers (the subject is the pass, the backend only executes). That lowering matches each
unlowered op is the "ops" tier (ReferenceEvaluator on the unlowered op against the lowered pipeline).
"""
from __future__ import annotations

import zlib

import numpy as np

from glow_core import example_models
from glow_core.passes import PASSES

from . import networks as M
from .cases import Case, CaseFailure
from .checker import compare
from .proxy import ProxyBackend
from .harness import compile_model


class PassProxy(ProxyBackend):
    """The backend under test with a different pass pipeline / buffer sharing."""

    def __init__(self, inner, pipeline=(), share=True):
        super().__init__(inner)
        self.pipeline, self.share = list(pipeline), share

    def optimization_pipeline(self):
        return list(self.pipeline)

    def should_share_buffers(self):
        return self.share and self.inner.should_share_buffers()


def redundant(seed=0):
    """A model with work for every pass: a common subexpression (cse), no-op reshape/transpose/identity
    (remove-noops), a constant subgraph (constant-fold), a dead branch (dce), Conv+BatchNormalization
    (fold-batchnorm)."""
    g = M.G(seed)
    c = g.op("Add", [g.w(4), g.w(4)])  # constant subgraph
    a1 = g.op("Add", ["input", c])
    a2 = g.op("Add", ["input", c])  # same as a1
    s = g.op("Mul", [a1, a2])
    s = g.op("Reshape", [s, g.const([2, 3, 4], np.int64)])  # no-op
    s = g.op("Transpose", [s], perm=[0, 1, 2])  # no-op
    s = g.op("Identity", [s])
    g.op("Relu", [s])  # dead
    x = g.op("Reshape", [s, g.const([1, 2, 3, 4], np.int64)])
    y = g.op("Conv", [x, g.w(3, 2, 3, 3), g.w(3, scale=0.1)], kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    g.op("BatchNormalization", [y, g.w(3, scale=1.0), g.w(3, scale=0.1), g.w(3, scale=0.1),
                                g.const(np.full(3, 0.7))], epsilon=1e-5)
    m = g.model("redundant", [("input", (2, 3, 4))], [g.nodes[-1].output[0]])
    return m


MODELS = {"redundant": redundant, "resnet": lambda: example_models.resnet(seed=4, size=8, widths=(4, 8), blocks=1),
          "bert_encoder": lambda: M.bert_encoder(seed=4), "lstm_unrolled": lambda: M.lstm_unrolled(seed=4),
          "unet": lambda: M.unet(seed=4, size=8)}


def _feeds(model, rng):
    from .tier_models import _feeds as f
    return f(model, rng)


def pass_case(pname, mname, build, pipeline=None, share=True):
    case_id = f"passes/{pname}/float32/{mname}"
    seed = zlib.crc32(case_id.encode())

    def run(ctx):
        model = build()
        feeds = _feeds(model, np.random.default_rng(seed))
        base = compile_model(PassProxy(ctx.backend, [], False), model, optimize=False)  # no passes, no sharing
        test = compile_model(PassProxy(ctx.backend, pipeline if pipeline is not None else [pname], share), model)
        want, got = base.run(feeds), test.run(feeds)
        desc = f"pass {pname} on model {mname}: results with and without the pass differ (seed {seed})"
        for k in want:
            if k not in got:
                raise CaseFailure(f"{desc}\n  output {k} missing\n  rerun: {ctx.rerun(case_id)}")
            compare(np.asarray(got[k]), np.asarray(want[k]), "model", desc, ctx.rerun(case_id), name=f"output {k}")
    return Case(case_id, "passes", pname, "float32", run, ("passes",), {"seed": seed})


def cases():
    out = []
    for mname, build in MODELS.items():
        for pname in PASSES:
            out.append(pass_case(pname, mname, build))
        out.append(pass_case("default-pipeline", mname, build, pipeline=_default()))
        out.append(pass_case("ir-buffer-sharing", mname, build, pipeline=[], share=True))
    return out


def _default():
    from glow_core.passes import DEFAULT_PIPELINE
    return list(DEFAULT_PIPELINE)

