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

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


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
    assert "2 passed" in r.stdout and "profile models" in r.stdout


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
    compare(a, b, "elementwise-exact", "d", "r")  # 1 ULP, -0 == +0, inf == inf, NaN == NaN
    with pytest.raises(AssertionError, match="max ULP error"):
        compare(a, b * 2, "elementwise", "d", "r")
    with pytest.raises(AssertionError, match="max abs error 1"):
        compare(np.array([3], np.int8), np.array([2], np.int8), "compare", "d", "r")
    with pytest.raises(AssertionError, match="expected nan"):
        compare(np.array([1.0], np.float32), np.array([np.nan], np.float32), "elementwise", "d", "r")
