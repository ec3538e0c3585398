"""Smoke test of bench/bench_exports.py --quick: one small exported model per kind (torch dynamo exports when torch
is installed, onnx.helper builds otherwise), checked against onnxruntime and timed beside it, with one per-op
comparison."""
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

pytest.importorskip("onnxruntime")


def test_bench_exports_quick():
    sys.path.insert(0, ROOT)
    from bench import export_models
    names = export_models.available(quick=True)
    p = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "bench_exports.py"), "--quick"],
                       capture_output=True, text=True, timeout=900)
    out = p.stdout
    assert p.returncode == 0, out + p.stderr
    for needle in ["correctness", "geometric mean", "per op kind, ", "per ONNX op type, ", "per layer, ", "ort time"]:
        assert needle in out, out
    for name in names:
        assert f"  {name} " in out, out
    assert "WRONG" not in out and "FAILED" not in out, out
