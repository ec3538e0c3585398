"""Smoke test of bench/bench_cpu.py: --quick on the small models (correctness against onnxruntime included)."""
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

pytest.importorskip("onnxruntime")


def test_bench_cpu_quick():
    p = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "bench_cpu.py"), "--quick",
                        "--models", "cnn,linear_sigmoid", "--reps", "2"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    out = p.stdout
    for needle in ("correctness", "cnn", "linear_sigmoid", "geometric mean", "GFLOP/s", "per call", "compile",
                   "per layer, ", "ort time"):
        assert needle in out, out
    assert "WRONG" not in out and "FAILED" not in out, out


def test_new_models_match_onnxruntime_small():
    """The new builders, at small sizes, agree with onnxruntime on the CPU backend."""
    import numpy as np
    import glow_core
    from glow_conformance import example_models
    from bench.bench_cpu import ORT_IR_VERSION, feed_of, ort_session

    for m in (example_models.mlp(batch=4, sizes=(32, 16, 8)), example_models.resnet18(size=32, classes=10),
              example_models.mobilenetv2(size=32, classes=10, width=0.25),
              example_models.bert_encoder(seq=8, hidden=32, heads=2, layers=1, ffn=64),
              example_models.resnet50(size=32, classes=10, blocks=(1, 1), widths=(8, 16)),
              example_models.efficientnet(size=32, classes=10, stages=((1, 8, 1, 1, 3), (6, 16, 2, 2, 5)), head=32),
              example_models.unet(size=32, widths=(4, 8, 16)),
              example_models.lstm_lm(seq=6, vocab=30, hidden=16),
              example_models.vit_tiny(size=32, patch=8, hidden=16, heads=2, layers=1, mlp=32, classes=10)):
        m.ir_version = min(m.ir_version, ORT_IR_VERSION)
        feed = feed_of(m)
        got = glow_core.compile(m, "cpu", num_threads=1).run(feed)[m.graph.output[0].name]
        want = ort_session(m, 1).run(None, feed)[0]
        assert np.abs(got - want).max() <= 1e-3 * np.abs(want).max(), m.graph.name
