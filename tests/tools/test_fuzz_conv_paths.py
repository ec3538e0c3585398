"""The fuzzer's conv family reaches the CPU conv engine's paths at one input channel or one filter per group
(tools/fuzz/families.conv_paths), and finds the bug those geometries hid: a 1x1 conv with one input channel per
group computing only its first row (the engine's input copy in other rows than its kernel's), put back into a
backend in a child process by replacing one function (tests/cpu/broken_templates.broken_python)."""
from __future__ import annotations

import time
from collections import Counter

import numpy as np

from glow_core.api import compile_function
from glow_core.backend import CompiledFunction
from glow_cpu.backend import CPUBackend
from glow_cpu.program import Program
from glow_tools.fuzz.driver import fuzz, replay
from glow_tools.fuzz.generator import drawable_ops, generate
from glow_tools.fuzz.reach import conv_path

from tests.cpu.broken_templates import broken_python


class _Planned(CompiledFunction):
    def __init__(self, program):
        self.program = program

    def execute(self, inputs):
        raise NotImplementedError("planned, not built")


class _PlanOnly(CPUBackend):
    """The cpu backend up to its Program (every kernel's choice), without the C compiler."""

    def compile(self, function, options):
        return _Planned(Program(function, self._threads(options or {})))


def reached(seed: int, graphs: int) -> Counter:
    ops = drawable_ops(["Conv", "Relu"])
    paths = Counter()
    for i in range(graphs):
        model, _ = generate(np.random.default_rng([seed, i]), ops, max_nodes=4, dtypes=["float32"])
        if model is None:
            continue
        try:
            res = compile_function(model, _PlanOnly(), options={"num_threads": 1})
        except Exception:  # noqa: BLE001  (a graph the backend declines: not a path)
            continue
        paths.update(conv_path(c) for c in res.compiled.program.calls if c.instr.op == "conv")
    return paths


def test_conv_family_reaches_every_engine_path_at_one_channel_or_filter_per_group():
    paths = reached(seed=3, graphs=150)
    want = ["engine depthwise nchw->nchw C/g=1 M/g=1 pointwise",  # the flattened 1x1 rows of the bug
            "engine depthwise multiplier nchw->nchw C/g=1 pointwise",
            "engine depthwise nchw->nchw C/g=1 M/g=1",
            "engine depthwise multiplier nchw->nchw C/g=1",
            "engine direct 1-lane nchw->nchw M/g=1"]
    missing = [p for p in want if not paths[p]]
    assert not missing, (missing, paths)
    assert any(p.startswith("engine") and " nchwc->" in p for p in paths), paths  # from another conv's output
    assert any(p.startswith("generic float32 depthwise direct") for p in paths), paths  # a filter fed at run time


#: The bug of commit a7ea856 put back: the engine's input copy in the source's rows while its kernel reads the
#: rows of a 1x1 stride-1 conv flattened into one.
UNFIXED_COPY = """
    import glow_cpu.conv.algorithms as ca
    _copy = ca._input_copy

    def _input_copy(dh, dw, *args, **kw):
        prep, h, w, ximg = _copy(dh, dw, *args, **kw)
        if prep and dh.trivial and dw.trivial:
            prep.update(h=dh.size, w=dw.size, hp=dh.padded, wp=dw.padded)
        return prep, h, w, ximg
    ca._input_copy = _input_copy
    """


def test_fuzzer_finds_the_one_channel_per_group_1x1_bug(tmp_path):
    spec, env = broken_python(tmp_path, UNFIXED_COPY)
    t0 = time.monotonic()
    # graphs of Conv alone: about one in 10-20 has a pointwise conv with one channel per group over several rows
    # (seed 1: graph 2)
    s = fuzz(spec, seconds=600, seed=1, out_dir=str(tmp_path / "out"), ops=["Conv"], dtypes=["float32"],
             max_nodes=3, max_graphs=6, shrink_seconds=30, env=env, log=lambda *a: None, max_findings=1)
    assert s.findings, f"nothing found in {s.graphs} graphs ({s.compared} compared)"
    f = s.findings[0]
    assert f.signature == "mismatch" and f.ops == ["Conv"], f
    # the report counts the graphs compared that reached each conv path (glowc fuzz prints them)
    assert any(p.startswith("engine depthwise") and "pointwise" in p for p in s.conv_paths), s.conv_paths
    assert max(s.conv_paths.values()) <= s.compared
    assert time.monotonic() - t0 < 300
    assert replay(f.files[0], "cpu", log=lambda *a: None) is None  # the repository's backend agrees
