"""Compile time stays linear in the graph's size, checked by counting work, not by timing: every stage of the
pipeline (``glow_core.timing.stage``), and the text dumps, make at most about twice as many Python function
calls (cProfile's count, which is deterministic) for a model twice as large. Before the passes were made
linear, a chain twice as long made 3.8 times as many calls (buffer sharing, lowering and name probing were
quadratic), so any quadratic pass fails here with the stage it is in."""
from __future__ import annotations

import cProfile
import pstats
from contextlib import contextmanager

import numpy as np
import pytest

import glow_core
from glow_core import api, timing
from glow_conformance import example_models

#: A stage may grow by this factor when the model doubles (a linear stage grows by at most 2: fixed costs).
MAX_GROWTH = 2.1
#: Stages making fewer calls than this on the smaller model are too small to judge.
MIN_CALLS = 300


def calls_per_stage(model, backend="interpreter") -> dict[str, int]:
    """Python function calls made by each stage of compiling ``model``, and by dumping its graph and IR."""
    counts: dict[str, int] = {}

    @contextmanager
    def counted(stats, name):
        prof = cProfile.Profile()
        with timing.stage(stats, name):
            prof.enable()
            try:
                yield
            finally:
                prof.disable()
        counts[name] = counts.get(name, 0) + pstats.Stats(prof).total_calls

    real = api.stage
    api.stage = counted
    try:
        cm = glow_core.compile(model, backend)
    finally:
        api.stage = real
    for name, dump in (("graph-dump", cm.last.graph.dump), ("ir-dump", cm.last.ir.dump)):
        with counted({}, name):
            dump()
    return counts


SIZES = {
    "elementwise_chain": lambda k: example_models.elementwise_chain(400 * k),
    "bert_encoder": lambda k: example_models.bert_encoder(seq=4, hidden=16, heads=2, ffn=32, layers=2 * k),
    "vit_tiny": lambda k: example_models.vit_tiny(size=16, patch=4, hidden=16, heads=2, mlp=32, classes=4,
                                                  layers=2 * k),
}


@pytest.mark.parametrize("name", sorted(SIZES))
def test_every_stage_is_linear(name):
    small, large = calls_per_stage(SIZES[name](1)), calls_per_stage(SIZES[name](2))
    assert set(small) == set(large)
    for stage in ("import", "graph-passes", "lowering", "post-lowering", "verify", "schedule", "ir-gen",
                  "ir-passes", "memory-plan", "backend-compile", "graph-dump", "ir-dump"):
        assert stage in small, f"stage {stage} did not run"
    judged = {s: large[s] / small[s] for s in small if small[s] >= MIN_CALLS}
    assert len(judged) >= 8, small
    grew = {s: round(r, 2) for s, r in judged.items() if r > MAX_GROWTH}
    assert not grew, f"stages growing faster than the model ({name}, x2): {grew}; calls {small} -> {large}"


def test_stage_times_recorded():
    res = glow_core.compile(example_models.cnn()).last
    times = res.stats["times"]
    assert list(times) == ["import", "graph-passes", "lowering", "post-lowering", "verify", "schedule", "ir-gen",
                           "ir-passes", "memory-plan", "backend-compile"]
    assert all(t >= 0 for t in times.values())
    spans = res.stats["spans"]
    assert [s[0] for s in spans if s[0] in ("import", "lowering")] == ["import", "lowering"]
    assert all(b[1] >= a[1] for a, b in zip(spans, spans[1:]))  # in the order they ran
    assert sum(s[2] for s in spans) == pytest.approx(sum(times.values()))


def chain_reference(model, feeds):
    """The elementwise chain evaluated node by node with numpy (its ops are Add, Mul, Sub, Relu, Sigmoid, Neg)."""
    from onnx import numpy_helper
    env = dict(feeds)
    env.update({t.name: numpy_helper.to_array(t) for t in model.graph.initializer})
    ops = {"Add": np.add, "Mul": np.multiply, "Sub": np.subtract, "Neg": np.negative,
           "Relu": lambda x: np.maximum(x, np.float32(0)),
           "Sigmoid": lambda x: (1 / (1 + np.exp(-x.astype(np.float64)))).astype(np.float32)}
    for n in model.graph.node:
        env[n.output[0]] = ops[n.op_type](*[env[x] for x in n.input])
    return env["output"]


def test_long_chain_matches_numpy():
    model = example_models.elementwise_chain(3000)
    rng = np.random.default_rng(0)
    feeds = {k: rng.standard_normal((8, 32)).astype(np.float32) for k in ("input", "second")}
    res = glow_core.compile(model)
    np.testing.assert_allclose(res.run(feeds)["output"], chain_reference(model, feeds), rtol=1e-5, atol=1e-6)
    stats = res.last.stats
    assert stats["passes"]["cse"] > 0 and stats["shared_buffers"] > 2000
    # The in-place chain needs a handful of [8, 32] buffers whatever its length.
    assert res.last.ir.plan.activations_size <= 4 * 8 * 32 * 4
