"""Tier "passes": every graph pass, and the IR buffer-sharing passes, leave results unchanged.

Each case compiles one model twice for the backend under test, both without the post-lowering clean-up (so
that only the pass under test differs): a baseline without graph passes and without buffer sharing, and a
build with only the pass under test ("ir-buffer-sharing" turns on only ``should_share_buffers()``;
"ir-layouts" compares the backend's ``tensor_layout_requirements`` against none, glow_core.layout), and
compares the two answers (the subject is the pass, the backend only executes). Passes that only remove or
merge identical work (dce, cse, remove-noops) and buffer sharing must be bit-exact; constant folding
(computed by the reference at compile time), BatchNorm folding (different arithmetic), the recurrences'
canonical form (rnn-directions: the same steps, but a backend may run the forward op with its whole-op kernel),
the language-model recompositions (recompose-llm, on the decompositions of ``RECOMPOSE_MODELS``: a backend may
run RMSNormalization and RotaryEmbedding whole, summing in its own order), layouts (convs over blocked buffers
may sum in another order) and the default pipeline get the "model" tolerance. That lowering matches each unlowered op is the "ops" tier.
"""
from __future__ import annotations

import numpy as np

from glow_conformance import example_models
from glow_core.passes import PASSES

from . import llm_decompositions as D
from . import networks as M
from .cases import Case, CaseFailure, case_seed
from .checker import compare
from .proxy import ProxyBackend


class PassProxy(ProxyBackend):
    """The backend under test with a different pass pipeline / buffer sharing / without its layouts."""

    def __init__(self, inner, pipeline=(), share=True, layouts=True):
        super().__init__(inner)
        self.pipeline, self.share, self.layouts = list(pipeline), share, layouts

    def tensor_layout_requirements(self, instr):
        return self.inner.tensor_layout_requirements(instr) if self.layouts else None

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


def rnn_directions(seed=0):
    """Recurrences in every non-canonical form (rnn-directions): a bidirectional LSTM with initial states as
    torch exports it, then a batch-major reverse GRU over its output."""
    g = M.G(seed)
    h = 6
    y, yh, yc = g.op("LSTM", ["input", g.w(2, 4 * h, 5, scale=0.4), g.w(2, 4 * h, h, scale=0.4),
                             g.w(2, 8 * h, scale=0.2), "", "h0", "c0"], n_out=3, hidden_size=h,
                     direction="bidirectional")
    seq = g.op("Reshape", [g.op("Transpose", [y], perm=[2, 0, 1, 3]), g.const([2, 4, 2 * h], np.int64)])
    z, zh = g.op("GRU", [seq, g.w(1, 3 * 4, 2 * h, scale=0.4), g.w(1, 3 * 4, 4, scale=0.4)], n_out=2,
                 hidden_size=4, direction="reverse", layout=1, linear_before_reset=1)
    return g.model("rnn_directions", [("input", (4, 2, 5)), ("h0", (2, 2, h)), ("c0", (2, 2, h))],
                   [z, zh, yh, yc])


MODELS = {"redundant": redundant, "rnn_directions": rnn_directions, "resnet": lambda: example_models.resnet(seed=4, size=8, widths=(4, 8), blocks=1),
          "bert_encoder": lambda: M.bert_encoder(seed=4), "lstm_unrolled": lambda: M.lstm_unrolled(seed=4),
          "unet": lambda: M.unet(seed=4, size=8), "layout_boundaries": lambda: M.layout_boundaries(seed=4)}


#: The decompositions pass recompose-llm rewrites (and two it must leave alone), one line per form:
#: opsets 13 (ReduceMean's axes an attribute), 18, 20, 23; with and without the casts to float32 and back;
#: with and without the weight; every operand order; the rotary's cos and sin from positions, from gathered
#: caches, broadcast over a batch, and from angles whose halves differ (not rewritten).
RECOMPOSE_MODELS = {
    "rms_norm_o18_cast_weight": lambda: D.rms_norm(opset=18),
    "rms_norm_o13_mul_div1": lambda: D.rms_norm(opset=13, cast=False, square="mul", inv="div1"),
    "rms_norm_o20_no_weight": lambda: D.rms_norm(opset=20, weight=False, swap=True),
    "rms_norm_o23_divx": lambda: D.rms_norm(opset=23, cast=False, inv="divx", shape=(3, 40)),
    "rms_norm_o18_float16": lambda: D.rms_norm(opset=18, dtype="float16"),
    "rotary_o18_positions": lambda: D.rotary(opset=18),
    "rotary_o13_cache_swapped": lambda: D.rotary(opset=13, cos_from="cache", swap=True, heads=2, seq=4, dim=64),
    "rotary_o20_batch2": lambda: D.rotary(opset=20, batch=2, pos_batch=1),
    "rotary_o23_batch2_positions2": lambda: D.rotary(opset=23, batch=2, pos_batch=2, seq=7, dim=32),
    "rotary_o18_unequal_halves": lambda: D.rotary(opset=18, cos_from="angles"),
    "rotary_o18_partial": lambda: D.rotary(opset=18, heads=2, seq=6, dim=32, rotary_dim=16),
    "rotary_o20_partial_cache_swapped": lambda: D.rotary(opset=20, cos_from="cache", swap=True, dim=80, rotary_dim=32),
}


def _feeds(model, rng):
    from .tier_models import _feeds as f
    return f(model, rng)


#: The tolerance class of each pass's comparison: bit-exact unless the pass changes arithmetic.
PASS_CLASS = {"dce": "movement", "cse": "movement", "remove-noops": "movement", "ir-buffer-sharing": "movement",
              "rnn-directions": "model", "recompose-llm": "model",
              "constant-fold": "model", "ir-layouts": "model", "fold-batchnorm": "model", "default-pipeline": "model"}


def _build(ctx, model, pipeline, share, layouts=True):
    """Compile ``model`` for the backend under test with only ``pipeline`` (and buffer sharing if ``share``,
    the backend's tensor layouts if ``layouts``)."""
    from glow_core.api import compile_graph
    from glow_core.errors import UnsupportedOpError
    from glow_core.importer.onnx_import import import_model, load_model
    from glow_core.passes import run_pipeline

    from .harness import options, refusal
    ctx.stage = "import"
    try:
        fn = import_model(load_model(model)[0])
        run_pipeline(fn, pipeline)
        ctx.stage = "compile"
        return compile_graph(fn, PassProxy(ctx.backend, pipeline, share, layouts), options())
    except UnsupportedOpError as e:
        raise refusal(ctx, e, "compiling") from None


def pass_case(pname, mname, build, pipeline=None, share=True, base_layouts=True):
    case_id = f"passes/{pname}/float32/{mname}"

    def run(ctx):
        from .harness import execute_pair
        from .primitive_cases import second_seed
        seed = case_seed(case_id, ctx.seed)
        model = build()
        feeds = _feeds(model, np.random.default_rng(seed))
        feeds2 = _feeds(model, np.random.default_rng(second_seed(case_id, ctx.seed)))
        desc = f"pass {pname} on model {mname}: results with and without the pass differ (seed {seed})"
        rr = ctx.rerun(case_id)
        base = _build(ctx, model, [], False, base_layouts)
        test = _build(ctx, model, pipeline if pipeline is not None else [pname], share)
        wants, gots = execute_pair(ctx, base, feeds, feeds2, desc, rr), execute_pair(ctx, test, feeds, feeds2, desc, rr)
        ctx.stage = "mismatch"
        for want, got, d in zip(wants, gots, (desc, desc + " [second input]")):
            for k in want:
                if k not in got:
                    raise CaseFailure(f"{d}\n  output {k} missing\n  rerun: {rr}", stage="run")
                compare(np.asarray(got[k]), np.asarray(want[k]), PASS_CLASS[pname], d, rr, name=f"output {k}")
    return Case(case_id, "passes", pname, "float32", run, ("passes",), {}, flows=("fp32",))


def cases():
    out = []
    for mname, build in MODELS.items():
        for pname in PASSES:
            out.append(pass_case(pname, mname, build))
        out.append(pass_case("default-pipeline", mname, build, pipeline=_default()))
        out.append(pass_case("ir-buffer-sharing", mname, build, pipeline=[], share=True))
        out.append(pass_case("ir-layouts", mname, build, pipeline=[], share=False, base_layouts=False))
    for mname, build in RECOMPOSE_MODELS.items():
        out.append(pass_case("recompose-llm", mname, build))
    return out


def _default():
    from glow_core.passes import DEFAULT_PIPELINE
    return list(DEFAULT_PIPELINE)

