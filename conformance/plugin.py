"""The pytest plugin: options, one pytest item per case, the isolated runner, the gate and the report.

Options are registered in one table (``OPTIONS``). Cases live in the ``tier_*.py`` modules of this package
(imported under the package's installed name only); every case runs in the child process of ``isolation``
under its time limits. The gate: a case is claimed unless the backend's ``is_op_supported`` refused it; a
claimed case passes or fails (a refusal after the claim fails, see ``harness.refusal``); ``--require-profile``
fails the run unless every case of that profile ran and passed; a run in which no case checking answers passed
(every one skipped: a backend refusing everything) fails; a filtered run judges no profile. ``--sanitize [LIST]`` builds the cpu backend's C with
sanitizers (default ``address,undefined``), re-executing pytest with the ASan runtime preloaded; a case during
which a sanitizer reported fails with the report, and a report no case can be blamed for fails the run.
"""
from __future__ import annotations

import fnmatch
import importlib
import os
import shlex

import pytest

from .cases import PROFILES, CaseFailure, Context

HERE = os.path.dirname(os.path.abspath(__file__))
TIERS = ("primitives", "ops", "models", "passes", "memory", "negative", "partition", "device")
PROP = "glow_case"
DEFAULT_SEED = 0

#: Every option of the suite: (flag, keyword arguments of parser.addoption). The one place to add one.
OPTIONS = [
    ("--backend", dict(dest="glow_backend", default=None, metavar="NAME",
                       help="backend under test: an installed backend name (glowc backends) or module:attr")),
    ("--case", dict(dest="glow_cases", action="append", default=[], metavar="PATTERN",
                    help="run only cases whose id matches this fnmatch pattern (repeatable); a filtered run "
                         "gives no profile verdicts")),
    ("--require-profile", dict(dest="glow_require", action="append", default=[], metavar="NAME",
                               help="fail the run unless every case of profile NAME ran and passed (repeatable; "
                                    f"profiles: {', '.join(PROFILES)})")),
    ("--conformance-seed", dict(dest="glow_seed", type=int, default=DEFAULT_SEED, metavar="N",
                                help=f"session seed mixed into every case's inputs (default {DEFAULT_SEED}); "
                                     "recorded in the report and in every rerun command")),
    ("--case-timeout", dict(dest="glow_timeout", type=float, default=60.0, metavar="SECONDS",
                            help="time limit for running a case's compiled code (default 60); compiling and "
                                 "checking get ten times as much, at least 600 s. A case over its limit, or "
                                 "whose process dies, fails and the run goes on")),
    ("--coverage", dict(dest="glow_coverage", action="store_true", default=False,
                        help="build the backend's generated C with gcov and report, per template, the lines "
                             "the run executed and every line it did not (needs a backend whose package holds "
                             "its C templates as *.j2 files and compiles with $CC: the cpu backend)")),
    ("--no-group-compile", dict(dest="glow_group", action="store_false", default=True,
                                help="compile every primitive case alone (by default, for backends other than the "
                                     "reference interpreter, the cases of one primitive and dtype are first tried "
                                     "compiled together; a case failing there is always re-run, and judged, "
                                     "alone)")),
    ("--conformance-report", dict(dest="glow_report", default=None, metavar="PATH",
                                  help="write an HTML report to PATH and its data to PATH with suffix .json")),
    ("--export-golden", dict(dest="glow_golden", default=None, metavar="DIR",
                             help="also write each case's compiled artifact (the backend's emit_bundle), inputs, "
                                  "expected outputs and checks into DIR, with a C runner that replays them on a "
                                  "device (glow_conformance.golden; compile groups off)")),
    ("--sanitize", dict(dest="glow_sanitize", nargs="?", const="address,undefined", default=None, metavar="LIST",
                        help="build the cpu backend's generated C with these sanitizers (default "
                             "address,undefined) and fail every case during which one reports")),
]

#: Every collected case by id (the isolated child inherits it when it is forked).
CASES: dict = {}


def pytest_addoption(parser):
    g = parser.getgroup("glow-conformance", "Glow Kit conformance suite")
    for flag, kw in OPTIONS:
        g.addoption(flag, **kw)


def load_backend(spec: str):
    """The Backend instance for ``spec`` (entry-point name or module:attr); pytest.UsageError if unknown."""
    from glow_core.errors import GlowError
    from glow_core.discovery import get_backend
    try:
        return get_backend(spec)
    except GlowError as e:
        raise pytest.UsageError(f"--backend {spec}: {e}") from None


def filters(config) -> list[str]:
    """What narrows this run to part of the suite (empty for a full run)."""
    out = [f"--case {p}" for p in config.getoption("glow_cases")]
    if getattr(config.option, "keyword", ""):
        out.append(f"-k {config.option.keyword}")
    if getattr(config.option, "markexpr", ""):
        out.append(f"-m {config.option.markexpr}")
    out += [f"--deselect {d}" for d in (getattr(config.option, "deselect", None) or [])]
    out += [a for a in config.args if "::" in a or a.endswith(".py")]
    if getattr(config.option, "maxfail", 0):
        out.append(f"--maxfail {config.option.maxfail}")
    if getattr(config.option, "lf", False) or getattr(config.option, "failedfirst", False):
        out.append("--lf/--ff")
    return out


def _configure(config):
    spec = config.getoption("glow_backend")
    config._glow = None
    if spec is None:
        if config.getoption("help", False):
            return
        raise pytest.UsageError("the conformance suite needs --backend NAME; installed backends: "
                                + ", ".join(_installed()) + " (or --backend module:Class)")
    unknown = [p for p in config.getoption("glow_require") if p not in PROFILES]
    if unknown:
        raise pytest.UsageError(f"--require-profile {unknown[0]}: unknown profile; profiles: {', '.join(PROFILES)}")
    if config.getoption("glow_timeout") <= 0:
        raise pytest.UsageError("--case-timeout must be a positive number of seconds")
    backend = load_backend(spec)
    if config.getoption("glow_coverage"):
        from .coverage import instrumented
        backend = instrumented(backend, config)
    from .harness import is_reference, record_answers
    seed = config.getoption("glow_seed")

    def rerun(case_id):
        return (f"glowc conformance --backend {shlex.quote(spec)} --conformance-seed {seed} "
                f"--case {shlex.quote(case_id)}")
    ref = is_reference(backend)
    golden = config.getoption("glow_golden")
    ctx = Context(backend, ref, rerun, group_compile=config.getoption("glow_group") and not ref and not golden,
                  seed=seed)
    record_answers(backend, ctx.answers)
    config._glow = ctx
    config._glow_known = list(backend.known_failures())
    config._glow_runner = None


def _selected(config, case_id):
    pats = config.getoption("glow_cases")
    return not pats or any(fnmatch.fnmatchcase(case_id, p) for p in pats)


def pytest_collect_file(file_path, parent):
    if file_path.suffix == ".py" and file_path.name.startswith("tier_") and \
            os.path.dirname(os.path.abspath(str(file_path))) == HERE:
        return TierFile.from_parent(parent, path=file_path)
    return None


def tier_cases(tier: str, ctx) -> list:
    """Every case of ``tier`` (``tier_<name>.cases()``, given the context when it takes one)."""
    import inspect
    module = importlib.import_module(f"glow_conformance.tier_{tier}")
    return module.cases(ctx) if inspect.signature(module.cases).parameters else module.cases()


class TierFile(pytest.File):
    def collect(self):
        ctx = self.config._glow
        if ctx is None:
            raise pytest.UsageError("the conformance suite needs --backend NAME (installed: "
                                    + ", ".join(_installed()) + ")")
        tier = self.path.stem[len("tier_"):]
        pats = self.config.getoption("glow_cases")
        if pats and not any("/" not in p or fnmatch.fnmatchcase(tier, p.split("/")[0]) for p in pats):
            return
        seen = set()
        for case in tier_cases(tier, ctx):
            if case.id in seen:  # pytest would keep one of the two and run it twice: the other never runs
                raise pytest.UsageError(f"conformance: two cases of tier {tier} share the id {case.id}; each "
                                        f"case line needs its own variant")
            seen.add(case.id)
            if not _selected(self.config, case.id):
                continue
            if self.config.getoption("glow_golden"):
                from .golden import wrap
                case = wrap(case, os.path.abspath(self.config.getoption("glow_golden")))
            CASES[case.id] = case
            item = CaseItem.from_parent(self, name=case.id, case=case)
            if ctx.group_compile and case.info.get("group") is not None:  # a group compiles once, on one worker
                item.add_marker(pytest.mark.xdist_group("-".join(map(str, case.info["group"]))))
            for pat, reason in self.config._glow_known:
                if fnmatch.fnmatchcase(case.id, pat):
                    item.add_marker(pytest.mark.xfail(strict=True, reason=f"known failure ({pat}): {reason}"))
                    break
            yield item


def _sanitize_log_dir():
    return os.environ.get("GLOW_SANITIZE_LOG_DIR") if os.environ.get("GLOW_CPU_SANITIZE") else None


def sanitizer_reports(pids=None) -> dict[str, str]:
    """Sanitizer report files in the --sanitize log folder (of the processes ``pids``; None: of every process):
    name -> text. The sanitizers name each file after the process that wrote it (``log_path.<pid>``)."""
    d = _sanitize_log_dir()
    if not d or not os.path.isdir(d):
        return {}
    out = {}
    for name in sorted(os.listdir(d)):
        if pids is None or name.rpartition(".")[2] in pids:
            with open(os.path.join(d, name), errors="replace") as f:
                out[name] = f.read()
    return out


def _pids(runner) -> set[str]:
    """This process and every child the isolated runner forked (a case's reports come from one of them)."""
    return {str(os.getpid())} | ({str(p) for p in runner.children} if runner is not None else set())


def _start_sanitizers(config):
    """--sanitize: select the sanitizers, and re-execute pytest with the ASan runtime preloaded if needed."""
    spec = config.getoption("glow_sanitize")
    if not spec or hasattr(config, "workerinput"):
        return
    import tempfile

    from glow_cpu.build import sanitize
    from glow_core.errors import GlowError
    try:
        names = sanitize.requested({"sanitize": spec})
        log_dir = os.environ.get(sanitize.LOG_DIR_ENV) or tempfile.mkdtemp(prefix="glow-sanitize-")
        if "address" in names and not sanitize.runtime_loaded():
            capture = config.pluginmanager.getplugin("capturemanager")
            if capture is not None:
                capture.stop_global_capturing()
        sanitize.reexec(names, log_dir)
    except GlowError as e:
        raise pytest.UsageError(f"--sanitize {spec}: {e}") from None


def _installed():
    from glow_core.discovery import available_backends
    return sorted(available_backends())


def _runner(config):
    """The isolated runner of this process (None where processes cannot be forked: cases then run here)."""
    if config._glow_runner is None and hasattr(os, "fork"):
        from .isolation import Runner
        t = config.getoption("glow_timeout")
        config._glow_runner = Runner(CASES, config._glow, run_limit=t, compile_limit=max(600.0, 10 * t))
    return config._glow_runner


class CaseItem(pytest.Item):
    def __init__(self, *, case, **kw):
        super().__init__(**kw)
        self.case = case
        self.user_properties.append((PROP, {"id": case.id, "tier": case.tier, "subject": case.subject,
                                            "dtype": case.dtype, "profiles": list(case.profiles),
                                            "threads": case.info.get("threads", 1)}))

    def runtest(self):
        ctx = self.config._glow
        runner = _runner(self.config)
        seen = sanitizer_reports(_pids(runner))
        try:
            if runner is not None:
                outcome, text = runner.run(self.case)
            else:
                from .isolation import outcome_of
                ctx.answers.clear()
                outcome, text = outcome_of(self.case, ctx)
        finally:
            new = sanitizer_reports(_pids(runner))
            report = "".join(new[k][len(seen.get(k, "")):] for k in new)
            if report.strip():
                raise CaseFailure(f"{self.case.id}: sanitizer report(s) while running this case:\n{report[-6000:]}"
                                  f"\n  rerun: {ctx.rerun(self.case.id)} --sanitize")
        if outcome.startswith("skip:"):
            pytest.skip(f"{outcome[5:]}: {text}")
        if outcome == "fail":
            raise CaseFailure(text)
        if outcome == "error":
            raise CaseCrash(text)

    def repr_failure(self, excinfo, style=None):
        if isinstance(excinfo.value, (CaseFailure, CaseCrash)):
            text = str(excinfo.value)
            if isinstance(excinfo.value, CaseCrash):
                text = f"the case crashed: {text}"
            if "rerun: " not in text:
                text += f"\n  rerun: {self.config._glow.rerun(self.case.id)}"
            return f"{self.case.id}: {text}"
        return f"{self.case.id}: {excinfo.value!r}\n  rerun: {self.config._glow.rerun(self.case.id)}"

    def reportinfo(self):
        return self.path, None, self.case.id


class CaseCrash(Exception):
    """The case raised an unexpected exception, or the process running it died or hung."""


# -- results, the gate and the report (on the controller when running under xdist) --------------------------
class Results:
    """Collects one record per case from the test reports (xdist forwards workers' reports to the controller,
    with the case's user_properties), sets the exit status of required profiles, and writes the summary and
    the report at the end."""

    def __init__(self, config):
        self.config = config
        self.records = []
        self.data = None

    def pytest_runtest_logreport(self, report):
        props = dict(report.user_properties or [])
        if PROP not in props:
            # xdist reports a case whose worker died without its properties: the case id is the node id's last
            # part, and it spells tier/subject/dtype
            case_id = report.nodeid.rpartition("::")[2].partition("@")[0]
            parts = case_id.split("/")
            if "tier_" not in report.nodeid or len(parts) < 4 or parts[0] not in TIERS:
                return
            props[PROP] = {"id": case_id, "tier": parts[0], "subject": parts[1], "dtype": parts[2], "profiles": [],
                           "threads": 1}
        crashed = report.when not in ("setup", "call", "teardown")  # xdist: the worker died running it
        if not (report.when == "call" or crashed or (report.when == "setup" and report.outcome != "passed")
                or (report.when == "teardown" and report.outcome == "failed")):
            return
        if hasattr(report, "wasxfail"):
            outcome = "xfail" if report.skipped else "xpass"
        elif report.failed and str(report.longrepr).startswith("[XPASS(strict)]"):
            outcome = "xpass"  # a known failure that passed: strict, so it fails the run
        else:
            outcome = {"passed": "pass", "failed": "fail", "skipped": "skip"}[report.outcome]
        if report.when == "teardown":
            self.records = [r for r in self.records if r["id"] != props[PROP]["id"]]
        detail, kind = "", None
        if outcome in ("fail", "xpass"):
            detail = report.longreprtext or "unexpectedly passed (strict xfail)"
            if crashed:
                detail = f"{props[PROP]['id']}: the process running the case died: {detail}"
            if outcome == "xpass":
                detail = f"{props[PROP]['id']}: listed in the backend's known_failures() but passed: {detail}"
        elif outcome == "skip":
            lr = report.longrepr
            detail = lr[2] if isinstance(lr, tuple) else str(lr)
            detail = detail[len("Skipped: "):] if detail.startswith("Skipped: ") else detail
            kind = detail.split(":", 1)[0] if ":" in detail else "other"
        elif outcome == "xfail":
            detail = report.wasxfail
        self.records.append(dict(props[PROP], outcome=outcome, detail=detail, skip=kind,
                                 duration=round(report.duration, 4)))

    def _summarize(self):
        from .report import run_info, summarize
        config = self.config
        filt = filters(config)
        info = run_info(config._glow.backend, config.getoption("glow_backend"), config.getoption("glow_seed"),
                        filt, config.getoption("glow_timeout"))
        expected = None
        if config.getoption("glow_require") and not filt:
            expected = {c.id: c.profiles for t in TIERS for c in tier_cases(t, config._glow)}
        data = summarize(self.records, info, filtered=bool(filt), expected=expected)
        data["required"] = {}
        for p in config.getoption("glow_require"):
            v = data["profiles"].get(p)
            if filt:
                data["required"][p] = ("fail", f"not judged: the run was filtered ({'; '.join(filt)})")
            elif v is None or v["verdict"] != "pass":
                why = "no case of it ran" if v is None else v["why"]
                data["required"][p] = ("fail", why)
            else:
                data["required"][p] = ("pass", f"all {v['total']} cases passed")
        return data

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session):
        self.data = self._summarize()
        if self.config.getoption("glow_coverage"):
            from .coverage import collect
            self.data["coverage"] = collect(self.config)
        if (any(v[0] != "pass" for v in self.data["required"].values()) or self.data["nothing_verified"]) \
                and session.exitstatus == 0:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter):
        from .report import summary_lines, write_report
        data = self.data or self._summarize()
        tr = terminalreporter
        tr.section("glow conformance")
        for line in summary_lines(data):
            tr.write_line(line)
        path = self.config.getoption("glow_report")
        if self.config.getoption("glow_sanitize"):
            reports = sanitizer_reports()
            n = sum(t.count("ERROR: AddressSanitizer") + t.count("runtime error:") for t in reports.values())
            tr.write_line(f"sanitizers {os.environ.get('GLOW_CPU_SANITIZE')}: {n} report(s)"
                          + (f" in {_sanitize_log_dir()}" if reports else ""))
        if path:
            html_path, json_path = write_report(data, path)
            tr.write_line(f"report: {html_path} (data: {json_path})")


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    _start_sanitizers(config)
    _configure(config)
    if getattr(config, "_glow", None) is not None and config._glow.group_compile and \
            getattr(config.option, "dist", "no") == "load":
        config.option.dist = "loadgroup"  # keep each compile group on one worker
    if getattr(config, "_glow", None) is not None and not hasattr(config, "workerinput"):
        config.pluginmanager.register(Results(config), "glow-conformance-results")
        if config.getoption("glow_golden"):
            from .golden import Exporter
            config.pluginmanager.register(Exporter(config, os.path.abspath(config.getoption("glow_golden"))),
                                          "glow-conformance-golden")


def pytest_sessionfinish(session, exitstatus):
    """Stop the isolated child; --sanitize: a report that no case was failed for (e.g. at collection) still
    fails the run."""
    config = session.config
    runner = getattr(config, "_glow_runner", None)
    if runner is not None:
        runner.stop()
    if not config.getoption("glow_sanitize", None) or hasattr(config, "workerinput") or exitstatus:
        return
    if any(t.strip() for t in sanitizer_reports().values()):
        session.exitstatus = 1
