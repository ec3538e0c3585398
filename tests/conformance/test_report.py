"""The conformance report: a small run (with -n 2, so results are gathered on the xdist controller) whose
HTML page is parsed back; every case must appear once with the outcome pytest gave it."""
from __future__ import annotations

import json
from html.parser import HTMLParser

import numpy as np

from glow_core.ops.registry import get_primitive
from glow_interpreter.backend import InterpreterBackend, InterpreterFunction


class ReportBackend(InterpreterBackend):
    """add is broken (a + b + 1), float16 add is declined, float32 add is a declared known failure."""

    def is_op_supported(self, node_info):
        if node_info.op == "add" and node_info.in_dtypes[:1] == ("float16",):
            return False
        return super().is_op_supported(node_info)

    def known_failures(self):
        return [("primitives/add/float32/*", "add is off by one (demo)")]

    def compile(self, function, options):
        real = get_primitive("add").kernel
        return InterpreterFunction(function, kernels={
            "add": lambda a, b: (real(a, b) + np.ones((), a.dtype)).astype(a.dtype)})


class Cases(HTMLParser):
    def __init__(self):
        super().__init__()
        self.rows, self.external = {}, []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "tr" and a.get("class") == "case":
            assert a["data-id"] not in self.rows, f"case {a['data-id']} listed twice"
            self.rows[a["data-id"]] = a["data-outcome"]
        if tag in ("script", "link", "img") or (tag == "style" and a.get("src")):
            self.external.append(tag)


def expected_outcome(case_id):
    prim, dt, variant = case_id.split("/")[1:4]
    if prim != "add":
        return "pass"
    if dt == "float16":
        return "skip"
    empty = variant == "0"  # nothing to compare: the broken add passes it
    if dt == "float32":
        return "xpass" if empty else "xfail"  # strict: a known failure that passes is reported
    return "pass" if empty else "fail"


def test_report_lists_every_case_with_its_outcome(tmp_path):
    import glow_conformance
    report = tmp_path / "sub" / "report.html"
    rc = glow_conformance.main(["--backend", "tests.conformance.test_report:ReportBackend", "-n", "2", "-q",
                                "--case", "primitives/add/*", "--case", "primitives/sub/int8/*",
                                "--conformance-report", str(report)])
    assert rc == 1  # the int/bfloat16/float64 add cases fail
    page = report.read_text()
    parser = Cases()
    parser.feed(page)
    assert not parser.external and "http" not in page.lower().replace("http-equiv", "")
    data = json.loads((tmp_path / "sub" / "report.json").read_text())
    ids = [c["id"] for c in data["cases"]]
    assert len(ids) == len(set(ids)) == len(parser.rows) > 50
    assert parser.rows == {c["id"]: c["outcome"] for c in data["cases"]}
    for case_id, outcome in parser.rows.items():
        assert outcome == expected_outcome(case_id), case_id
    c = data["counts"]
    assert c["fail"] and c["xfail"] and c["xpass"] and c["skip"] and c["pass"] and c["total"] == len(ids)
    assert c["claimed"] == c["total"] - c["skip"] and data["skips"] == {"refused": c["skip"]}
    assert data["profiles"] == {} and data["filtered"]  # a filtered run judges no profile
    assert data["filter"] == ["--case primitives/add/*", "--case primitives/sub/int8/*"] and data["seed"] == 0
    fails = [x for x in data["cases"] if x["outcome"] == "fail"]
    assert all("primitive add" in x["detail"] and "--conformance-seed 0 --case" in x["detail"] for x in fails)
    assert "primitives/add/int32/17" in page and "elements differ" in page
    by_dtype = {}
    for x in data["cases"]:
        by_dtype[x["dtype"]] = by_dtype.get(x["dtype"], 0) + 1
    assert data["dtypes"] == by_dtype and data["tiers"] == {"primitives": len(ids)}
    assert data["tier_dtypes"] == {"primitives": by_dtype} and data["dtypes"]["int8"] > by_dtype["float32"]
    assert sum(data["profile_cases"].values()) == sum(len(x["profiles"]) for x in data["cases"])
    assert "<table id='tier-dtypes'>" in page and f"<td>{by_dtype['int8']}</td>" in page


class CrashingBackend(InterpreterBackend):
    """Dies (as a native crash would) when asked to compile a function using 'sub'."""

    def compile(self, function, options):
        import os
        if any(i.op == "sub" for i in function.code):
            os._exit(139)
        return InterpreterFunction(function)


def test_a_case_that_kills_its_worker_is_reported_as_failed(tmp_path):
    import glow_conformance
    report = tmp_path / "r.html"
    rc = glow_conformance.main(["--backend", "tests.conformance.test_report:CrashingBackend", "-n", "2", "-q",
                                "--case", "primitives/sub/int8/17", "--case", "primitives/add/int8/17",
                                "--conformance-report", str(report)])
    data = json.loads((tmp_path / "r.json").read_text())
    got = {c["id"]: (c["outcome"], c["detail"]) for c in data["cases"]}
    assert rc == 1 and got["primitives/add/int8/17"][0] == "pass"
    assert got["primitives/sub/int8/17"][0] == "fail" and "crashed" in got["primitives/sub/int8/17"][1]
    assert "data-id='primitives/sub/int8/17' data-outcome='fail'" in report.read_text()


def test_profile_verdicts():
    """pass: every case passed; partial: some skipped, known failures or did not run; fail: a failure, an
    unexpected pass, or no passing case at all."""
    from glow_conformance.report import summarize

    def rec(i, outcome, profile="fp16"):
        return {"id": f"primitives/x/float16/{i}", "tier": "primitives", "subject": "x", "dtype": "float16",
                "profiles": [profile], "outcome": outcome, "detail": "", "skip": "refused" if outcome == "skip"
                else None}
    v = lambda recs, **kw: summarize(recs, {}, **kw)["profiles"]["fp16"]["verdict"]  # noqa: E731
    assert v([rec(0, "pass"), rec(1, "pass")]) == "pass"
    assert v([rec(0, "pass"), rec(1, "skip")]) == "partial"
    assert v([rec(0, "pass"), rec(1, "xfail")]) == "partial"
    assert v([rec(0, "skip"), rec(1, "skip")]) == "fail"
    assert v([rec(0, "pass"), rec(1, "fail")]) == "fail"
    assert v([rec(0, "pass"), rec(1, "xpass")]) == "fail"
    assert v([rec(0, "pass")], expected={"primitives/x/float16/0": ["fp16"], "y": ["fp16"]}) == "partial"
    assert summarize([rec(0, "pass")], {}, filtered=True)["profiles"] == {}
