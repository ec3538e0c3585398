"""The pytest plugin: options, one pytest item per case, the isolated runner, the gate and the report.

Options are registered in one table (``OPTIONS``). Cases live in the ``tier_*.py`` modules of this package
(imported under the package's installed name only) and in vendor case modules (``tier_vendor``: the entry-point
group ``glow_conformance.cases``); every case runs in the child process of ``isolation`` under its time limits
and ends in one stage (``cases.STAGES``). The gate (fail-closed): a case is claimed unless the backend's
``is_op_supported`` refused it; a claimed case passes or fails at whatever stage it stops (a refusal after the
claim fails, see ``harness.refusal``); refusing an op of ``--require-ops FILE`` or of the backend's
``claimed_ops()`` fails; the backend's ``unsupported_cases()`` are skipped unrun, its ``known_failures()`` are
strict xfails; ``--flow NAME`` runs the cases of the named flows (``flows.py``), which the backend must claim;
``--require-profile`` fails the run unless every case of that profile ran and passed; a run in which no case
checking answers passed (every one skipped: a backend refusing everything) fails; a filtered run judges no
profile. ``--sanitize [LIST]`` and ``--coverage`` call the backend's hooks (``Backend.enable_sanitizers``,
``coverage_build``/``coverage_report``): a case during which a sanitizer reported fails with the report, and a
report no case can be blamed for fails the run.
"""
from __future__ import annotations

import fnmatch
import importlib
import os
import shlex
import sys

import pytest

from .cases import PROFILES, STAGES, CaseFailure, Context
from .flows import FLOWS, flows_of

HERE = os.path.dirname(os.path.abspath(__file__))
TIERS = ("primitives", "ops", "models", "passes", "memory", "negative", "partition", "device", "vendor")
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
                        help="build the backend's generated code with these sanitizers (Backend.enable_sanitizers; "
                             "default address,undefined) and fail every case during which one reports")),
    ("--flow", dict(dest="glow_flows", action="append", default=[], metavar="NAME",
                    help=f"run the cases of this flow (repeatable; flows: {', '.join(FLOWS)}); the backend must "
                         "claim it (Backend.conformance_flows). Without --flow every case runs")),
    ("--require-ops", dict(dest="glow_require_ops", default=None, metavar="FILE",
                           help="ops (one primitive or kept-whole op name per line, # comments) the backend must "
                                "run itself: a case in which is_op_supported refuses one fails instead of being "
                                "skipped (as for the backend's claimed_ops())")),
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


def read_ops(path: str) -> frozenset:
    """The op names of a --require-ops file (one per line; blank lines and # comments ignored)."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError as e:
        raise pytest.UsageError(f"--require-ops {path}: {e.strerror}") from None
    from glow_core.ops.registry import OPS, PRIMITIVES
    names = [ln.split("#", 1)[0].strip() for ln in lines]
    names = [n for n in names if n]
    unknown = [n for n in names if n not in PRIMITIVES and n not in OPS]
    if unknown:
        raise pytest.UsageError(f"--require-ops {path}: {unknown[0]!r} is no primitive or kept-whole op (names as "
                                f"in vendor_guide/primitives.md, e.g. conv, matmul, Softmax)")
    return frozenset(names)


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
    from .flows import check
    try:
        flows = check(config.getoption("glow_flows"), backend)
    except ValueError as e:
        raise pytest.UsageError(str(e)) from None
    if flows and flows[0].startswith("error: "):
        raise pytest.UsageError(flows[0][len("error: "):])
    required = read_ops(config.getoption("glow_require_ops")) if config.getoption("glow_require_ops") else frozenset()
    required |= frozenset(backend.claimed_ops())
    config._glow_tested = backend  # the backend as loaded (its hooks answer for the coverage build too)
    if config.getoption("glow_coverage"):
        backend = _coverage_backend(backend, config)
    from . import paths
    from .harness import is_reference, record_answers
    CASES.clear()
    use_backend_sizes(backend)
    seed = config.getoption("glow_seed")

    def rerun(case_id):
        return (f"glowc conformance --backend {shlex.quote(spec)} --conformance-seed {seed} "
                f"--case {shlex.quote(case_id)}")
    ref = is_reference(backend)
    golden = config.getoption("glow_golden")
    ctx = Context(backend, ref, rerun, group_compile=config.getoption("glow_group") and not ref and not golden,
                  seed=seed, flush=bool(backend.flushes_subnormals()), required_ops=required)
    record_answers(backend, ctx.answers)
    config._glow = ctx
    config._glow_known = list(backend.known_failures())
    config._glow_unsupported = list(backend.unsupported_cases())
    config._glow_flows = flows
    from .flows import claimed_flows
    config._glow_claimed_flows = claimed_flows(backend)
    config._glow_runner = None


#: The case modules whose tables depend on ``paths`` (each records ``PATHS_SIGNATURE``).
SIZED = ("quantized_cases", "tier_primitives", "tier_ops", "tier_models")


def use_backend_sizes(backend):
    """Take ``backend``'s interesting shapes (``paths.use``) and remake the case tables made with other sizes in
    this process (another backend's, or none). Code that adds a line to a table at run time calls it first, so the
    run that follows keeps the line."""
    from . import paths
    paths.use(backend)
    sig = paths.signature()
    if any(getattr(sys.modules.get(f"glow_conformance.{m}"), "PATHS_SIGNATURE", sig) != sig for m in SIZED):
        _reload_tiers()


def _reload_tiers():
    """Re-import the case modules whose tables depend on ``paths`` (in dependency order), forgetting the compile
    groups of the cases made before."""
    from . import onnx_cases, primitive_cases
    primitive_cases.GROUPS.clear()
    onnx_cases.GROUPS.clear()
    lines = getattr(sys.modules.get("glow_conformance.tier_primitives"), "LINES", None)
    for name in ("quantized_cases", "tier_primitives", "tier_ops", "tier_models", "tier_memory", "tier_negative"):
        mod = sys.modules.get(f"glow_conformance.{name}")
        if mod is not None:
            importlib.reload(mod)
    if lines is not None:  # lines added at run time (a new primitive's, adding_a_primitive.md) stay
        sys.modules["glow_conformance.tier_primitives"].LINES[:] = lines


def _coverage_backend(backend, config):
    """--coverage: the backend's coverage build (``Backend.coverage_build``), its data in one work directory
    shared by the controller and the workers."""
    import tempfile

    from glow_core.errors import GlowError
    work = os.environ.get(COVERAGE_ENV)
    if not work:
        work = tempfile.mkdtemp(prefix="glow_coverage_")
        os.environ[COVERAGE_ENV] = work
    try:
        built = backend.coverage_build(work)
    except GlowError as e:
        raise pytest.UsageError(f"--coverage: {e}") from None
    config._glow_coverage = work
    return built


COVERAGE_ENV = "GLOW_CONFORMANCE_COVERAGE"


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
        if tier != "vendor" and pats and not any("/" not in p or fnmatch.fnmatchcase(tier, p.split("/")[0])
                                                 for p in pats):
            return
        wanted = self.config._glow_flows
        seen = set()
        for case in tier_cases(tier, ctx):
            if case.id in seen or case.id in CASES:  # pytest would keep one of the two and run it twice
                raise pytest.UsageError(f"conformance: two cases share the id {case.id} (tier {tier}); each case "
                                        f"line needs its own variant")
            seen.add(case.id)
            if not _selected(self.config, case.id):
                continue
            flows = flows_of(case)
            if wanted and not set(flows) & set(wanted):
                continue
            if self.config.getoption("glow_golden"):
                from .golden import wrap
                case = wrap(case, os.path.abspath(self.config.getoption("glow_golden")))
            CASES[case.id] = case
            item = CaseItem.from_parent(self, name=case.id, case=case, flows=flows)
            if ctx.group_compile and case.info.get("group") is not None:  # a group compiles once, on one worker
                item.add_marker(pytest.mark.xdist_group("-".join(map(str, case.info["group"]))))
            self._mark(item, case, flows)
            yield item

    def _mark(self, item, case, flows):
        """Skips the case needs before running (declared unsupported, a flow not claimed or not available) and
        its known failure (a strict xfail)."""
        known = next(((p, r) for p, r in self.config._glow_known if fnmatch.fnmatchcase(case.id, p)), None)
        unsupported = next(((p, r) for p, r in self.config._glow_unsupported if fnmatch.fnmatchcase(case.id, p)),
                           None)
        if known and unsupported:
            raise pytest.UsageError(f"conformance: case {case.id} matches both a known failure ({known[0]}) and an "
                                    f"unsupported case ({unsupported[0]}) of the backend: it is one or the other")
        claimed = self.config._glow_claimed_flows
        if unsupported:
            item.skip_before(f"unsupported: declared permanently unsupported by the backend ({unsupported[0]}): "
                             f"{unsupported[1]}", "partition")
        elif flows and not set(flows) & set(claimed):
            item.skip_before(f"flow: the backend does not claim flow {', '.join(flows)} (conformance_flows(): "
                             f"{', '.join(claimed) or 'none'})", "partition")
        elif flows and all(FLOWS[f].unavailable() for f in flows):
            item.skip_before(f"flow-unavailable: {FLOWS[flows[0]].unavailable()}", "quantize")
        elif known:
            item.add_marker(pytest.mark.xfail(strict=True, reason=f"known failure ({known[0]}): {known[1]}"))


def _sanitize_log_dir():
    return os.environ.get(SANITIZE_LOG_ENV) if os.environ.get(SANITIZE_ENV) else None


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
    """--sanitize: the backend's sanitizer builds (``Backend.enable_sanitizers``), reports into one folder shared
    by every process of the run (the backend may re-execute this process to load a sanitizer runtime)."""
    spec = config.getoption("glow_sanitize")
    if not spec:
        return
    import tempfile

    from glow_core.errors import GlowError
    names = tuple(sorted({n.strip() for n in spec.split(",") if n.strip()}))
    log_dir = os.environ.get(SANITIZE_LOG_ENV)
    if not log_dir:
        log_dir = tempfile.mkdtemp(prefix="glow-sanitize-")
        os.environ[SANITIZE_LOG_ENV] = log_dir
    os.environ[SANITIZE_ENV] = ",".join(names)
    backend = load_backend(config.getoption("glow_backend"))
    capture = config.pluginmanager.getplugin("capturemanager")
    if capture is not None:  # the backend may re-execute the process: it must inherit the real streams
        capture.stop_global_capturing()
    try:
        backend.enable_sanitizers(names, log_dir)
    except GlowError as e:
        raise pytest.UsageError(f"--sanitize {spec}: {e}") from None
    finally:
        if capture is not None:
            capture.start_global_capturing()


SANITIZE_ENV, SANITIZE_LOG_ENV = "GLOW_CONFORMANCE_SANITIZE", "GLOW_CONFORMANCE_SANITIZE_LOG"


def _installed():
    from glow_core.discovery import available_backends
    return sorted(available_backends())


def _runner(config):
    """The isolated runner of this process (None where processes cannot be forked: cases then run here)."""
    if config._glow_runner is None and hasattr(os, "fork"):
        from .isolation import Runner
        t = config.getoption("glow_timeout")
        config._glow_runner = Runner(CASES, config._glow, run_limit=t, compile_limit=max(600.0, 10 * t),
                                     slow_exit=bool(config.getoption("glow_coverage")))
    return config._glow_runner


class CaseItem(pytest.Item):
    def __init__(self, *, case, flows=(), **kw):
        super().__init__(**kw)
        self.case = case
        self.skip_reason = None
        self.user_properties.append((PROP, {"id": case.id, "tier": case.tier, "subject": case.subject,
                                            "dtype": case.dtype, "profiles": list(case.profiles),
                                            "flows": list(flows), "threads": case.info.get("threads", 1)}))

    def skip_before(self, reason: str, stage: str):
        """Skip this case without running it (``reason`` starts with its skip kind), ending at ``stage``."""
        self.skip_reason = reason
        self.user_properties.append(("stage", stage))

    def runtest(self):
        if self.skip_reason is not None:
            pytest.skip(self.skip_reason)
        ctx = self.config._glow
        runner = _runner(self.config)
        seen = sanitizer_reports(_pids(runner))
        try:
            if runner is not None:
                outcome, text, stage, stats = runner.run(self.case)
            else:
                from .isolation import outcome_of
                ctx.answers.clear()
                outcome, text, stage, stats = outcome_of(self.case, ctx)
        finally:
            new = sanitizer_reports(_pids(runner))
            report = "".join(new[k][len(seen.get(k, "")):] for k in new)
            if report.strip():
                self.user_properties.append(("stage", "run"))
                raise CaseFailure(f"{self.case.id}: sanitizer report(s) while running this case:\n{report[-6000:]}"
                                  f"\n  rerun: {ctx.rerun(self.case.id)} --sanitize")
        self.user_properties.append(("stage", stage))
        self.user_properties.append(("stats", stats))
        if outcome.startswith("skip:"):
            pytest.skip(f"{outcome[5:]}: {text}")
        if outcome == "fail":
            raise CaseFailure(f"[stage {stage}] {text}")
        if outcome == "error":
            raise CaseCrash(f"[stage {stage}] {text}")

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
            if "tier_" not in report.nodeid or len(parts) < 4:
                return
            case = CASES.get(case_id)
            props[PROP] = {"id": case_id, "tier": parts[0], "subject": parts[1], "dtype": parts[2],
                           "profiles": list(case.profiles) if case else [],
                           "flows": list(flows_of(case)) if case else [], "threads": 1}
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
        stage = props.get("stage")
        if stage is None:
            stage = "crash" if outcome in ("fail", "xpass") and report.when != "call" or crashed else (
                "pass" if outcome in ("pass", "xpass") else "partition" if outcome == "skip" else "mismatch")
        if outcome in ("pass", "xpass"):
            stage = "pass"
        self.records.append(dict(props[PROP], outcome=outcome, stage=stage, detail=detail, skip=kind,
                                 stats=props.get("stats") or [], duration=round(report.duration, 4)))

    def _summarize(self):
        from .report import run_info, summarize
        config = self.config
        filt = filters(config)
        info = run_info(config._glow.backend, config.getoption("glow_backend"), config.getoption("glow_seed"),
                        filt, config.getoption("glow_timeout"))
        expected = None
        flows = config._glow_flows
        info["flows_requested"] = list(flows) or ["all"]
        if config.getoption("glow_require") and not filt:
            expected = {c.id: c.profiles for t in TIERS for c in tier_cases(t, config._glow)
                        if not flows or set(flows_of(c)) & set(flows)}
        data = summarize(self.records, info, filtered=bool(filt), expected=expected,
                         flows=list(flows) or list(FLOWS))
        data["required"] = {}
        for p in config.getoption("glow_require"):
            v = data["profiles"].get(p)
            if flows:  # a --flow run: the profile over each flow's cases, the worst verdict
                per = [data["flows"][f]["profiles"][p] for f in flows if p in data["flows"][f]["profiles"]]
                v = max(per, key=lambda x: {"pass": 0, "partial": 1, "fail": 2}[x["verdict"]]) if per else None
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
            self.data["coverage"] = self.config._glow_tested.coverage_report(self.config._glow_coverage)
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
            reports = {k: t for k, t in sanitizer_reports().items() if t.strip()}
            tr.write_line(f"sanitizers {os.environ.get(SANITIZE_ENV)}: {len(reports)} report file(s)"
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
