"""The vendor's first hour: the backend template bakes, installs, is discovered, runs models and passes the
conformance suite, for both device kinds (``functional``: kernels on a flat-memory simulated device;
``scratchpad``: the reference NPU's pieces); hostile backend names and unknown kinds are refused cleanly.

The baked project is pip-installed (editable) into the current environment for the duration of one test and
uninstalled afterwards; everything that must see the new entry point runs in a subprocess.
"""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "backends" / "template"
BIN = Path(sys.executable).parent


def _env():
    env = dict(os.environ)
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env.pop("PYTEST_ADDOPTS", None)
    env.pop("PYTEST_XDIST_WORKER", None)
    return env


def run(cmd, cwd, timeout=900, check=True):
    """Run ``cmd`` (a list) in ``cwd``; on failure show its output in the assertion."""
    p = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=_env())
    if check:
        assert p.returncode == 0, f"{' '.join(map(str, cmd))} exited {p.returncode}\n{p.stdout[-4000:]}\n{p.stderr[-4000:]}"
    return p


def bake(out_dir: Path, **context) -> Path:
    """cookiecutter's Python API, --no-input: the generated project's folder."""
    from cookiecutter.main import cookiecutter
    return Path(cookiecutter(str(TEMPLATE), no_input=True, extra_context=context, output_dir=str(out_dir)))


def _can_build_without_isolation() -> bool:
    import setuptools
    major, minor = (int(x) for x in setuptools.__version__.split(".")[:2])
    return importlib.util.find_spec("wheel") is not None or (major, minor) >= (70, 1)


def pip_install(project: Path):
    """Editable install into this environment (without build isolation when the local setuptools can)."""
    cmd = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "-e", str(project)]
    if _can_build_without_isolation():
        cmd.insert(5, "--no-build-isolation")
    run(cmd, project)


def pip_uninstall(dist: str):
    run([sys.executable, "-m", "pip", "uninstall", "--yes", "--quiet", dist], ROOT, check=False)


def conformance_ready() -> str | None:
    """None when ``glowc conformance`` can run; else why not (the suite is developed alongside)."""
    try:
        ok = importlib.util.find_spec("glow_conformance") is not None and \
            importlib.util.find_spec("glow_conformance.plugin") is not None
    except ImportError:
        ok = False
    return None if ok else "glow_conformance (with its pytest plugin) is not importable yet"


# -- the generated project, without installing it -------------------------------------------------------------
def test_bake_layout(tmp_path):
    t0 = time.perf_counter()
    project = bake(tmp_path, backend_name="acme_npu", vendor="ACME", description="ACME NPU", author="Wile E.")
    assert time.perf_counter() - t0 < 30
    assert project.name == "glow-acme-npu"
    pkg = project / "glow_acme_npu"
    for rel in ("pyproject.toml", "README.md", "ci/conformance.sh", ".github/workflows/conformance.yml",
                "tests/test_backend.py", "glow_acme_npu/backend.py", "glow_acme_npu/device.py",
                "glow_acme_npu/kernels.py", "glow_acme_npu/known_failures.txt"):
        assert (project / rel).is_file(), rel
    # Rendered everywhere, except the device-code templates kept for the vendor's own generator.
    for f in project.rglob("*"):
        if f.is_file() and "kernels_c" not in f.parts:
            assert "cookiecutter" not in f.read_text(encoding="utf-8"), f
    assert "{{ name }}" in (pkg / "kernels_c" / "relu.c.j2").read_text()
    py = (project / "pyproject.toml").read_text()
    assert '[project.entry-points."glow_core.backends"]' in py
    assert 'acme_npu = "glow_acme_npu.backend:AcmeNpuBackend"' in py
    assert "glowc conformance --backend acme_npu -n" in (project / "ci" / "conformance.sh").read_text()
    src = (pkg / "backend.py").read_text()
    for hook in ("is_op_supported", "compile", "should_lower", "transform_post_lowering",
                 "supports_fused_activation", "verify", "optimization_pipeline", "should_share_buffers",
                 "memory_capacity", "known_failures", "emit_bundle"):
        assert f"    def {hook}(" in src, hook
    for f in project.rglob("*.py"):
        compile(f.read_text(), str(f), "exec")


# -- hostile names: one clear line, exit 1, nothing written, no traceback -------------------------------------
HOSTILE = ["acme npu", "acme'npu", 'acme"npu', "x; rm -rf ~", "$(touch pwned)", "1acme", "class", "lambda",
           "interpreter", "cpu", "npu", "core", "tools", "acmé_npu", "Acme_NPU", "../escape", "", "a-b", "x{{y}}"]


@pytest.mark.parametrize("name", HOSTILE)
def test_hostile_name_refused(tmp_path, name):
    p = subprocess.run([str(BIN / "cookiecutter"), "--no-input", str(TEMPLATE), f"backend_name={name}"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=120, env=_env())
    assert p.returncode == 1, (p.stdout, p.stderr)
    # stderr: exactly the hook's one line. (cookiecutter 2.7 itself logs "Stopping generation" with the
    # FailedHookException's traceback on stdout; that log is cookiecutter's, not the template's.)
    assert "Traceback" not in p.stderr
    if "{{" not in name:  # a name that is itself jinja2 is refused while cookiecutter renders it
        assert p.stderr.splitlines() == [p.stderr.strip()] and p.stderr.startswith("error: backend_name "), \
            p.stderr
    assert list(tmp_path.iterdir()) == [], "nothing may be written"
    assert not (tmp_path.parent / "escape").exists()


def test_unknown_device_kind_refused(tmp_path):
    p = subprocess.run([str(BIN / "cookiecutter"), "--no-input", str(TEMPLATE), "backend_name=acme_x",
                        "device_kind=systolic"], cwd=tmp_path, capture_output=True, text=True, timeout=120, env=_env())
    assert p.returncode != 0
    assert "functional" in p.stderr and "scratchpad" in p.stderr, p.stderr  # the accepted kinds are named
    assert list(tmp_path.iterdir()) == [], "nothing may be written"


# -- the scratchpad kind: the reference NPU's pieces, for the vendor to replace one by one ---------------------
SCRATCHPAD_FILES = ("config.py", "emitter.py", "tiling.py", "device.py", "backend.py", "__init__.py",
                    "known_failures.txt")


def test_bake_scratchpad_layout(tmp_path):
    project = bake(tmp_path, backend_name="acme_spad", vendor="ACME", description="ACME scratchpad NPU",
                   author="Wile E.", device_kind="scratchpad")
    pkg = project / "glow_acme_spad"
    assert sorted(f.name for f in pkg.iterdir()) == sorted(SCRATCHPAD_FILES)
    assert not (project / "_scratchpad").exists()
    for rel in ("pyproject.toml", "README.md", "ci/conformance.sh", ".github/workflows/conformance.yml",
                "tests/test_backend.py"):
        assert (project / rel).is_file(), rel
    for f in project.rglob("*"):
        if f.is_file():
            assert "cookiecutter" not in f.read_text(encoding="utf-8"), f
    for f in project.rglob("*.py"):
        compile(f.read_text(), str(f), "exec")
    assert 'acme_spad = "glow_acme_spad.backend:AcmeSpadBackend"' in (project / "pyproject.toml").read_text()
    src = {f: (pkg / f).read_text() for f in SCRATCHPAD_FILES if f.endswith(".py")}
    # built on the NPU's pieces and glow_core.tiling, each hook where the vendor replaces it
    assert "from glow_npu import NpuConfig" in src["config.py"] and "CONFIG = NpuConfig(" in src["config.py"]
    assert "from glow_npu.steps import Step" in src["emitter.py"] and "from glow_npu.isa import Insn" in src["emitter.py"]
    assert "class MinMaxJob" in src["emitter.py"] and "JOBS = {**NpuFunction.JOBS" in src["emitter.py"]
    assert "from glow_core.tiling import" in src["tiling.py"] and "def choose(job, cfg)" in src["tiling.py"]
    assert "from glow_npu.sim import Simulator" in src["device.py"] and "def compute_cycles(" in src["device.py"]
    for hook in ("tiling", "encode", "decode", "required_options", "is_op_supported", "instruction_groups",
                 "fallback_backends", "known_failures"):
        assert f"    def {hook}(" in src["backend.py"], hook
    assert "class AcmeSpadFunction(NpuFunction)" in src["backend.py"]


# The day-one conformance subset of a scratchpad device: every primitive the reference NPU claims (the quantized
# primitives, rescale, max/min, pooling, copy), all dtypes (the 8-bit ones pass, the others are refused).
SCRATCHPAD_CASES = ("primitives/q*", "primitives/rescale/*", "primitives/max/*", "primitives/min/*",
                    "primitives/max_pool/*", "primitives/copy/*")


def test_first_hour_scratchpad(tmp_path, record_property):
    timings = {}
    t0 = time.perf_counter()
    project = bake(tmp_path, backend_name="acme_spad", vendor="ACME", description="ACME scratchpad NPU",
                   author="Wile E.", device_kind="scratchpad")
    try:
        pip_install(project)
        timings["install_s"] = time.perf_counter() - t0
        out = run([str(BIN / "glowc"), "backends"], project).stdout
        assert "acme_spad\tglow_acme_spad.backend:AcmeSpadBackend" in out, out
        t = time.perf_counter()
        run([sys.executable, "-m", "pytest", "-q", "-p", "no:randomly"], project, timeout=900)
        timings["own_tests_s"] = time.perf_counter() - t
        why = conformance_ready()
        if why:
            pytest.skip(f"conformance not run: {why}")
        t = time.perf_counter()
        cases = [a for c in SCRATCHPAD_CASES for a in ("--case", c)]
        p = run([str(BIN / "glowc"), "conformance", "--backend", "acme_spad", "-n", "2", *cases,
                 "--conformance-report=report.html"], project, timeout=1800, check=False)
        timings["conformance_s"] = time.perf_counter() - t
        assert p.returncode == 0, f"conformance failed ({p.returncode}):\n{p.stdout[-6000:]}\n{p.stderr[-3000:]}"
        report = json.loads((project / "report.json").read_text())
        counts = report["counts"]
        assert counts["fail"] == 0 and counts["xpass"] == 0, counts
        passed = {c["id"].split("/")[1] for c in report["cases"] if c["outcome"] == "pass"}
        assert passed == {"qconv", "qmatmul", "qadd", "qmul", "rescale", "qavg_pool", "max_pool", "max", "min",
                          "copy"}, passed
        assert counts["pass"] >= 500, counts
        record_property("conformance_passed", counts["pass"])
    finally:
        pip_uninstall("glow-acme-spad")
        timings["total_s"] = time.perf_counter() - t0
        for k, v in timings.items():
            record_property(k, round(v, 1))
        sys.stderr.write(f"\n[test_first_hour_scratchpad] {json.dumps({k: round(v, 1) for k, v in timings.items()})}\n")


# -- the first hour: bake, install, discover, own tests, conformance -----------------------------------------
def test_first_hour(tmp_path, record_property):
    timings = {}
    t0 = time.perf_counter()
    project = bake(tmp_path, backend_name="acme_npu", vendor="ACME", description="ACME NPU", author="Wile E.")
    timings["bake_s"] = time.perf_counter() - t0
    try:
        t = time.perf_counter()
        pip_install(project)
        timings["install_s"] = time.perf_counter() - t
        out = run([str(BIN / "glowc"), "backends"], project).stdout
        assert "acme_npu\tglow_acme_npu.backend:AcmeNpuBackend" in out, out
        t = time.perf_counter()
        run([sys.executable, "-m", "pytest", "-q", "-p", "no:randomly"], project, timeout=600)
        timings["own_tests_s"] = time.perf_counter() - t
        why = conformance_ready()
        if why:
            pytest.skip(f"conformance not run: {why}; bake + install + own tests passed "
                        f"({json.dumps({k: round(v, 1) for k, v in timings.items()})})")
        t = time.perf_counter()
        p = run([str(BIN / "glowc"), "conformance", "--backend", "acme_npu", "-n", "2",
                 "--conformance-report=report.html"], project, timeout=1800, check=False)
        timings["conformance_s"] = time.perf_counter() - t
        assert p.returncode == 0, f"conformance failed ({p.returncode}):\n{p.stdout[-6000:]}\n{p.stderr[-3000:]}"
        assert (project / "report.html").is_file()
        # its kernels start as the reference kernels: the quantized profiles pass from the first day
        profiles = json.loads((project / "report.json").read_text())["profiles"]
        assert profiles["quantized-int8"]["verdict"] == "pass", profiles["quantized-int8"]
        assert profiles["quantized-int16"]["verdict"] == "pass", profiles["quantized-int16"]
    finally:
        pip_uninstall("glow-acme-npu")
        timings["total_s"] = time.perf_counter() - t0
        for k, v in timings.items():
            record_property(k, round(v, 1))
        sys.stderr.write(f"\n[test_first_hour] {json.dumps({k: round(v, 1) for k, v in timings.items()})}\n")
    assert timings["total_s"] < 3600, "the first hour must fit in an hour"
