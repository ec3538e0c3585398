"""Sanitizer builds of the cpu backend: flags and environment, the refusal without the ASan runtime, and
``pytest conformance --sanitize`` failing the cases of a template broken to read out of bounds (a temporary
copy of the templates: the repository is never touched), with the report attributed to the case."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from glow_conformance import example_models as models
from glow_core.errors import BackendError, GlowError

from .broken_templates import broken_backend

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_flags_and_environment():
    from glow_cpu.build import sanitize
    assert sanitize.requested({"sanitize": "undefined,address"}) == ("address", "undefined")
    assert sanitize.flags(()) == []
    f = sanitize.flags(("address", "undefined"))
    assert "-fsanitize=address,undefined" in f and "-fno-omit-frame-pointer" in f
    env = sanitize.runtime_env(("address",), "/tmp/x")
    assert "libasan" in env["LD_PRELOAD"] and "detect_leaks=0" in env["ASAN_OPTIONS"]
    with pytest.raises(GlowError, match="thread"):
        sanitize.requested({"sanitize": "thread"})


def test_address_build_is_refused_without_the_runtime(monkeypatch):
    from glow_cpu.build import sanitize
    if sanitize.runtime_loaded():
        pytest.skip("this process has the ASan runtime")
    import glow_core
    with pytest.raises(BackendError, match="glow_cpu.build.sanitize"):
        glow_core.compile(models.linear_sigmoid(seed=1), "cpu", sanitize="address")


def test_undefined_build_runs_in_process():
    import glow_core
    m = models.linear_sigmoid(seed=1)
    cm = glow_core.compile(m, "cpu", sanitize="undefined")
    rng = np.random.default_rng(0)
    feeds = {nm: rng.standard_normal(dims).astype(np.float32) for nm, _, dims in cm.specs}
    ref = glow_core.compile(m, "interpreter").run(feeds)
    got = cm.run(feeds)
    assert all(np.allclose(got[k], ref[k], rtol=1e-5, atol=1e-6) for k in ref)


def test_conformance_sanitize_reports_an_out_of_bounds_read(tmp_path):
    # the odometer starts one dim too far: reads idx[] and shape[] past their end
    spec, env = broken_backend(tmp_path, "strided.c.j2", "for (int d = {{ p.outer_rank - 1 }}; d >= 0; --d)",
                               "for (int d = {{ p.outer_rank }}; d >= 0; --d)")
    env = dict(os.environ, **env)
    env.pop("GLOW_SANITIZE_LOG_DIR", None)
    r = subprocess.run([sys.executable, "-m", "pytest", "conformance", f"--backend={spec}", "--sanitize",
                        "-p", "no:cacheprovider", "-q", "--case", "primitives/transpose/float32/*"],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    out = r.stdout + r.stderr
    assert r.returncode == 1, out[-3000:]
    assert "sanitizer report(s) while running this case" in out, out[-3000:]
    assert "AddressSanitizer" in out and "overflow" in out, out[-3000:]
