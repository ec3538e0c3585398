"""The vendor guide cannot go stale: its tutorial's commands run, primitives.md matches the registry, and
the pages name what the code has (every Backend hook, every bundle macro, the conformance options)."""
from __future__ import annotations

import inspect
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from glow_tools import docs
from glow_core.backend import Backend

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "vendor_guide"
BIN = Path(sys.executable).parent
PAGES = ("tutorial.md", "architecture.md", "backend_api.md", "primitives.md", "conformance.md", "bundles.md",
         "adding_a_primitive.md", "custom_ops.md", "quantization.md", "serving.md", "npu.md", "npu_isa.md")


def tutorial_blocks(text: str, tag: str = "tutorial") -> list[str]:
    """The bodies of the ```bash TAG code blocks, in order."""
    return re.findall(rf"^```bash {tag}[ \t]*\n(.*?)^```[ \t]*$", text, flags=re.S | re.M)


def test_pages_exist_and_links_resolve():
    for page in PAGES:
        text = (GUIDE / page).read_text(encoding="utf-8")
        assert text.startswith("# "), page
        for target in re.findall(r"\]\(([^)#\s]+\.md)(?:#[^)]*)?\)", text):
            if "://" not in target:
                assert (GUIDE / target).is_file(), f"{page} links to missing {target}"


def test_pages_name_files_that_exist():
    """Every repository path a page names in backticks (the worked example's files above all) exists."""
    for page in ("architecture.md", "adding_a_primitive.md", "custom_ops.md", "npu.md"):
        text = (GUIDE / page).read_text(encoding="utf-8")
        for path in re.findall(r"`((?:glow_core|backends|conformance|tests|vendor_guide)/[\w/.*]+\.(?:py|md))`", text):
            found = list(ROOT.glob(path))
            assert found, f"{page} names {path}, which does not exist"


def test_primitives_md_is_up_to_date():
    current = (GUIDE / "primitives.md").read_text(encoding="utf-8")
    assert current == docs.render(), "vendor_guide/primitives.md is stale: run  python -m glow_tools.docs"


def test_docs_check_command(tmp_path):
    out = tmp_path / "p.md"
    assert docs.main(["--output", str(out)]) == 0
    assert docs.main(["--check", "--output", str(out)]) == 0
    out.write_text(out.read_text() + "edited by hand\n")
    assert docs.main(["--check", "--output", str(out)]) == 1


def test_backend_api_names_every_hook():
    text = (GUIDE / "backend_api.md").read_text(encoding="utf-8")
    hooks = [n for n, f in inspect.getmembers(Backend, inspect.isfunction) if not n.startswith("_")]
    assert len(hooks) >= 11
    for name in hooks + ["name"]:
        assert f"`{name}" in text, f"backend_api.md does not document Backend.{name}"


def test_bundles_md_names_every_header_macro():
    header = ROOT / "backends" / "cpu" / "templates" / "bundle.h.j2"
    if not header.is_file():
        pytest.skip("the CPU backend's bundle header template is not there")
    text = (GUIDE / "bundles.md").read_text(encoding="utf-8")
    for macro in re.findall(r"#define \{\{ up \}\}_([A-Z_]+)", header.read_text()):
        if macro.endswith("_H"):  # the include guard
            continue
        assert f"NAME_{macro}" in text, f"bundles.md does not describe NAME_{macro}"
    assert "int NAME(uint8_t *constant_weights, uint8_t *mutable_weights, uint8_t *activations);" in text


def test_conformance_md_matches_the_suite():
    text = (GUIDE / "conformance.md").read_text(encoding="utf-8")
    plugin = ROOT / "conformance" / "plugin.py"
    if not plugin.is_file():
        pytest.skip("glow_conformance's plugin is not written yet")
    src = plugin.read_text()
    from glow_conformance.plugin import OPTIONS
    assert len(OPTIONS) >= 8
    for opt, _ in OPTIONS:
        assert opt in text, f"conformance.md does not mention {opt}"
    m = re.search(r"^TIERS = \(([^)]*)\)", src, flags=re.M)
    if m:
        for tier in re.findall(r'"([a-z_]+)"', m.group(1)):
            assert f"`{tier}`" in text, f"conformance.md does not describe the tier {tier}"


def test_serving_md_matches_the_code():
    """serving.md names every glowc serve option, every deployment() parameter, the endpoints, the Host's fault
    options and stats keys and the Fault kinds; its FaultyDevice example runs."""
    from glow_core import runtime, serve
    from glow_tools.cli import build_parser
    text = (GUIDE / "serving.md").read_text(encoding="utf-8")
    sub = next(a for a in build_parser()._subparsers._group_actions if a.dest == "cmd").choices["serve"]
    flags = [o for a in sub._actions for o in a.option_strings if o.startswith("--") and o != "--help"]
    assert len(flags) >= 10
    for flag in flags:
        assert f"`{flag}" in text, f"serving.md does not describe glowc serve {flag}"
    for name in inspect.signature(serve.deployment).parameters:
        if name != "compile_options":
            assert re.search(rf"[`(, ]{name}[`=,)]", text), f"serving.md does not describe deployment's {name}"
    for endpoint in ("/v2/health/live", "/v2/health/ready", "/v2/models/{name}", "/v2/models/{name}/infer",
                     "Inference-Header-Content-Length", "binary_data_size"):
        assert endpoint in text, endpoint
    for name in ("max_retries", "device_timeout_s", "probe_interval_s", "retries", "healthy", "failures",
                 "DeviceUnavailable", "probe(key, inputs)") + runtime.Fault.KINDS:
        assert name in text, name
    for datatype in serve.OIP_DATATYPES.values():
        assert f"`{datatype}`" in text, datatype
    (example,) = [b for b in re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M) if "FaultyDevice" in b]
    scope: dict = {}
    exec(compile(example, "serving.md", "exec"), scope)  # noqa: S102  (the page's own example)
    h = scope["h"]
    try:
        assert [d.faults for d in h.devices] == [(runtime.Fault("raise", every=50),),
                                                 (runtime.Fault("hang", at=(100,)),), ()]
    finally:
        h.close()


def test_tutorial_runs(tmp_path, record_property):
    """Every ```bash tutorial block, in order, in one bash, in a scratch folder (installs glow-my-npu for the
    duration of the test)."""
    blocks = tutorial_blocks((GUIDE / "tutorial.md").read_text(encoding="utf-8"))
    assert len(blocks) >= 8
    script = "set -euo pipefail\nset -x\n" + "\n".join(blocks)
    (tmp_path / "tutorial.sh").write_text(script)
    env = dict(os.environ, GLOW_KIT=str(ROOT), PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    for k in ("PYTEST_ADDOPTS", "PYTEST_XDIST_WORKER", "PYTEST_CURRENT_TEST"):
        env.pop(k, None)
    t0 = time.perf_counter()
    try:
        p = subprocess.run(["bash", str(tmp_path / "tutorial.sh")], cwd=tmp_path, capture_output=True, text=True,
                           env=env, timeout=3000)
    finally:
        subprocess.run([sys.executable, "-m", "pip", "uninstall", "--yes", "--quiet", "glow-my-npu"],
                       capture_output=True, text=True)
        record_property("tutorial_s", round(time.perf_counter() - t0, 1))
    assert p.returncode == 0, f"the tutorial failed:\n{p.stdout[-5000:]}\n{p.stderr[-5000:]}"
    report = tmp_path / "glow-my-npu" / "reports" / "report.html"
    assert report.is_file() and 'class="case"' in report.read_text() or "class='case'" in report.read_text()


def test_npu_guide_runs(tmp_path, record_property):
    """Every ```bash npu block of npu.md, in order, in one bash, in a scratch folder: the reference NPU's config,
    ISA, simulator, tiling, placement, statistics, conformance, then a scratchpad backend generated from the
    template with new figures (installs glow-my-spad for the duration of the test)."""
    text = (GUIDE / "npu.md").read_text(encoding="utf-8")
    blocks = tutorial_blocks(text, "npu")
    assert len(blocks) >= 8
    for tool in ("glow_core.tiling import", "plan(", "place(", "Simulator(", "assemble(", "stats()", "--asm",
                 "device_kind=scratchpad", "glowc conformance --backend npu", "npu_config="):
        assert tool in text, f"npu.md does not show {tool}"
    script = "set -euo pipefail\nset -x\n" + "\n".join(blocks)
    (tmp_path / "npu.sh").write_text(script)
    env = dict(os.environ, GLOW_KIT=str(ROOT), PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    for k in ("PYTEST_ADDOPTS", "PYTEST_XDIST_WORKER", "PYTEST_CURRENT_TEST"):
        env.pop(k, None)
    t0 = time.perf_counter()
    try:
        p = subprocess.run(["bash", str(tmp_path / "npu.sh")], cwd=tmp_path, capture_output=True, text=True,
                           env=env, timeout=3000)
    finally:
        subprocess.run([sys.executable, "-m", "pip", "uninstall", "--yes", "--quiet", "glow-my-spad"],
                       capture_output=True, text=True)
        record_property("npu_guide_s", round(time.perf_counter() - t0, 1))
    assert p.returncode == 0, f"npu.md failed:\n{p.stdout[-5000:]}\n{p.stderr[-5000:]}"
    out = p.stdout
    assert "scratchpad overflow" in out and "token deadlock" in out
    assert "qconv+qadd" in out  # the residual adds fused
    assert (tmp_path / "npu-report.html").is_file()
    assert (tmp_path / "glow-my-spad" / "glow_my_spad" / "emitter.py").is_file()
