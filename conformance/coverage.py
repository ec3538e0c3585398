"""``--coverage``: the backend's generated C built with gcov, and the lines of each template the run executed.

How: the backend's package (any package holding its C templates as ``*.j2`` files and compiling with ``$CC``:
the cpu backend) is copied into a work directory, and in the copy every template line that emits C is
preceded by a ``#line N "template"`` directive, so that gcov counts each generated line against the template
line it came from (lines whose text comes from Python, not a template, are counted against
``(python-generated)``). The copy is imported under a name of its own and replaces the backend under test.
``$CC`` points at a wrapper that keeps every compiled source, with its gcov notes, in a directory of its own
and compiles it at -O0 with ``--coverage``; ``$GLOW_CACHE_DIR`` points at an empty cache, so that every kernel
the run needs is compiled here. The processes running the cases exit through libc, so that the counters
reach the ``.gcda`` files. At the end, gcov reads every kept build; each template line that emits C is then
*executed*, *generated but never executed* (its code was compiled into some library, no case ran it), or
*never generated* (no case rendered that branch of the template); lines gcov does not count (declarations,
braces) are *not executable*.
"""
from __future__ import annotations

import importlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

ENV = "GLOW_CONFORMANCE_COVERAGE"
GENERATED = "(python-generated)"
_TAG = re.compile(r"\{%-?.*?-?%\}|\{#.*?#\}")
_EXPR_ONLY = re.compile(r"^\s*\{\{.*\}\}\s*$")


def _split_lead(line: str):
    """(leading jinja statement/comment tags, the rest) of one template line."""
    pos = 0
    while True:
        m = re.match(r"\s*", line[pos:])
        nxt = pos + m.end()
        t = _TAG.match(line, nxt)
        if not t:
            return line[:pos], line[pos:]
        pos = t.end()


def c_lines(text: str) -> dict[int, str]:
    """Line number -> text of every template line that emits C (not only jinja tags or whitespace)."""
    out, open_tag = {}, False
    for n, line in enumerate(text.split("\n"), 1):
        starts_open = open_tag
        opens = line.count("{%") + line.count("{{") + line.count("{#")
        closes = line.count("%}") + line.count("}}") + line.count("#}")
        open_tag = open_tag or opens > closes
        if open_tag and closes > opens:
            open_tag = False
        if starts_open:
            continue
        rest = _TAG.sub("", line)
        if rest.strip() and not _EXPR_ONLY.match(line):
            out[n] = line
    return out


def instrument(text: str, name: str) -> str:
    """``text`` with a ``#line N "name"`` directive before every line that emits C (after its leading tags),
    and a ``(python-generated)`` one before every line that only expands an expression."""
    lines, c = text.split("\n"), c_lines(text)
    out = []
    for n, line in enumerate(lines, 1):  # each directive on a line of its own: a macro's output may follow text
        if n in c:
            lead, rest = _split_lead(line)
            out.append(f'{lead}\n#line {n} "{name}"\n{rest}')
        elif _EXPR_ONLY.match(line):
            out.append(f'\n#line 1 "{GENERATED}"\n{line}')
        else:
            out.append(line)
    return "\n".join(out)


WRAPPER = '''#!{python}
"""The C compiler for a --coverage run: keeps each source with its gcov notes, compiles it -O0 --coverage."""
import glob, hashlib, os, shutil, subprocess, sys
REAL, KEEP = {real!r}, {keep!r}
args = sys.argv[1:]
srcs = [i for i, a in enumerate(args) if a.endswith(".c") and os.path.isfile(a)]
extra = []
for i in srcs:
    with open(args[i], "rb") as f:
        text = f.read()
    # a directory per compiling process: two workers compiling the same source at once would otherwise share
    # one .gcno (gcc removes it when it starts) and one .gcda (a stamp mismatch discards the other's counters)
    d = os.path.join(KEEP, hashlib.sha256(text).hexdigest()[:24] + "-" + str(os.getpid()))
    os.makedirs(d, exist_ok=True)
    inc = [args[j + 1] for j, a in enumerate(args[:-1]) if a == "-I"] + [os.path.dirname(args[i])]
    for folder in inc:
        for h in glob.glob(os.path.join(folder, "*.h")):
            shutil.copyfile(h, os.path.join(d, os.path.basename(h)))
    with open(os.path.join(d, "src.c"), "wb") as f:
        f.write(text)
    args[i] = os.path.join(d, "src.c")
    extra = ["-dumpdir", d + "/"]
args = ["-O0" if a in ("-O1", "-O2", "-O3", "-Ofast") else a for a in args]
sys.exit(subprocess.call(REAL + args + (["--coverage"] + extra if srcs else [])))
'''


def _setup(work: str, package_dir: str, copy_name: str):
    """Copy and instrument the package, write the compiler wrapper (once per run, on the controller)."""
    dst = os.path.join(work, "pkg", copy_name)
    shutil.copytree(package_dir, dst, ignore=shutil.ignore_patterns("__pycache__"))
    for root, _, files in os.walk(dst):
        for f in files:
            if f.endswith(".j2"):
                p = os.path.join(root, f)
                with open(p) as fh:
                    text = fh.read()
                with open(p, "w") as fh:
                    fh.write(instrument(text, f))
    from glow_cpu.build.toolchain import find_compiler
    os.makedirs(os.path.join(work, "builds"), exist_ok=True)
    os.makedirs(os.path.join(work, "cache"), exist_ok=True)
    wrapper = os.path.join(work, "cc")
    with open(wrapper, "w") as f:
        f.write(WRAPPER.format(python=sys.executable, real=find_compiler(), keep=os.path.join(work, "builds")))
    os.chmod(wrapper, 0o755)


def instrumented(backend, config):
    """The backend under test, rebuilt from an instrumented copy of its package (see the module doc)."""
    import pytest
    cls = type(backend)
    top = cls.__module__.split(".")[0]
    package_dir = os.path.dirname(os.path.abspath(sys.modules[top].__file__))
    templates = [f for _, _, fs in os.walk(package_dir) for f in fs if f.endswith(".j2")]
    if not templates:
        raise pytest.UsageError(f"--coverage: backend '{backend.name}' ({cls.__module__}) has no *.j2 C templates "
                                f"in its package {package_dir}; coverage is measured for template-generating "
                                f"backends (the cpu backend)")
    work = os.environ.get(ENV)
    copy_name = f"{top}_coverage"
    if not work:  # the controller (or the only process): set up, and tell the workers where
        work = tempfile.mkdtemp(prefix="glow_coverage_")
        _setup(work, package_dir, copy_name)
        os.environ[ENV] = work
        os.environ["CC"] = os.path.join(work, "cc")
        os.environ["GLOW_CACHE_DIR"] = os.path.join(work, "cache")
    config._glow_coverage = {"work": work, "package": package_dir, "templates": sorted(set(templates))}
    if os.path.join(work, "pkg") not in sys.path:
        sys.path.insert(0, os.path.join(work, "pkg"))
    mod = importlib.import_module(copy_name + cls.__module__[len(top):])
    return getattr(mod, cls.__name__)()


def _gcov(d: str):
    """[(file name, line, count)] of one kept build (empty when it never ran: no .gcda)."""
    if not os.path.exists(os.path.join(d, "src.gcda")):
        return d, []
    r = subprocess.run(["gcov", "--json-format", "--stdout", "-o", d, "src.c"], cwd=d, capture_output=True,
                       text=True)
    out = []
    for line in r.stdout.splitlines():
        if line.strip().startswith("{"):
            for f in json.loads(line).get("files", []):
                out += [(os.path.basename(f["file"]), ln["line_number"], ln["count"]) for ln in f["lines"]]
    return d, out


def _generated(d: str) -> set:
    """(template, line) of every line some #line directive of the kept source (or its headers) attributes to a
    template."""
    seen = set()
    for name in ["src.c"] + [f for f in os.listdir(d) if f.endswith(".h")]:
        cur, num = None, 0
        with open(os.path.join(d, name)) as f:
            for line in f:
                m = re.match(r'#line (\d+) "([^"]+)"', line)
                if m:
                    num, cur = int(m.group(1)), os.path.basename(m.group(2))
                    continue
                if cur is not None:
                    seen.add((cur, num))
                    num += 1
    return seen


def collect(config) -> dict:
    """Per template: executable, executed, never-executed and never-generated lines (see the module doc)."""
    info = getattr(config, "_glow_coverage", None)
    if info is None:
        return {}
    builds = os.path.join(info["work"], "builds")
    dirs = [os.path.join(builds, d) for d in sorted(os.listdir(builds))]
    counts, generated = {}, set()
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        for d, rows in pool.map(_gcov, dirs):
            generated |= _generated(d)
            for f, ln, c in rows:
                counts[(f, ln)] = counts.get((f, ln), 0) + c
    templates = {}
    for root, _, files in os.walk(info["package"]):
        for f in files:
            if f.endswith(".j2"):
                with open(os.path.join(root, f)) as fh:
                    text = fh.read()
                lines = c_lines(text)
                executable = sorted(n for n in lines if (f, n) in counts)
                executed = [n for n in executable if counts[(f, n)] > 0]
                never_run = [n for n in executable if counts[(f, n)] == 0]
                never_generated = sorted(n for n in lines if (f, n) not in generated)
                templates[f] = {"c_lines": len(lines), "executable": len(executable), "executed": executed,
                                "never_executed": never_run, "never_generated": never_generated,
                                "text": {str(n): lines[n].strip() for n in never_run + never_generated}}
    ran = sum(1 for d in dirs if os.path.exists(os.path.join(d, "src.gcda")))
    return {"work": info["work"], "builds": len(dirs), "builds_run": ran, "templates": templates}


def summary_lines(cov: dict) -> list[str]:
    out = [f"coverage of the backend's templates ({cov['builds']} C builds kept in {cov['work']}, {cov['builds_run']} "
           f"ran): executed / executable lines, then lines never executed and never generated"]
    for name, t in sorted(cov["templates"].items()):
        pct = 100.0 * len(t["executed"]) / t["executable"] if t["executable"] else 0.0
        out.append(f"  {name:24s} {len(t['executed']):4d} / {t['executable']:4d} ({pct:5.1f}%)  never executed: "
                   f"{_ranges(t['never_executed']) or '-'}; never generated: {_ranges(t['never_generated']) or '-'}")
    return out


def _ranges(ns):
    out, start = [], None
    for i, n in enumerate(ns):
        if start is None:
            start = n
        if i + 1 == len(ns) or ns[i + 1] != n + 1:
            out.append(str(start) if start == n else f"{start}-{n}")
            start = None
    return ",".join(out)


def render_html(cov: dict) -> str:
    import html
    e = html.escape
    rows = []
    for name, t in sorted(cov["templates"].items()):
        pct = 100.0 * len(t["executed"]) / t["executable"] if t["executable"] else 0.0
        missing = "".join(f"<li>{e(name)}:{n} ({kind}) <code>{e(t['text'][str(n)])}</code></li>"
                          for kind, ns in (("never executed", t["never_executed"]),
                                           ("never generated", t["never_generated"])) for n in ns)
        rows.append(f"<tr data-template='{e(name)}'><td class='row'>{e(name)}</td><td>{len(t['executed'])}</td>"
                    f"<td>{t['executable']}</td><td>{pct:.1f}%</td><td class='row'><ul>{missing}</ul></td></tr>")
    return ("<h2>Coverage of the backend's templates</h2><table id='coverage'><tr><th class='row'>template</th>"
            "<th>executed</th><th>executable</th><th>%</th><th class='row'>lines not reached</th></tr>"
            + "".join(rows) + "</table>")
