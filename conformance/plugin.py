"""The pytest plugin: options, one pytest item per case, skips/xfails from the backend, and the report.

Options: ``--sanitize [LIST]`` (build the cpu backend's C with sanitizers, default ``address,undefined``,
re-executing pytest with the ASan runtime preloaded; a case during which a sanitizer reported fails with the
report, and a report no case can be blamed for fails the run), ``--backend NAME`` (an entry point of
``glow_core.backends``, or ``module:attr`` naming a Backend subclass, instance or factory, for in-process test
backends), ``--case PATTERN`` (fnmatch over case ids,
repeatable: run only those), ``--conformance-report PATH`` (HTML at PATH and JSON next to it). Cases live in
the ``tier_*.py`` modules of this package; they are imported under the package's installed name only.
"""
from __future__ import annotations

import fnmatch
import importlib
import os
import shlex

import pytest

from .cases import CaseFailure, Context, Unsupported

HERE = os.path.dirname(os.path.abspath(__file__))
TIERS = ("primitives", "ops", "models", "passes", "memory", "negative", "partition")
PROP = "glow_case"


def pytest_addoption(parser):
    g = parser.getgroup("glow-conformance", "Glow Kit conformance suite")
    g.addoption("--backend", dest="glow_backend", default=None, metavar="NAME",
                help="backend under test: an installed backend name (glowc backends) or module:attr")
    g.addoption("--case", dest="glow_cases", action="append", default=[], metavar="PATTERN",
                help="run only cases whose id matches this fnmatch pattern (repeatable)")
    g.addoption("--no-group-compile", dest="glow_group", action="store_false", default=True,
                help="compile every primitive case alone (by default, for backends other than the reference "
                     "interpreter, the cases of one primitive and dtype are first tried compiled together; a "
                     "case failing there is always re-run, and judged, alone)")
    g.addoption("--conformance-report", dest="glow_report", default=None, metavar="PATH",
                help="write an HTML report to PATH and its data to PATH with suffix .json")
    g.addoption("--sanitize", dest="glow_sanitize", nargs="?", const="address,undefined", default=None,
                metavar="LIST", help="build the cpu backend's generated C with these sanitizers (default "
                "address,undefined) and fail every case during which one reports")


def load_backend(spec: str):
    """The Backend instance for ``spec`` (entry-point name or module:attr); pytest.UsageError if unknown."""
    from glow_core.errors import GlowError
    from glow_core.discovery import get_backend
    try:
        return get_backend(spec)
    except GlowError as e:
        raise pytest.UsageError(f"--backend {spec}: {e}") from None


def _configure(config):
    spec = config.getoption("glow_backend")
    config._glow = None
    if spec is None:
        if config.getoption("help", False):
            return
        raise pytest.UsageError("the conformance suite needs --backend NAME; installed backends: "
                                + ", ".join(_installed()) + " (or --backend module:Class)")
    backend = load_backend(spec)
    from .harness import is_reference
    name = spec

    def rerun(case_id):
        return f"glowc conformance --backend {shlex.quote(name)} --case {shlex.quote(case_id)}"
    ref = is_reference(backend)
    config._glow = Context(backend, ref, rerun, group_compile=config.getoption("glow_group") and not ref)
    config._glow_known = list(backend.known_failures())


def _selected(config, case_id):
    pats = config.getoption("glow_cases")
    return not pats or any(fnmatch.fnmatchcase(case_id, p) for p in pats)


def pytest_collect_file(file_path, parent):
    if file_path.suffix == ".py" and file_path.name.startswith("tier_") and \
            os.path.dirname(os.path.abspath(str(file_path))) == HERE:
        return TierFile.from_parent(parent, path=file_path)
    return None


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
        module = importlib.import_module(f"glow_conformance.tier_{tier}")
        import inspect
        for case in (module.cases(ctx) if inspect.signature(module.cases).parameters else module.cases()):
            if not _selected(self.config, case.id):
                continue
            item = CaseItem.from_parent(self, name=case.id, case=case)
            if ctx.group_compile and tier == "primitives":  # a group compiles once, on one xdist worker
                item.add_marker(pytest.mark.xdist_group(f"{case.subject}-{case.dtype}"))
            for pat, reason in self.config._glow_known:
                if fnmatch.fnmatchcase(case.id, pat):
                    item.add_marker(pytest.mark.xfail(strict=True, reason=f"known failure ({pat}): {reason}"))
                    break
            yield item


def _sanitize_log_dir():
    return os.environ.get("GLOW_SANITIZE_LOG_DIR") if os.environ.get("GLOW_CPU_SANITIZE") else None


def sanitizer_reports(all_processes=False) -> dict[str, str]:
    """Sanitizer report files (of this process, or of all) in the --sanitize log folder: name -> text."""
    d = _sanitize_log_dir()
    if not d or not os.path.isdir(d):
        return {}
    out = {}
    for name in sorted(os.listdir(d)):
        if all_processes or name.rpartition(".")[2] == str(os.getpid()):
            with open(os.path.join(d, name), errors="replace") as f:
                out[name] = f.read()
    return out


def _start_sanitizers(config):
    """--sanitize: select the sanitizers, and re-execute pytest with the ASan runtime preloaded if needed."""
    spec = config.getoption("glow_sanitize")
    if not spec or hasattr(config, "workerinput"):
        return
    import tempfile

    from glow_cpu import sanitize
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


class CaseItem(pytest.Item):
    def __init__(self, *, case, **kw):
        super().__init__(**kw)
        self.case = case
        self.user_properties.append((PROP, {"id": case.id, "tier": case.tier, "subject": case.subject,
                                            "dtype": case.dtype, "profiles": list(case.profiles)}))

    def runtest(self):
        seen = sanitizer_reports()
        try:
            self.case.run(self.config._glow)
        except Unsupported as e:
            pytest.skip(f"unsupported: {e}")
        finally:
            new = sanitizer_reports()
            text = "".join(new[k][len(seen.get(k, "")):] for k in new)
            if text.strip():
                raise CaseFailure(f"{self.case.id}: sanitizer report(s) while running this case:\n{text[-6000:]}"
                                  f"\n  rerun: {self.config._glow.rerun(self.case.id)} --sanitize")

    def repr_failure(self, excinfo, style=None):
        if isinstance(excinfo.value, CaseFailure):
            return f"{self.case.id}: {excinfo.value}"
        import traceback
        frames = [f for f in traceback.extract_tb(excinfo.tb)
                  if "/_pytest/" not in f.filename and "/pluggy/" not in f.filename]
        tb = "".join(traceback.format_list(frames[-12:]))
        return (f"{self.case.id}: the case crashed: {type(excinfo.value).__name__}: {excinfo.value}\n"
                f"  rerun: {self.config._glow.rerun(self.case.id)}\n{tb}")

    def reportinfo(self):
        return self.path, None, self.case.id


# -- results and report (on the controller when running under xdist) ---------------------------------------
class Results:
    """Collects one record per case from the test reports (xdist forwards workers' reports to the controller,
    with the case's user_properties) and writes the summary and report at the end."""

    def __init__(self, config):
        self.config = config
        self.records = []

    def pytest_runtest_logreport(self, report):
        props = dict(report.user_properties or [])
        if PROP not in props:
            # xdist reports a case whose worker died (a crash in native code) without its properties: the
            # case id is the node id's last part, and it spells tier/subject/dtype
            case_id = report.nodeid.rpartition("::")[2].partition("@")[0]
            parts = case_id.split("/")
            if "tier_" not in report.nodeid or len(parts) < 4 or parts[0] not in TIERS:
                return
            props[PROP] = {"id": case_id, "tier": parts[0], "subject": parts[1], "dtype": parts[2], "profiles": []}
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
        detail = ""
        if outcome in ("fail", "xpass"):
            detail = report.longreprtext or "unexpectedly passed (strict xfail)"
            if crashed:
                detail = (f"{props[PROP]['id']}: the process running the case crashed (a native crash in the "
                          f"backend?): {detail}")
            if outcome == "xpass":
                detail = f"{props[PROP]['id']}: listed in the backend's known_failures() but passed: {detail}"
        elif outcome == "skip":
            lr = report.longrepr
            detail = lr[2] if isinstance(lr, tuple) else str(lr)
        elif outcome == "xfail":
            detail = report.wasxfail
        self.records.append(dict(props[PROP], outcome=outcome, detail=detail, duration=round(report.duration, 4)))

    def pytest_terminal_summary(self, terminalreporter):
        from .report import summarize, write_report
        config = self.config
        data = summarize(self.records, config._glow.backend.name, config.getoption("glow_backend"))
        tr = terminalreporter
        tr.section("glow conformance")
        c = data["counts"]
        label = data["backend"] + ("" if data["backend_spec"] == data["backend"] else f" ({data['backend_spec']})")
        tr.write_line(f"backend {label}: {c['total']} cases: {c['pass']} passed, {c['fail']} failed, "
                      f"{c['skip']} skipped (unsupported), {c['xfail']} known failures, {c['xpass']} unexpectedly "
                      f"passing")
        for p, v in data["profiles"].items():
            tr.write_line(f"  profile {p:16s} {v['verdict']:8s} ({v['pass']}/{v['total']} pass, {v['fail']} fail, "
                          f"{v['skip']} skip, {v['xfail']} xfail)")
        reports = sanitizer_reports(all_processes=True)
        if config.getoption("glow_sanitize"):
            n = sum(t.count("ERROR: AddressSanitizer") + t.count("runtime error:") for t in reports.values())
            tr.write_line(f"sanitizers {os.environ.get('GLOW_CPU_SANITIZE')}: {n} report(s)"
                          + (f" in {_sanitize_log_dir()}" if reports else ""))
        path = config.getoption("glow_report")
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


def pytest_sessionfinish(session, exitstatus):
    """--sanitize: a report that no case was failed for (e.g. at collection) still fails the run."""
    config = session.config
    if not config.getoption("glow_sanitize", None) or hasattr(config, "workerinput") or exitstatus:
        return
    if any(t.strip() for t in sanitizer_reports(all_processes=True).values()):
        session.exitstatus = 1
