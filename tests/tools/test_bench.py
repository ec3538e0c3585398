"""``glowc bench``, FLOP counting, per-instruction timing (``CompiledFunction.execute_timed``) and the progress
line: counts checked against hand-derived figures and a published one, output parsed as a user reads it."""
from __future__ import annotations

import os
import re
import select
import shutil
import subprocess
import sys

import numpy as np
import onnx
import pytest

import glow_core
from glow_conformance import example_models as models
from glow_tools.bench import (bench, format_layers, format_report, op_kinds, ort_layer_times, ort_node_times,
                              profile_layers)
from glow_tools.progress import Progress
from glow_interpreter.backend import InterpreterBackend, InterpreterFunction

CNN_FLOPS = {  # models.cnn(): Conv 3->16 3x3 pad 1 on 28x28, Relu, MaxPool 2x2, Gemm 3136 -> 10
    "conv": 16 * 28 * 28 * (2 * 3 * 3 * 3 + 1),  # a multiply-add per tap counts 2, the bias 1
    "max": 16 * 28 * 28,  # Relu lowered to max(x, 0)
    "max_pool": 16 * 14 * 14 * 4,
    "matmul": 2 * 3136 * 10,
    "add": 10,
    "broadcast": 0,
}


def _glowc(*args, **kw):
    return subprocess.run([sys.executable, "-m", "glow_tools.cli", *args], capture_output=True, text=True,
                          timeout=600, **kw)


def test_flops_of_the_cnn_by_op_kind():
    cm = glow_core.compile(models.cnn(), "interpreter")
    kinds = op_kinds(cm.ir)
    assert {k: v.flops for k, v in kinds.items()} == CNN_FLOPS
    assert {k: v.count for k, v in kinds.items()} == {k: 1 for k in CNN_FLOPS}


def test_resnet18_flops_match_the_published_count():
    """ResNet-18 at 224x224 is 1.814 GMAC (1.82 "GFLOPs" as MACs in the usual tables): 3.63 GFLOP at 2 per
    multiply-add; biases, Relu, pooling and residual adds add 0.2 %."""
    cm = glow_core.compile(models.resnet18(), "interpreter")
    total = sum(k.flops for k in op_kinds(cm.ir).values())
    assert abs(total / (2 * 1.814e9) - 1) < 0.005, total


def test_extended_op_has_no_flop_rule():
    from onnx import TensorProto, helper
    g = helper.make_graph([helper.make_node("TopK", ["x", "k"], ["v", "i"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, (4, 6))],
                          [helper.make_tensor_value_info("v", TensorProto.FLOAT, None),
                           helper.make_tensor_value_info("i", TensorProto.INT64, None)],
                          [helper.make_tensor("k", TensorProto.INT64, (1,), [2])])
    cm = glow_core.compile(helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)]), "interpreter")
    assert op_kinds(cm.ir)["TopK"].flops is None


def test_interpreter_times_every_instruction_in_order():
    cm = glow_core.compile(models.resnet(size=32), "interpreter")
    x = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)
    fn = cm.last.compiled
    want = fn.execute({"input": x})
    outs, timings = fn.execute_timed({"input": x})
    assert [ins for ins, _, _ in timings] == cm.ir.code  # one event per executed instruction, in order
    ends = [s + d for _, s, d in timings]
    assert all(d >= 0 for _, _, d in timings)
    assert all(e <= s2 + 1e-9 for e, (_, s2, _) in zip(ends, timings[1:]))  # disjoint, in execution order
    for k in want:
        np.testing.assert_array_equal(outs[k], want[k])


def _rows(text, header, skip=1):
    """The rows of a table, ``skip`` lines below the line starting with ``header`` (until a blank line)."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header))
    rows = []
    for line in lines[start + skip:]:
        if not line.strip() or line.startswith(("note:", "ratio")):
            break
        rows.append(line.split())
    return rows


def test_bench_cli_against_onnxruntime(tmp_path):
    pytest.importorskip("onnxruntime")
    path = tmp_path / "cnn.onnx"
    onnx.save(models.cnn(), path)
    r = _glowc("bench", str(path), "--backend", "interpreter", "--threads", "1", "--seconds", "0.3",
               "--compare", "onnxruntime")
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""  # no progress line into a pipe
    out = r.stdout
    assert f"{sum(CNN_FLOPS.values()) / 1e6:.4g} MFLOP per run" in out
    runtimes = {row[0] + " " + row[1] if row[0] == "glow" else row[0]: row
                for row in _rows(out, "runtime")}
    assert set(runtimes) == {"glow interpreter", "onnxruntime"}
    m = re.search(r"ratio glow/onnxruntime \(median latency, timed in alternating rounds\): ([0-9.]+) .*max \|glow - onnxruntime\| = (\S+)", out)
    assert m and float(m.group(2)) < 1e-4
    rows = _rows(out, "per op kind", skip=2)
    assert {row[0] for row in rows} == set(CNN_FLOPS)
    ms = [float(row[2]) for row in rows]
    assert ms == sorted(ms, reverse=True)  # sorted by time
    assert abs(sum(float(row[4].rstrip("%")) for row in rows) - 100) < 0.5
    mflop = {row[0]: float(row[5]) for row in rows}
    assert mflop["conv"] == pytest.approx(CNN_FLOPS["conv"] / 1e6, rel=1e-3)


def test_bench_cpu_times_every_op_kind(tmp_path):
    """The cpu backend times its kernels in generated code (glow_run_table_timed) for the per-op-kind table."""
    path = tmp_path / "cnn.onnx"
    onnx.save(models.cnn(), path)
    r = _glowc("bench", str(path), "--backend", "cpu", "--threads", "1", "--seconds", "0.2")
    if r.returncode and "no C compiler" in r.stderr:
        pytest.skip("no C compiler")
    assert r.returncode == 0, r.stderr
    rows = _rows(r.stdout, "per op kind (glow cpu, per-instruction timing", skip=2)
    kinds = {row[0] for row in rows}
    assert {"conv", "matmul", "max_pool"} <= kinds <= set(CNN_FLOPS)  # relu may be fused into the conv
    ms = [float(row[2]) for row in rows]
    assert ms == sorted(ms, reverse=True)
    assert abs(sum(float(row[4].rstrip("%")) for row in rows) - 100) < 0.5


def test_per_layer_table_maps_glow_and_onnxruntime_to_the_model_nodes():
    """The cnn's layers by ONNX node: glow's conv with its relu fused is one layer covering both nodes;
    onnxruntime's renamed fused node ("relu_nchwc", after the relu's output)
    lands on the same layer; the table lists every layer with a time and a share summing to 100%."""
    pytest.importorskip("onnxruntime")
    if shutil.which("cc") is None and shutil.which("gcc") is None and not os.environ.get("CC"):
        pytest.skip("no C compiler")
    model = models.cnn()
    cm = glow_core.compile(model, "cpu", num_threads=1)
    feed = {"input": np.random.default_rng(0).standard_normal((1, 3, 28, 28)).astype(np.float32)}
    cm.run(feed)
    layers, wall = profile_layers(cm, feed, 0.05)
    by = {x.name: x for x in layers}
    assert set(by) == {"conv1", "pool1", "fc"} and by["conv1"].covers == {"conv1", "relu1"}
    assert by["conv1"].flops == CNN_FLOPS["conv"]  # the fused relu is not counted (glow_core.flops)
    assert by["fc"].flops == CNN_FLOPS["matmul"] + CNN_FLOPS["add"] and by["pool1"].flops == CNN_FLOPS["max_pool"]
    assert all(x.seconds > 0 for x in layers) and wall > 0
    ort = ort_layer_times(model, ort_node_times(model, feed, 1, runs=3), layers)
    assert {"conv1", "pool1", "fc"} <= set(ort)
    text = format_layers("per layer, cnn", layers, wall, ort).splitlines()
    rows = [line.split() for line in text[2:]]
    assert {r[0] for r in rows} >= {"conv1", "pool1", "fc"}
    assert abs(sum(float(r[4].rstrip("%")) for r in rows if r[2] != "-") - 100) < 0.5


class _UntimedFunction(InterpreterFunction):
    def execute_timed(self, inputs):
        return None


class _UntimedBackend(InterpreterBackend):
    """A backend whose compiled functions cannot time single instructions (the hook's default)."""

    name = "untimed"

    def compile(self, function, options):
        return _UntimedFunction(function)


def test_bench_without_instruction_timing_shows_flops_by_kind():
    report = bench(models.cnn(), _UntimedBackend(), threads=1, budget=0.1)
    text = format_report(report)
    rows = _rows(text, "per op kind (glow untimed): FLOPs only", skip=2)
    assert [row[0] for row in rows][:2] == ["conv", "matmul"]  # sorted by FLOPs
    assert "execute_timed returns None" in text


def test_bench_with_inputs_from_files(tmp_path):
    path = tmp_path / "ls.onnx"
    onnx.save(models.linear_sigmoid(), path)
    np.save(tmp_path / "x.npy", np.ones((3, 10), np.float32))
    r = _glowc("bench", str(path), "--seconds", "0.1", "--input", f"input_1={tmp_path / 'x.npy'}")
    assert r.returncode == 0, r.stderr
    assert "inputs input_1 float32[3, 10]" in r.stdout
    r = _glowc("bench", str(path), "--seconds", "0.1", "--input", f"wrong={tmp_path / 'x.npy'}")
    assert r.returncode == 1 and r.stderr.splitlines() == [
        "glowc: error: unknown input(s) ['wrong']; the model takes ['input_1']"]


def test_progress_draws_on_a_terminal_and_erases_itself():
    master, slave = os.openpty()
    with open(slave, "w", closefd=True) as tty:
        with Progress("timing cpu", total=2.0, stream=tty, interval=0) as p:
            p.update(1.0, note="7 runs")
        assert p.enabled
    chunks = []
    while select.select([master], [], [], 1.0)[0]:  # everything written, however the pty splits it
        try:
            chunks.append(os.read(master, 4096))
        except OSError:  # EIO: the terminal side is closed and everything was read
            break
    os.close(master)
    text = b"".join(chunks).decode()
    assert "\rtiming cpu [############............]  50% 7 runs" in text
    assert text.endswith("\r")  # the line is blanked and the cursor back at its start


def test_progress_is_silent_in_a_pipe(tmp_path):
    with open(tmp_path / "log", "w") as f:
        with Progress("compiling", stream=f, tick=True, interval=0.01) as p:
            p.update(note="x")
        assert not p.enabled
    assert (tmp_path / "log").read_text() == ""


def _read_until_exit(fd, proc) -> str:
    """Everything ``proc`` writes to the pty ``fd`` until it exits (then EIO: everything was read)."""
    chunks = []
    while True:
        if not select.select([fd], [], [], 1.0)[0]:
            if proc.poll() is not None:
                break
            continue
        try:
            data = os.read(fd, 4096)
        except OSError:
            break
        if not data:
            break
        chunks.append(data)
    return b"".join(chunks).decode(errors="replace")


def test_long_commands_show_progress_on_a_terminal_only(tmp_path):
    """``glowc run --repeat`` (and the compile before it) on a terminal: a status line, erased at the end so the
    results print on clean lines; the same command in a pipe writes no progress at all."""
    path = tmp_path / "cnn.onnx"
    onnx.save(models.cnn(), path)
    args = [sys.executable, "-m", "glow_tools.cli", "run", str(path), "--repeat", "300", "--output-dir",
            str(tmp_path / "out")]
    env = {k: v for k, v in os.environ.items() if k not in ("GLOW_PROGRESS", "TERM")}
    master, slave = os.openpty()
    proc = subprocess.Popen(args, stdin=slave, stdout=slave, stderr=slave, env=env)
    os.close(slave)
    text = _read_until_exit(master, proc)
    assert proc.wait(timeout=600) == 0, text
    os.close(master)
    assert re.search(r"\rrunning cnn\.onnx \[[#.]{24}\] +\d+% \d+/300 runs", text), text
    assert "\routput: float32 [1, 10] -> " in text  # the progress line was erased first
    r = subprocess.run(args, capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0 and r.stderr == "" and "\r" not in r.stdout, (r.stdout, r.stderr)
