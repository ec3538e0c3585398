"""gcov coverage of the CPU backend's templates over the conformance suite: per template, lines reached /
reachable, and every unreached line grouped with its reason.

    python bench/bench_coverage.py --run [-n 2] [--out DIR]          # run the whole suite with --coverage
    python bench/bench_coverage.py REPORT.json [REPORT2.json ...]    # analyse (the union of) earlier runs

``--run`` runs ``pytest conformance --backend=cpu --coverage`` (``nice -n 19``, an empty compile cache: every
kernel is compiled instrumented) and prints its wall time. The analysis reads the ``coverage`` section of the
reports (``conformance/coverage.py``: per template, the lines executed, generated but never executed, never
generated); several reports are united (a line is reached when any run executed it).

*Reachable* lines: the lines gcov counts in some build (executable) plus the lines no run generated that hold a
statement (a ``;`` or a control keyword, not a comment), less the lines dead on this host: inside a ``#if`` on instruction-set
macros that the compiler, with the backend's flags (``-march=native``), evaluates false. Each unreached line
gets one reason, in this order: dead for this ISA (the macro test); a reason of ``REASONS`` (template, pattern
over the enclosing template condition or the line, why); never generated (the enclosing ``{% if %}`` no case
rendered); generated but never executed (the run-time C condition above it no case took).
"""
from __future__ import annotations

import argparse
import fnmatch
import json
import os
import re
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from conformance.coverage import _split_lead, c_lines  # noqa: E402

TEMPLATES = os.path.join(ROOT, "backends", "cpu", "templates")

#: (template glob, regex over "jinja condition | C line", reason): the unreached lines no case can reach, or that
#: only another configuration reaches. One line per known reason.
REASONS = [
    ("bundle*.j2", r".", "bundles only (glowc bundle: a standalone C program, not run by the conformance suite)"),
    ("module.c.j2", r".", "bundles only (program.source: the one translation unit of glowc bundle)"),
    ("qcommon.h.j2", r"after if lanes == 16", "another target: the int8 engine renders 8-lane (AVX2) code only for "
     "hosts without AVX-512 or an explicit --cpu (int8_common's target); this host renders 16 lanes"),
    ("*", r"sanitize|GLOW_SANITIZE", "sanitizer builds only (GLOW_CPU_SANITIZE; bench/ and CI's sanitizer step)"),
    ("*", r"timed|clock_gettime|trace", "timed runs only (glowc run --trace: the per-kernel timing walker)"),
    ("gemm.c.j2", r"if \(K <= 0\)|Cm\[i \* ldc \+ j\] = v", "unreachable: codegen.matmul_plan takes the GEMM only for "
     "m * n * k >= 32768 and conv's K = C * kh * kw >= 1, so K is never 0 (a defensive guard)"),
    ("conv_macros.c.j2", r"if \(blk < \{\{ p\.c \}\}\) memcpy", "unreachable by construction: this branch "
     "copies one lane per block (icb == 1, mult == 1), so the copy has exactly C blocks and blk < C always "
     "(a defensive zero fill)"),
    ("conv_macros.c.j2", r"if s == \"residual\"", "another configuration: codegen's conv engine epilogue "
     "(codegen._engine_epilogue) holds one activation (relu, clip, sigmoid, silu); a residual step is rendered only "
     "for direct callers of conv_engine.plan_conv (tests/cpu/test_conv_engine.py, bench/bench_conv.py)"),
    ("*", r"fprintf\(stderr|abort\(\)|return -\d", "error exits (a failing allocation or a bad run-time index: "
     "the negative tier checks those that can happen; the rest guard what the memory plan rules out)"),
]

_JINJA = re.compile(r"\{%-?\s*(if|elif|else|endif|for|endfor|macro|endmacro)\b(.*?)-?%\}")
_CPP = re.compile(r"^\s*#\s*(if|ifdef|ifndef|elif|else|endif)\b(.*)$")
_CTRL = re.compile(r"^\s*(\}\s*)?(if|else if|for|while|switch|case|do)\b")
_COMMENT = re.compile(r"^\s*(/\*|\*|//|\{#)")
_STMT = re.compile(r";|^\s*(if|for|while|switch|case|return|break|continue|goto)\b")
ISA = re.compile(r"__(AVX\w*|SSE\w*|FMA\w*|F16C|ARM\w*|aarch64|x86_64|AMX\w*|VNNI\w*|BMI\w*|GNUC)__"
                 r"|GLOW_Q_PORTABLE")


def host_macros(cc=("cc",)) -> set[str]:
    """The macros the backend's compiler defines with its flags (``-march=native``) on this host."""
    out = subprocess.run(list(cc) + ["-march=native", "-dM", "-E", "-"], input="", capture_output=True, text=True)
    return {m.group(1) for m in re.finditer(r"#define (\w+)", out.stdout)}


def _cpp_value(cond: str, kind: str, macros: set[str]):
    """True/False for a preprocessor condition on ISA macros only; None when it tests anything else."""
    if kind in ("ifdef", "ifndef"):
        name = cond.strip()
        if not ISA.fullmatch(name):
            return None
        return (name in macros) == (kind == "ifdef")
    names = set(re.findall(r"\b[A-Za-z_]\w*\b", cond)) - {"defined"}
    if not names or not all(ISA.fullmatch(n) for n in names):
        return None
    expr = re.sub(r"defined\s*\(?\s*(\w+)\s*\)?", lambda m: str(m.group(1) in macros), cond)
    expr = expr.replace("&&", " and ").replace("||", " or ").replace("!", " not ")
    try:
        return bool(eval(expr, {"__builtins__": {}}, {}))  # noqa: S307 (True/False/and/or/not only)
    except Exception:  # noqa: BLE001
        return None


def contexts(text: str, macros: set[str]):
    """line -> (innermost jinja condition, the ``#if`` false on this host around it or "", nearest C control
    line above)."""
    out, jstack, cstack, last_ctrl = {}, [], [], ""
    for n, line in enumerate(text.split("\n"), 1):
        lead, _ = _split_lead(line)
        tags = list(_JINJA.finditer(line))
        lead_tags = [t for t in tags if t.end() <= len(lead)]

        def apply(t):
            kind, cond = t.group(1), t.group(2).strip()
            if kind in ("if", "for", "macro"):
                jstack.append(f"{kind} {cond}")
            elif kind in ("elif", "else") and jstack:
                jstack[-1] = f"{kind} {cond}".strip() + f" (after {jstack[-1]})"
            elif kind.startswith("end") and jstack:
                jstack.pop()
        for t in lead_tags:
            apply(t)
        m = _CPP.match(_JINJA.sub("", line))
        if m:
            kind, cond = m.group(1), m.group(2).strip()
            if kind in ("if", "ifdef", "ifndef"):
                cstack.append((_cpp_value(cond, kind, macros), f"#{kind} {cond}"))
            elif kind == "elif" and cstack:
                v, was = cstack[-1]
                cstack[-1] = (None if v is None else (not v and bool(_cpp_value(cond, "if", macros))),
                              f"#elif {cond} (after {was})")
            elif kind == "else" and cstack:
                v, was = cstack[-1]
                cstack[-1] = (None if v is None else not v, f"#else (after {was})")
            elif kind == "endif" and cstack:
                cstack.pop()
        dead = next((c for v, c in reversed(cstack) if v is False), "")
        conds = [j for j in jstack if not j.startswith("macro")]
        out[n] = (conds[-1] if conds else "", dead, last_ctrl)
        for t in tags[len(lead_tags):]:
            apply(t)
        if _CTRL.match(_JINJA.sub("", line)):
            last_ctrl = _JINJA.sub("", line).strip()
    return out


def _reason(name, kind, cond, ctrl, text):
    for glob, pattern, why in REASONS:
        if fnmatch.fnmatch(name, glob) and re.search(pattern, f"{cond} | {ctrl} | {text}"):
            return why
    if kind == "never generated":
        return f"never generated: no case rendered {{% {cond} %}}" if cond else "never generated"
    return f"generated, never executed: no case took `{ctrl}`" if ctrl else "generated, never executed"


def _ranges(ns):
    out, start = [], None
    for i, n in enumerate(ns):
        start = n if start is None else start
        if i + 1 == len(ns) or ns[i + 1] != n + 1:
            out.append(str(start) if start == n else f"{start}-{n}")
            start = None
    return ",".join(out)


def analyse(reports: list[dict], macros: set[str]) -> dict:
    """Per template: reached, reachable, dead for this ISA, and the unreached lines grouped by reason."""
    names = sorted({t for r in reports for t in r["templates"]})
    result = {}
    for name in names:
        path = os.path.join(TEMPLATES, name)
        with open(path) as f:
            text = f.read()
        lines = c_lines(text)
        ctx = contexts(text, macros)
        executable, executed, never = set(), set(), set(lines)
        for r in reports:
            t = r["templates"].get(name)
            if t:
                executed |= set(t["executed"])
                executable |= set(t["executed"]) | set(t["never_executed"])
                never &= set(t["never_generated"])
        ungenerated = {n for n in never - executable if _STMT.search(_JINJA.sub("", lines[n]))
                       and not _COMMENT.match(_JINJA.sub("", lines[n]))}
        dead = {n for n in executable | ungenerated if ctx[n][1]} - executed
        reachable = (executable | ungenerated) - dead
        groups, prev = {}, (None, None, None)
        for n in sorted(reachable - executed):
            kind = "never generated" if n in ungenerated else "never executed"
            cond, _, ctrl = ctx[n]
            if kind == prev[1] == "never executed" and n - prev[0] <= 2:
                why = prev[2]  # one run-time branch: the condition above its first line
            else:
                why = _reason(name, kind, cond, ctrl, lines[n].strip())
            groups.setdefault(why, []).append(n)
            prev = (n, kind, why)
        for n in sorted(dead):
            groups.setdefault(f"dead on this host (not counted as reachable): `{ctx[n][1]}` is false with "
                              f"-march=native here (another ISA or the portable build)", []).append(n)
        result[name] = {"reached": len(executed & reachable), "reachable": len(reachable), "dead_isa": sorted(dead),
                        "unreached": {why: ns for why, ns in groups.items()},
                        "text": {str(n): lines[n].strip() for ns in groups.values() for n in ns}}
    return result


def print_table(res: dict):
    tot_r = sum(t["reached"] for t in res.values())
    tot_n = sum(t["reachable"] for t in res.values())
    print(f"{'template':26s} {'reached':>8s} / {'reachable':<9s}     %   dead for this ISA")
    for name, t in res.items():
        pct = 100.0 * t["reached"] / t["reachable"] if t["reachable"] else 100.0
        print(f"{name:26s} {t['reached']:8d} / {t['reachable']:<9d} {pct:5.1f}   {len(t['dead_isa']) or '-'}")
    print(f"{'all templates':26s} {tot_r:8d} / {tot_n:<9d} {100.0 * tot_r / max(tot_n, 1):5.1f}")
    print("\nunreached lines, grouped by reason:")
    for name, t in res.items():
        for why, ns in t["unreached"].items():
            first = t["text"][str(ns[0])][:70]
            print(f"  {name}:{_ranges(ns)} ({len(ns)}): {why}\n      e.g. {first}")


def run_suite(workers: int, out_dir: str) -> tuple[str, float]:
    report = os.path.join(out_dir, "coverage_report.html")
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", GLOW_CACHE_DIR=tempfile.mkdtemp(prefix="glow_cov_cache_"))
    t0 = time.perf_counter()
    subprocess.run(["nice", "-n", "19", sys.executable, "-m", "pytest", "conformance", "--backend=cpu", "--coverage",
                    "-n", str(workers), "-q", "-p", "no:randomly", "--conformance-report", report], cwd=ROOT, env=env)
    return os.path.join(out_dir, "coverage_report.json"), time.perf_counter() - t0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("reports", nargs="*", help="conformance report JSON files of --coverage runs (united)")
    ap.add_argument("--run", action="store_true", help="run the whole suite on the cpu backend with --coverage")
    ap.add_argument("-n", type=int, default=2, help="pytest-xdist workers for --run (default 2)")
    ap.add_argument("--out", default="coverage_out", help="directory of --run's report (default coverage_out)")
    ap.add_argument("--json", default=None, help="write the analysis here")
    args = ap.parse_args(argv)
    paths = list(args.reports)
    if args.run:
        os.makedirs(args.out, exist_ok=True)
        path, wall = run_suite(args.n, args.out)
        print(f"whole suite with --coverage: wall {wall:.0f} s (-n {args.n}, nice 19, load {os.getloadavg()[0]:.1f})")
        paths.append(path)
    if not paths:
        ap.error("give report JSON files or --run")
    reports = []
    for p in paths:
        with open(p) as f:
            cov = json.load(f).get("coverage")
        if not cov:
            ap.error(f"{p} has no coverage section (run the suite with --coverage)")
        reports.append(cov)
    from glow_cpu.build.toolchain import find_compiler
    res = analyse(reports, host_macros(find_compiler()))
    print_table(res)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
