"""The conformance report: the summary lines, one JSON document and a self-contained HTML page with its data.

The HTML page has no external scripts, fonts or styles: the run (backend and suite versions, seed, filter,
flows, threads, time limits), the counts (claimed, passed, failed, skipped and why), the stage every case ended
at, the profile verdicts, a column per flow (its cases, and the verdict of each profile over them), a matrix per
tier (rows: primitive/op/model/pass, columns: dtypes; each cell coloured by its worst outcome and showing
passed/total), the compliance modes used and the plain bounds with their reasons, the failure details, the
coverage of the backend's templates when measured, and one table row per case with its stage and the error
statistics of its outputs (``<tr class="case" data-id=... data-outcome=... data-stage=...>``, which is what tools
should parse; the JSON has every compared output's statistics).
"""
from __future__ import annotations

import hashlib
import html
import json
import os
import platform
import time

from .cases import PROFILES, SKIP_KINDS, STAGES
from .flows import FLOWS

OUTCOMES = ("pass", "fail", "skip", "xfail", "xpass")
DTYPE_ORDER = {d: i for i, d in enumerate(("float32", "float16", "bfloat16", "float64", "int8", "uint8", "int16",
                                           "uint16", "int32", "uint32", "int64", "uint64", "bool"))}
SEVERITY = {"fail": 4, "xpass": 3, "xfail": 2, "skip": 1, "pass": 0}


def _dist_version(module_name: str) -> str:
    from importlib import metadata
    top = module_name.split(".")[0]
    for dist in metadata.packages_distributions().get(top, []):
        try:
            return f"{dist} {metadata.version(dist)}"
        except metadata.PackageNotFoundError:
            continue
    return "unknown"


def suite_version() -> str:
    """The installed distribution's version and a digest of the suite's own files (cases, oracles, checker)."""
    here = os.path.dirname(os.path.abspath(__file__))
    h = hashlib.sha256()
    for name in sorted(os.listdir(here)):
        if name.endswith(".py"):
            with open(os.path.join(here, name), "rb") as f:
                h.update(name.encode() + b"\0" + f.read())
    return f"{_dist_version('glow_conformance')} (suite files {h.hexdigest()[:12]})"


def run_info(backend, spec, seed, filt, timeout) -> dict:
    """What identifies a run: backend and its version, suite version, seed, filter, host, time limits."""
    cls = type(backend)
    version = getattr(backend, "version", None) or _dist_version(cls.__module__)
    return {"backend": backend.name, "backend_spec": spec or backend.name, "backend_class": f"{cls.__module__}."
            f"{cls.__qualname__}", "backend_version": str(version), "suite_version": suite_version(),
            "seed": seed, "filter": list(filt), "host": f"{platform.machine()}, {os.cpu_count()} cores, "
            f"Python {platform.python_version()}", "case_timeout": timeout,
            "generated": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}


def _verdict(c, total):
    if c["fail"] or c["xpass"]:
        return "fail", f"{c['fail']} failed" + (f", {c['xpass']} known failures passed" if c["xpass"] else "")
    if not c["pass"]:
        return "fail", f"no case of its {total} passed ({c['skip']} skipped, {c['xfail']} known failures)"
    if c["pass"] == total:
        return "pass", f"all {total} cases passed"
    return "partial", f"{c['pass']} of {total} passed ({c['skip']} skipped, {c['xfail']} known failures" + \
        (f", {c['missing']} did not run" if c.get("missing") else "") + ")"


def _profile_verdicts(recs, expected):
    ran = {r["id"] for r in recs}
    out = {}
    for p in PROFILES:
        rs = [r for r in recs if p in r["profiles"]]
        missing = sum(1 for cid, ps in (expected or {}).items() if p in ps and cid not in ran)
        if not rs and not missing:
            continue
        c = {o: sum(r["outcome"] == o for r in rs) for o in OUTCOMES}
        c["missing"] = missing
        verdict, why = _verdict(c, len(rs) + missing)
        out[p] = dict(c, total=len(rs) + missing, verdict=verdict, why=why)
    return out


def _flow_summary(recs, flows, filtered):
    """Per flow: its cases' counts and stages, and (full runs) the verdict of each profile over its cases."""
    out = {}
    for f in flows:
        rs = [r for r in recs if f in (r.get("flows") or [])]
        counts = {o: sum(r["outcome"] == o for r in rs) for o in OUTCOMES}
        counts["total"] = len(rs)
        stages = {st: sum(r.get("stage") == st for r in rs) for st in STAGES}
        unjudged = rs and all(r.get("skip") in ("flow", "flow-unavailable") for r in rs)
        own = FLOWS[f].profiles if f in FLOWS else PROFILES
        verdicts = {} if filtered or unjudged else _profile_verdicts(rs, None)
        out[f] = {"counts": counts, "stages": {k: v for k, v in stages.items() if v},
                  "profiles": {p: v for p, v in verdicts.items() if p in own},
                  "note": (rs[0]["detail"].split(": ", 1)[-1] if unjudged else "")}
    rs = [r for r in recs if not r.get("flows")]
    out["(no flow)"] = {"counts": dict({o: sum(r["outcome"] == o for r in rs) for o in OUTCOMES}, total=len(rs)),
                        "stages": {k: v for k, v in {st: sum(r.get("stage") == st for r in rs)
                                                     for st in STAGES}.items() if v},
                        "profiles": {} if filtered else _profile_verdicts(rs, None)}
    return out


def _modes(recs):
    """Compliance modes used, with their outputs compared, and the plain bounds (class -> why)."""
    modes, plain = {}, {}
    for r in recs:
        for st in r.get("stats") or []:
            modes[st["mode"]] = modes.get(st["mode"], 0) + 1
            if st.get("plain"):
                plain[st["class"]] = st["plain"]
    return dict(sorted(modes.items())), dict(sorted(plain.items()))


def summarize(records, info: dict, filtered: bool = False, expected: dict | None = None, flows=None) -> dict:
    """Counts, skip reasons, stages, per-profile verdicts (none for a filtered run), flows, matrix and case list.
    ``expected`` (case id -> profiles of the full suite) makes a profile whose cases did not all run partial."""
    recs = sorted(records, key=lambda r: r["id"])
    counts = {o: sum(r["outcome"] == o for r in recs) for o in OUTCOMES}
    counts["total"] = len(recs)
    skips = {}
    for r in recs:
        if r["outcome"] == "skip":
            skips[r.get("skip") or "other"] = skips.get(r.get("skip") or "other", 0) + 1
    counts["claimed"] = counts["total"] - skips.get("refused", 0)
    threads = {}
    for r in recs:
        threads[str(r.get("threads", 1))] = threads.get(str(r.get("threads", 1)), 0) + 1
    flow_run = bool(info.get("flows_requested")) and info.get("flows_requested") != ["all"]
    # a --flow run judges each profile per flow (over the flow's cases, all of which ran), not over the run
    profiles = {} if filtered or flow_run else _profile_verdicts(recs, expected)
    stages = {st: sum(r.get("stage") == st for r in recs) for st in STAGES}
    flow_data = _flow_summary(recs, flows or [], filtered)
    modes, plain = _modes(recs)
    matrix = {}
    for r in recs:
        cell = matrix.setdefault(r["tier"], {}).setdefault(r["subject"], {}).setdefault(
            r["dtype"], {o: 0 for o in OUTCOMES})
        cell[r["outcome"]] += 1
    checking = [r for r in recs if r["tier"] != "negative"]  # the cases that check answers, not refusals
    nothing = None
    if checking and not any(r["outcome"] in ("pass", "xfail") for r in checking):
        nothing = (f"no case that checks answers passed ({len(checking)} of them: "
                   + ", ".join(f"{sum(r['outcome'] == o for r in checking)} {o}" for o in OUTCOMES
                               if any(r["outcome"] == o for r in checking)) + "): the run fails")
    memory = None
    if skips.get("no-memory-regions"):
        memory = (f"not checked: the backend's compiled functions expose no memory regions (memory_regions() "
                  f"returned None), so no guard bytes were set; {skips['no-memory-regions']} memory cases skipped")
    tiers, dtypes, tier_dtypes, profile_cases = {}, {}, {}, {}
    for r in recs:
        tiers[r["tier"]] = tiers.get(r["tier"], 0) + 1
        dtypes[r["dtype"]] = dtypes.get(r["dtype"], 0) + 1
        row = tier_dtypes.setdefault(r["tier"], {})
        row[r["dtype"]] = row.get(r["dtype"], 0) + 1
        for p in r["profiles"]:
            profile_cases[p] = profile_cases.get(p, 0) + 1
    dtypes = {d: dtypes[d] for d in sorted(dtypes, key=dtype_key)}
    profile_cases = {p: profile_cases[p] for p in sorted(profile_cases, key=lambda p: (
        PROFILES.index(p) if p in PROFILES else len(PROFILES), p))}
    return dict(info, counts=counts, skips=skips, threads=threads, tiers=tiers, dtypes=dtypes,
                tier_dtypes=tier_dtypes, profile_cases=profile_cases, profiles=profiles, filtered=filtered,
                nothing_verified=nothing, memory=memory, matrix=matrix, stages=stages, flows=flow_data,
                modes=modes, plain=plain, cases=recs)


def dtype_key(d: str):
    """Sort key of dtype columns: the common types first, then by name."""
    return DTYPE_ORDER.get(d, len(DTYPE_ORDER)), d


def summary_lines(data: dict) -> list[str]:
    c, s = data["counts"], data["skips"]
    label = data["backend"] + ("" if data["backend_spec"] == data["backend"] else f" ({data['backend_spec']})")
    why = ", ".join(f"{n} {SKIP_KINDS.get(k, k)}" for k, n in sorted(s.items())) or "none"
    out = [f"backend {label}, {data['backend_version']}; suite {data['suite_version']}; seed {data['seed']}; "
           f"threads {', '.join(f'{t}: {n} cases' for t, n in sorted(data['threads'].items()))}",
           f"{c['total']} cases, {c['claimed']} claimed: {c['pass']} passed, {c['fail']} failed, {c['xfail']} known "
           f"failures, {c['xpass']} known failures passing; {c['skip']} skipped ({why})",
           "cases per tier and dtype:"]
    for t, n in sorted(data.get("tiers", {}).items()):
        row = data.get("tier_dtypes", {}).get(t, {})
        out.append(f"  {t:11s} {n:6d}: " + ", ".join(f"{d} {row[d]}" for d in sorted(row, key=dtype_key)))
    out += [f"  {'all':11s} {c['total']:6d}: " + ", ".join(f"{d} {n}" for d, n in data.get("dtypes", {}).items()),
            "cases per profile: " + (", ".join(f"{p} {n}" for p, n in data.get("profile_cases", {}).items()) or "-"),
            "stages (where each case ended): " + (", ".join(f"{k} {n}" for k, n in data.get("stages", {}).items()
                                                          if n) or "-"),
            "flows run: " + ", ".join(data.get("flows_requested", ["all"]))]
    for f, v in data.get("flows", {}).items():
        if not v["counts"]["total"]:
            continue
        fc = v["counts"]
        verdicts = ", ".join(f"{p} {pv['verdict']}" for p, pv in v["profiles"].items())
        out.append(f"  flow {f:17s} {fc['total']:6d} cases: {fc['pass']} passed, {fc['fail']} failed, {fc['skip']} "
                   f"skipped, {fc['xfail']} known failures" + (f"; profiles: {verdicts}" if verdicts else "")
                   + (f"; not judged: {v['note']}" if v.get("note") else ""))
    if data.get("modes"):
        out.append("outputs compared per compliance mode: " + ", ".join(f"{m} {n}" for m, n in data["modes"].items()))
    for cls, why in data.get("plain", {}).items():
        out.append(f"  plain bound, class {cls}: {why}")
    out.append("filter: " + ("; ".join(data["filter"]) if data["filter"] else "none (the whole suite)"))
    if data.get("nothing_verified"):
        out.append("FAIL: " + data["nothing_verified"])
    if data["memory"]:
        out.append("memory: " + data["memory"])
    if data["filtered"]:
        out.append("profiles: no verdicts (a filtered run judges no profile)")
    elif not data["profiles"] and data.get("flows_requested", ["all"]) != ["all"]:
        out.append("profiles: judged per flow (above), over each flow's cases")
    for p, v in data["profiles"].items():
        out.append(f"  profile {p:16s} {v['verdict']:8s} {v['why']}")
    for p, (verdict, why) in data.get("required", {}).items():
        out.append(f"required profile {p}: {verdict.upper()} ({why})")
    cov = data.get("coverage")
    if cov:
        from .coverage import summary_lines as cov_lines
        out += cov_lines(cov)
    return out


def write_report(data: dict, path: str):
    base, ext = os.path.splitext(path)
    html_path = path if ext.lower() in (".html", ".htm") else path + ".html"
    json_path = (base if ext.lower() in (".html", ".htm") else path) + ".json"
    os.makedirs(os.path.dirname(os.path.abspath(html_path)), exist_ok=True)
    with open(json_path, "w") as f:
        json.dump(data, f, indent=1)
    with open(html_path, "w") as f:
        f.write(render_html(data))
    return html_path, json_path


def _worst(cell):
    return max((o for o in OUTCOMES if cell[o]), key=SEVERITY.get, default="skip")


CSS = """body{font-family:sans-serif;margin:1.5em;color:#222}table{border-collapse:collapse;margin:.5em 0 1.5em}
td,th{border:1px solid #999;padding:2px 6px;font-size:12px;text-align:center}th.row,td.row{text-align:left}
pre{background:#f6f6f6;padding:6px;white-space:pre-wrap;font-size:12px}.pass{background:#b7e4b0}
.fail{background:#f4a09c}.skip{background:#d9d9d9}.xfail{background:#f7dc8f}.xpass{background:#e0a0f0}
.partial{background:#f7dc8f}"""


def render_html(data: dict) -> str:
    e = html.escape
    c = data["counts"]
    run = [("backend", f"{data['backend']} ({data['backend_class']}), {data['backend_version']}"),
           ("suite", data["suite_version"]), ("seed", str(data["seed"])),
           ("filter", "; ".join(data["filter"]) or "none (the whole suite)"),
           ("flows", ", ".join(data.get("flows_requested", ["all"]))),
           ("threads", ", ".join(f"num_threads {t}: {n} cases" for t, n in sorted(data["threads"].items()))),
           ("time limit", f"{data['case_timeout']:g} s to run a case's compiled code"), ("host", data["host"]),
           ("generated", data["generated"])]
    out = ["<!DOCTYPE html><html><head><meta charset='utf-8'>",
           f"<title>Glow conformance: {e(data['backend'])}</title><style>{CSS}</style></head><body>",
           f"<h1>Glow conformance report: backend <code>{e(data['backend'])}</code></h1>",
           "<table id='run'>" + "".join(f"<tr><th class='row'>{e(k)}</th><td class='row'>{e(v)}</td></tr>"
                                        for k, v in run) + "</table>",
           "<h2>Counts</h2><table id='counts'><tr><th>claimed</th>" + "".join(
               f"<th class='{o}'>{o}</th>" for o in OUTCOMES) + "<th>total</th></tr><tr>"
           + f"<td>{c['claimed']}</td>" + "".join(f"<td>{c[o]}</td>" for o in OUTCOMES) + f"<td>{c['total']}</td>"
           "</tr></table>",
           "<table id='skips'><tr><th class='row'>skipped because</th><th>cases</th></tr>" + "".join(
               f"<tr data-skip='{e(k)}'><td class='row'>{e(SKIP_KINDS.get(k, k))}</td><td>{n}</td></tr>"
               for k, n in sorted(data["skips"].items())) + "</table>"]
    out.append("<h2>Stages</h2><table id='stages'><tr>" + "".join(f"<th>{st}</th>" for st in STAGES)
               + "</tr><tr>" + "".join(f"<td data-stage='{st}'>{data.get('stages', {}).get(st, 0)}</td>"
                                       for st in STAGES) + "</tr></table><p>Every case ends in one stage: the one "
               "it failed at (import, quantize, partition, compile, load, run, mismatch, crash, timeout) or pass; a "
               "skipped case where it stopped (a refusal: partition).</p>")
    out.append(_flows_html(data))
    if data["memory"]:
        out.append(f"<p id='memory'><b>Memory profile {e(data['memory'])}</b></p>")
    out.append("<h2>Profiles</h2>")
    if data["filtered"]:
        out.append("<p id='profiles'>No verdicts: the run was filtered.</p>")
    else:
        out.append("<table id='profiles'><tr><th class='row'>profile</th><th>verdict</th><th class='row'>why</th>"
                   + "".join(f"<th>{o}</th>" for o in OUTCOMES) + "<th>total</th></tr>")
        for p, v in data["profiles"].items():
            out.append(f"<tr data-profile='{e(p)}' data-verdict='{v['verdict']}'><td class='row'>{e(p)}</td>"
                       f"<td class='{v['verdict']}'>{v['verdict']}</td><td class='row'>{e(v['why'])}</td>"
                       + "".join(f"<td>{v[o]}</td>" for o in OUTCOMES) + f"<td>{v['total']}</td></tr>")
        out.append("</table><p>A profile passes when every one of its cases passes; <i>partial</i>: some of its "
                   "cases are unsupported (skipped), known failures or did not run; a profile with no passing "
                   "case fails.</p>")
    for p, (verdict, why) in data.get("required", {}).items():
        out.append(f"<p class='required' data-profile='{e(p)}' data-verdict='{verdict}'>Required profile "
                   f"<b>{e(p)}</b>: <span class='{verdict}'>{verdict}</span> ({e(why)})</p>")
    dts = list(data.get("dtypes", {}))
    out.append("<h2>Cases per tier and dtype</h2><table id='tier-dtypes'><tr><th class='row'>tier</th>"
               + "".join(f"<th>{e(d)}</th>" for d in dts) + "<th>total</th></tr>")
    for tier, n in sorted(data.get("tiers", {}).items()):
        row = data["tier_dtypes"].get(tier, {})
        out.append(f"<tr data-tier='{e(tier)}'><td class='row'>{e(tier)}</td>"
                   + "".join(f"<td>{row.get(d, '')}</td>" for d in dts) + f"<td>{n}</td></tr>")
    out.append("<tr><td class='row'>all</td>" + "".join(f"<td>{data['dtypes'][d]}</td>" for d in dts)
               + f"<td>{c['total']}</td></tr></table>")
    out.append("<table id='profile-cases'><tr><th class='row'>profile</th><th>cases</th></tr>" + "".join(
        f"<tr data-profile='{e(p)}'><td class='row'>{e(p)}</td><td>{n}</td></tr>"
        for p, n in data.get("profile_cases", {}).items()) + "</table>")
    for tier, rows in data["matrix"].items():
        dts = sorted({d for cells in rows.values() for d in cells}, key=dtype_key)
        out.append(f"<h2>Tier {e(tier)}</h2><table class='matrix' data-tier='{e(tier)}'><tr><th class='row'>"
                   "subject</th>" + "".join(f"<th>{e(d)}</th>" for d in dts) + "</tr>")
        for subj in sorted(rows):
            cells = rows[subj]
            tds = []
            for d in dts:
                cell = cells.get(d)
                if cell is None:
                    tds.append("<td></td>")
                    continue
                w = _worst(cell)
                n = sum(cell.values())
                title = ", ".join(f"{cell[o]} {o}" for o in OUTCOMES if cell[o])
                tds.append(f"<td class='{w}' title='{e(title)}'>{cell['pass']}/{n}</td>")
            out.append(f"<tr><td class='row'>{e(subj)}</td>{''.join(tds)}</tr>")
        out.append("</table>")
    if data.get("coverage"):
        from .coverage import render_html as cov_html
        out.append(cov_html(data["coverage"]))
    if data.get("modes"):
        out.append("<h2>Compliance modes</h2><table id='modes'><tr><th class='row'>mode</th><th>outputs compared"
                   "</th></tr>" + "".join(f"<tr data-mode='{e(m)}'><td class='row'>{e(m)}</td><td>{n}</td></tr>"
                                          for m, n in data["modes"].items()) + "</table>")
    if data.get("plain"):
        out.append("<table id='plain'><tr><th class='row'>class</th><th class='row'>a plain bound remains because"
                   "</th></tr>" + "".join(f"<tr data-class='{e(k)}'><td class='row'>{e(k)}</td><td class='row'>"
                                          f"{e(v)}</td></tr>" for k, v in data["plain"].items()) + "</table>")
    bad = [r for r in data["cases"] if r["outcome"] in ("fail", "xpass")]
    out.append(f"<h2>Failures ({len(bad)})</h2>")
    for r in bad:
        out.append(f"<h3 id='f-{e(r['id'])}'>{e(r['id'])}</h3><pre>{e(r['detail'])}</pre>")
    out.append("<h2>All cases</h2><table id='cases'><tr><th class='row'>case</th><th>outcome</th><th>stage</th>"
               "<th>tier</th><th>subject</th><th>dtype</th><th>flows</th><th>profiles</th><th>mode</th>"
               "<th>max abs</th><th>max ULP</th><th>MAE</th><th>SQNR dB</th><th class='row'>bound</th>"
               "<th class='row'>note</th></tr>")
    for r in data["cases"]:
        note = r["detail"].strip().splitlines()[0][:200] if r["detail"] and r["outcome"] != "pass" else ""
        st = _worst_stats(r.get("stats") or [])
        out.append(f"<tr class='case' data-id='{e(r['id'])}' data-outcome='{r['outcome']}' "
                   f"data-stage='{e(r.get('stage', ''))}'><td class='row'>"
                   f"{e(r['id'])}</td><td class='{r['outcome']}'>{r['outcome']}</td><td>{e(r.get('stage', ''))}</td>"
                   f"<td>{e(r['tier'])}</td><td>{e(r['subject'])}</td><td>{e(r['dtype'])}</td>"
                   f"<td>{e(' '.join(r.get('flows') or []))}</td><td>{e(' '.join(r['profiles']))}</td>"
                   + "".join(f"<td>{e(_fmt(st.get(k)))}</td>" for k in ("mode", "max_abs", "max_ulp", "mae",
                                                                        "sqnr_db"))
                   + f"<td class='row'>{e(st.get('bound', ''))}</td><td class='row'>{e(note)}</td></tr>")
    out.append("</table></body></html>")
    return "\n".join(out)


def _fmt(v):
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def _worst_stats(stats: list) -> dict:
    """The statistics of a case's worst compared output (the largest error relative to its SQNR)."""
    if not stats:
        return {}

    def key(st):
        q = st.get("sqnr_db")
        q = 1e9 if q == "inf" or q is None else (-1e9 if q == "-inf" else q)
        return (st.get("out_of_bound", 0), -q)
    return max(stats, key=key)


def _flows_html(data) -> str:
    """A column per flow: its cases, passed, failed, skipped, then the verdict of each profile over its cases."""
    e = html.escape
    flows = [f for f, v in data.get("flows", {}).items() if v["counts"]["total"]]
    if not flows:
        return ""
    rows = [("cases", lambda v: v["counts"]["total"]), ("passed", lambda v: v["counts"]["pass"]),
            ("failed", lambda v: v["counts"]["fail"]), ("skipped", lambda v: v["counts"]["skip"]),
            ("known failures", lambda v: v["counts"]["xfail"])]
    out = ["<h2>Flows</h2><table id='flows'><tr><th class='row'></th>"
           + "".join(f"<th data-flow='{e(f)}'>{e(f)}</th>" for f in flows) + "</tr>"]
    for label, get in rows:
        out.append(f"<tr><td class='row'>{label}</td>" + "".join(f"<td>{get(data['flows'][f])}</td>" for f in flows)
                   + "</tr>")
    out.append("<tr><td class='row'>not judged</td>" + "".join(
        f"<td class='skip'>{e(data['flows'][f].get('note', ''))}</td>" if data["flows"][f].get("note") else "<td></td>"
        for f in flows) + "</tr>")
    profiles = sorted({p for f in flows for p in data["flows"][f]["profiles"]},
                      key=lambda p: PROFILES.index(p) if p in PROFILES else len(PROFILES))
    for p in profiles:
        cells = []
        for f in flows:
            v = data["flows"][f]["profiles"].get(p)
            cells.append("<td></td>" if v is None else f"<td class='{v['verdict']}' title='{e(v['why'])}'>"
                         f"{v['verdict']} {v['pass']}/{v['total']}</td>")
        out.append(f"<tr data-profile='{e(p)}'><td class='row'>profile {e(p)}</td>{''.join(cells)}</tr>")
    out.append("</table><p>A flow is a recipe (see vendor_guide/conformance.md): its primitive and ONNX-op cases by "
               "dtype or quantization, its networks compiled under the recipe. Cases of float64, integer, bool and "
               "storage types and the negative tier are in no flow.</p>")
    return "\n".join(out)
