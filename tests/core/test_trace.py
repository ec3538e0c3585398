"""Chrome traces (``glowc run --trace``, ``compile(..., trace=True)``): the JSON read back as a viewer reads it,
checked against the compiled IR (one event per executed instruction, in order), against FLOPs derived by hand,
and against the wall time of each run."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import onnx
import pytest

import glow_core
from glow_conformance import example_models as models

STAGES = ["import", "graph-passes", "lowering", "post-lowering", "verify", "schedule", "ir-gen", "ir-passes",
          "memory-plan", "backend-compile"]


def _complete(events, cat):
    return [e for e in events if e.get("ph") == "X" and e["cat"] == cat]


def _runs(events):
    """Each run event with the instruction events inside it (same track, within its time span)."""
    instrs = _complete(events, "instr")
    out = []
    for r in _complete(events, "run"):
        inside = [e for e in instrs if e["pid"] == r["pid"] and r["ts"] <= e["ts"]
                  and e["ts"] + e["dur"] <= r["ts"] + r["dur"] + 1e-3]
        out.append((r, sorted(inside, key=lambda e: e["ts"])))
    return out


def _well_formed(events):
    names = {(e["pid"], e["tid"]) for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    for e in events:
        if e["ph"] == "X":
            assert {"name", "cat", "ts", "dur", "pid", "tid"} <= set(e) and e["ts"] >= 0 and e["dur"] >= 0
            assert (e["pid"], e["tid"]) in names  # every track is named


def test_resnet18_cpu_trace(tmp_path):
    """ResNet-18 (64x64 input, 100 classes: the full 18-layer topology, small enough for CI) on the cpu backend:
    every run has one event per executed instruction, in execution order, and the instructions' times add up to
    the run's wall time within 10 % (median over the runs; a run is the whole call from Python, copies in and
    out included)."""
    path = tmp_path / "r18.onnx"
    onnx.save(models.resnet18(size=64, classes=100), path)
    trace = tmp_path / "r18.json"
    r = subprocess.run([sys.executable, "-m", "glow_tools.cli", "run", str(path), "--backend", "cpu", "--trace",
                        str(trace), "--repeat", "7", "--threads", "1", "--output-dir", str(tmp_path)],
                       capture_output=True, text=True)
    if r.returncode and "no C compiler" in r.stderr:
        pytest.skip("no C compiler")
    assert r.returncode == 0, r.stderr
    events = json.loads(trace.read_text())["traceEvents"]
    _well_formed(events)
    code = glow_core.compile(str(path), "cpu", num_threads=1).ir.code
    runs = _runs(events)
    assert len(runs) == 7
    assert f"7 runs, {7 * len(code)} instruction events" in r.stdout
    shares = []
    for run, instrs in runs:
        assert [e["args"]["name"] for e in instrs] == [ins.name for ins in code]
        assert [e["name"] for e in instrs] == [ins.op for ins in code]
        shares.append(sum(e["dur"] for e in instrs) / run["dur"])
    print(f"ResNet-18 cpu trace: {len(runs)} runs x {len(code)} instructions = "
          f"{sum(len(i) for _, i in runs)} instruction events; instruction times / run wall time: median "
          f"{np.median(shares):.3f} (min {min(shares):.3f}, max {max(shares):.3f})")
    assert 0.9 <= float(np.median(shares)) <= 1.0, shares
    stages = [e["name"] for e in _complete(events, "compile")]
    assert [s for s in stages if s != "c-compiler"] == STAGES
    # The stem: Conv 3->64, 7x7, stride 2, pad 3 on 64x64 -> 32x32 (ReLU fused), FLOPs from the definition.
    first = runs[0][1][0]["args"]
    assert first["op"] == "conv" and first["outputs"] == ["float32[1, 64, 32, 32]"]
    assert first["inputs"][:2] == ["float32[1, 3, 64, 64]", "float32[64, 3, 7, 7]"]
    assert first["flops"] == 64 * 32 * 32 * (2 * 3 * 7 * 7 + 1)
    assert first["bytes"] == 4 * (64 * 32 * 32 + 3 * 64 * 64 + 64 * 3 * 7 * 7 + 64)


def test_compile_trace_on_interpreter(tmp_path):
    """``compile(..., trace="file.json")``: stages, then one event per instruction for every run, written after
    each run; a second shape compiles again and shows as a second compilation."""
    m = models.cnn()
    out = tmp_path / "t.json"
    cm = glow_core.compile(m, "interpreter", trace=str(out))
    x = np.random.default_rng(0).standard_normal((1, 3, 28, 28)).astype(np.float32)
    want = glow_core.compile(m, "interpreter").run({"input": x})["output"]
    for _ in range(3):
        np.testing.assert_array_equal(cm.run({"input": x})["output"], want)
    events = json.loads(out.read_text())["traceEvents"]
    _well_formed(events)
    runs = _runs(events)
    assert len(runs) == 3
    for _, instrs in runs:
        assert [e["name"] for e in instrs] == [ins.op for ins in cm.ir.code]
    by_op = {e["args"]["op"]: e["args"] for e in runs[0][1]}
    assert by_op["matmul"]["flops"] == 2 * 3136 * 10
    assert by_op["max_pool"]["outputs"] == ["float32[1, 16, 14, 14]"]
    assert [e["name"] for e in _complete(events, "compile")] == STAGES


def test_c_compiler_is_a_stage_of_its_own(tmp_path, monkeypatch):
    """With an empty kernel cache the C compiler runs: it is a stage (taken out of backend-compile, so the stage
    times still add up to the spans) and a trace track of its own, inside the backend-compile span."""
    monkeypatch.setenv("GLOW_CACHE_DIR", str(tmp_path / "cache"))
    try:
        cm = glow_core.compile(models.linear_sigmoid(), "cpu", num_threads=1, trace=True)
    except glow_core.errors.GlowError as e:
        if "no C compiler" in str(e):
            pytest.skip("no C compiler")
        raise
    stats = cm.last.stats
    assert list(stats["times"])[-2:] == ["backend-compile", "c-compiler"]
    assert 0 < stats["times"]["c-compiler"] and stats["times"]["backend-compile"] >= 0
    assert sum(s[2] for s in stats["spans"]) == pytest.approx(sum(stats["times"].values()))
    compile_events = {e["name"]: e for e in _complete(cm.trace.events, "compile")}
    cc, bc = compile_events["c-compiler"], compile_events["backend-compile"]
    assert cc["tid"] != bc["tid"]
    assert bc["ts"] <= cc["ts"] and cc["ts"] + cc["dur"] <= bc["ts"] + bc["dur"] + 1e-3
    # Cached now: a second compilation runs no compiler and has no such stage.
    again = glow_core.compile(models.linear_sigmoid(), "cpu", num_threads=1).last.stats
    assert "c-compiler" not in again["times"]


def test_device_tracks_from_timings():
    """A backend that reports a device track per instruction (the 4th element of a timing) gets a row for each."""
    from glow_core.trace import Trace

    ins = glow_core.compile(models.cnn(), "interpreter").ir.code
    t = Trace()
    t.add_run("vendor", t.origin, 1.0, [(ins[0], 0.0, 0.25, "dsp0"), (ins[1], 0.25, 0.25, "dma"),
                                         (ins[2], 0.5, 0.25, "dsp0")])
    threads = {e["tid"]: e["args"]["name"] for e in t.events if e["ph"] == "M" and e["name"] == "thread_name"}
    rows = [threads[e["tid"]] for e in _complete(t.events, "instr")]
    assert rows == ["dsp0", "dma", "dsp0"]
    assert [e["ts"] for e in _complete(t.events, "instr")] == [0.0, 250000.0, 500000.0]


def test_partitioned_run_has_a_track_per_partition():
    """A model split across cpu and interpreter (Relu forced onto the interpreter): each partition's instructions
    are on the track of its device, in execution order, and the results match the interpreter's."""
    m = models.cnn()
    try:
        cm = glow_core.compile(m, ["cpu", "interpreter"], num_threads=1, force={"Relu": "interpreter"}, trace=True)
    except glow_core.errors.GlowError as e:
        if "no C compiler" in str(e):
            pytest.skip("no C compiler")
        raise
    x = np.random.default_rng(0).standard_normal((1, 3, 28, 28)).astype(np.float32)
    want = glow_core.compile(m, "interpreter").run({"input": x})["output"]
    np.testing.assert_allclose(cm.run({"input": x})["output"], want, rtol=1e-5, atol=1e-5)
    events = cm.trace.events
    _well_formed(events)
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    rows = [(threads[(e["pid"], e["tid"])], e["name"]) for e in sorted(_complete(events, "instr"), key=lambda e: e["ts"])]
    devices = ["p0 on cpu", "p1 on interpreter", "p2 on cpu"]  # conv | relu (forced) | pool, gemm
    assert len(cm.last.parts) == 3
    assert rows == [(d, ins.op) for d, r in zip(devices, cm.last.parts) for ins in r.ir.code]
