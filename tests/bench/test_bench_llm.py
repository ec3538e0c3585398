"""Smoke test of bench/bench_llm.py: --quick (a tiny decoder, one thread, one round) generates the same greedy
tokens as onnxruntime and reports the rates, the bandwidth and the fraction of the bound."""
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

pytest.importorskip("onnxruntime")


def test_bench_llm_quick(tmp_path):
    p = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "bench_llm.py"), "--quick",
                        "--cache-dir", str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    out = p.stdout
    for needle in ("memory bandwidth, 1 thread(s): read ", "C stream read ", "weight bytes per decode step", "prefill tok/s",
                   "decode tok/s", "of bound", "prefill glow/ort", "greedy tokens match onnxruntime's (16 tokens)"):
        assert needle in out, out
    assert "MISMATCH" not in out, out
