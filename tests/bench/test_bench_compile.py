"""Smoke test of bench/bench_compile.py: --quick prints every stage's time beside onnxruntime's."""
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

pytest.importorskip("onnxruntime")


def test_bench_compile_quick():
    p = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "bench_compile.py"), "--quick",
                        "--backends", "interpreter"], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    out = p.stdout
    for needle in ("interpreter", "import", "lower", "sched", "ir-pass", "plan", "backend", "other", "ort",
                   "cnn", "chain500", "imported order", "scheduled"):
        assert needle in out, out
