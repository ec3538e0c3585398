"""The conformance suite's entry points: ``glowc conformance`` from any folder (with and without -n 2),
``pytest conformance`` from the repository root (each file imported once, under glow_conformance only),
and a clear usage error for an unknown backend."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from glow_conformance.checker import compare, ulp_distance

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _run(args, cwd):
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("xdist", [[], ["-n", "2"]])
def test_glowc_conformance_from_any_folder(tmp_path, xdist):
    glowc = shutil.which("glowc")
    if glowc is None:
        pytest.skip("glowc is not installed")
    r = _run([glowc, "conformance", "--backend", "interpreter", "--case", "models/mlp/float32/*",
              "--case", "negative/unknown_op/*", "-q"] + xdist, tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "2 passed" in r.stdout and "2 claimed: 2 passed" in r.stdout and "filter: --case" in r.stdout


def test_pytest_from_the_repository_root_imports_each_file_once():
    code = ("import sys, pytest\n"
            "rc = pytest.main(['conformance', '--backend=interpreter', '-q', '--case', 'passes/dce/*'])\n"
            "mods = [m for m in sys.modules if m == 'conformance' or m.startswith('conformance.')]\n"
            "assert sys.modules['conformance'] is sys.modules['glow_conformance'], 'two package objects'\n"
            "assert sorted(mods) == ['conformance', 'conformance.conftest'], mods\n"
            "sys.exit(rc)\n")
    r = _run([sys.executable, "-c", code], ROOT)
    assert r.returncode == 0, r.stdout + r.stderr


def test_unknown_backend_is_a_usage_error_listing_the_installed_ones(tmp_path):
    r = _run([sys.executable, "-c", "import glow_conformance, sys; sys.exit(glow_conformance.main("
              "['--backend', 'no-such-backend']))"], tmp_path)
    assert r.returncode == 4
    assert "unknown backend 'no-such-backend'" in r.stderr and "interpreter" in r.stderr


def test_checker_ulps_nan_and_exactness():
    a = np.array([1.0, -0.0, np.inf, np.nan], np.float32)
    b = np.array([np.nextafter(np.float32(1), np.float32(2)), 0.0, np.inf, np.nan], np.float32)
    assert list(ulp_distance(a, b)[:3]) == [1, 0, 0]
    compare(a, b, "elementwise", "d", "r")  # 1 ULP, -0 == +0, inf == inf, NaN == NaN
    with pytest.raises(AssertionError, match="exact comparison"):
        compare(a, b, "elementwise-exact", "d", "r")  # correctly rounded: 0 ULPs
    compare(a[1:], b[1:], "elementwise-exact", "d", "r")
    with pytest.raises(AssertionError, match="-0.0 is not 0.0"):
        compare(a[1:], b[1:], "movement", "d", "r")  # bit-exact: the sign of zero counts
    nan_payload = np.array([0x7FC00001], np.uint32).view(np.float32)
    compare(nan_payload, np.array([np.nan], np.float32), "movement", "d", "r")  # NaN payload aside
    with pytest.raises(AssertionError, match="max ULP error"):
        compare(a, b * 2, "elementwise", "d", "r")
    with pytest.raises(AssertionError, match="max abs error 1"):
        compare(np.array([3], np.int8), np.array([2], np.int8), "compare", "d", "r")
    with pytest.raises(AssertionError, match="expected nan"):
        compare(np.array([1.0], np.float32), np.array([np.nan], np.float32), "elementwise", "d", "r")


def test_checker_float16_in_its_own_ulps_and_the_declared_subnormal_rule():
    want = np.array([5e-4], np.float16)
    off = (want.astype(np.float64) * 1.08).astype(np.float16)  # 8 % off: inside the old 6.1e-5 allowance
    with pytest.raises(AssertionError, match="out of tolerance"):
        compare(off, want, "elementwise", "d", "r")
    compare(np.nextafter(want, np.float16(1)), want, "elementwise", "d", "r")  # 1 float16 ULP
    sub = np.array([3e-6, -3e-6], np.float16)  # subnormal in float16
    flushed = np.array([0.0, -0.0], np.float16)
    with pytest.raises(AssertionError):  # flushing is a declared property (flushes_subnormals), never a leniency
        compare(flushed, sub, "elementwise", "d", "r")
    compare(flushed, sub, "elementwise", "d", "r", flush=True)  # declared: flushed, same sign
    with pytest.raises(AssertionError):
        compare(sub, sub, "elementwise", "d", "r", flush=True)  # declared, and not done: inconsistent
    with pytest.raises(AssertionError):
        compare(np.array([-0.0, 0.0], np.float16), sub, "elementwise", "d", "r", flush=True)  # sign lost
    with pytest.raises(AssertionError):
        compare(np.array([0.0], np.float16), np.array([6.2e-5], np.float16), "elementwise", "d", "r",
                flush=True)  # normal


def test_checker_float64_accumulation_in_float64_eps():
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((4, 50)), rng.standard_normal((50, 3))
    exact = a @ b
    mag = np.abs(a) @ np.abs(b)
    compare(exact * (1 + 1e-15), exact, "matmul", "d", "r", n=50, magnitude=mag)
    f32 = (a.astype(np.float32) @ b.astype(np.float32)).astype(np.float64)  # float64 computed in float32
    with pytest.raises(AssertionError, match="out of tolerance"):
        compare(f32, exact, "matmul", "d", "r", n=50, magnitude=mag)
