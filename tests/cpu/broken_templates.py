"""A cpu backend generating C from a temporary copy of backends/cpu/templates with one token changed, or with a
Python function of the backend replaced: for the tests that show the fuzzer and the sanitizers catch a broken
kernel. The repository's files are never touched; the backend is named by a module:attr spec importable through
the returned environment (child processes)."""
from __future__ import annotations

import os
import shutil
import textwrap

TEMPLATES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "backends", "cpu", "templates")


def broken_backend(tmp_path, template: str, old: str, new: str) -> tuple[str, dict]:
    """(module:attr spec, environment) of the cpu backend with ``old`` replaced by ``new`` in ``template``."""
    tdir = tmp_path / "templates"
    shutil.copytree(TEMPLATES, tdir)
    src = (tdir / template).read_text()
    assert src.count(old) == 1, f"{template}: {old!r} must occur once"
    (tdir / template).write_text(src.replace(old, new))
    (tmp_path / "broken_cpu.py").write_text(textwrap.dedent(f"""
        import glow_cpu.templates as templates
        from glow_cpu.backend import CPUBackend
        templates.FOLDER = {str(tdir)!r}
        templates._ENV = None

        class BrokenCPU(CPUBackend):
            name = "broken-cpu"
        """))
    path = str(tmp_path) + os.pathsep + os.environ.get("PYTHONPATH", "")
    return "broken_cpu:BrokenCPU", {"PYTHONPATH": path.rstrip(os.pathsep)}


def broken_python(tmp_path, patch: str) -> tuple[str, dict]:
    """(module:attr spec, environment) of the cpu backend after ``patch`` (Python source, run when the backend's
    module is imported: it replaces functions of glow_cpu's modules)."""
    (tmp_path / "broken_cpu_py.py").write_text(textwrap.dedent(patch) + textwrap.dedent("""
        from glow_cpu.backend import CPUBackend

        class BrokenCPU(CPUBackend):
            name = "broken-cpu"
        """))
    path = str(tmp_path) + os.pathsep + os.environ.get("PYTHONPATH", "")
    return "broken_cpu_py:BrokenCPU", {"PYTHONPATH": path.rstrip(os.pathsep)}
