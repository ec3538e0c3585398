"""The conformance report: one JSON document and a self-contained HTML page with the same data.

The HTML page has no external scripts, fonts or styles: a matrix per tier (rows: primitive/op/model/pass,
columns: dtypes; each cell coloured by its worst outcome and showing passed/total), the counts, the profile
verdicts, the failure details and one table row per case (``<tr class="case" data-id=... data-outcome=...>``,
which is what tools should parse).
"""
from __future__ import annotations

import html
import json
import os
import time

OUTCOMES = ("pass", "fail", "skip", "xfail", "xpass")
SEVERITY = {"fail": 4, "xpass": 3, "xfail": 2, "skip": 1, "pass": 0}
COLOURS = {"pass": "#b7e4b0", "fail": "#f4a09c", "skip": "#d9d9d9", "xfail": "#f7dc8f", "xpass": "#e0a0f0"}


def summarize(records, backend_name, spec=None) -> dict:
    from .cases import PROFILES
    recs = sorted(records, key=lambda r: r["id"])
    counts = {o: sum(r["outcome"] == o for r in recs) for o in OUTCOMES}
    counts["total"] = len(recs)
    profiles = {}
    for p in PROFILES:
        rs = [r for r in recs if p in r["profiles"]]
        if not rs:
            continue
        c = {o: sum(r["outcome"] == o for r in rs) for o in OUTCOMES}
        verdict = "fail" if c["fail"] or c["xpass"] else ("pass" if c["pass"] == len(rs) else "partial")
        profiles[p] = dict(c, total=len(rs), verdict=verdict)
    matrix = {}
    for r in recs:
        cell = matrix.setdefault(r["tier"], {}).setdefault(r["subject"], {}).setdefault(
            r["dtype"], {o: 0 for o in OUTCOMES})
        cell[r["outcome"]] += 1
    return {"backend": backend_name, "backend_spec": spec or backend_name,
            "generated": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "counts": counts,
            "profiles": profiles, "matrix": matrix, "cases": recs}


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
    out = ["<!DOCTYPE html><html><head><meta charset='utf-8'>",
           f"<title>Glow conformance: {e(data['backend'])}</title><style>{CSS}</style></head><body>",
           f"<h1>Glow conformance report: backend <code>{e(data['backend'])}</code></h1>",
           f"<p>Generated {e(data['generated'])} ({e(data['backend_spec'])}).</p>",
           "<h2>Counts</h2><table id='counts'><tr>" + "".join(f"<th class='{o}'>{o}</th>" for o in OUTCOMES)
           + "<th>total</th></tr><tr>" + "".join(f"<td>{c[o]}</td>" for o in OUTCOMES) + f"<td>{c['total']}</td>"
           "</tr></table>",
           "<h2>Profiles</h2><table id='profiles'><tr><th class='row'>profile</th><th>verdict</th>"
           + "".join(f"<th>{o}</th>" for o in OUTCOMES) + "<th>total</th></tr>"]
    for p, v in data["profiles"].items():
        out.append(f"<tr data-profile='{e(p)}' data-verdict='{v['verdict']}'><td class='row'>{e(p)}</td>"
                   f"<td class='{v['verdict']}'>{v['verdict']}</td>"
                   + "".join(f"<td>{v[o]}</td>" for o in OUTCOMES) + f"<td>{v['total']}</td></tr>")
    out.append("</table><p>A profile passes when every one of its cases passes; <i>partial</i>: some of its "
               "cases are unsupported (skipped) or known failures.</p>")
    for tier, rows in data["matrix"].items():
        order = {d: i for i, d in enumerate(("float32", "float16", "bfloat16", "float64", "int8", "uint8", "int16",
                                              "uint16", "int32", "uint32", "int64", "uint64", "bool"))}
        dts = sorted({d for cells in rows.values() for d in cells}, key=lambda d: (order.get(d, 99), d))
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
    bad = [r for r in data["cases"] if r["outcome"] in ("fail", "xpass")]
    out.append(f"<h2>Failures ({len(bad)})</h2>")
    for r in bad:
        out.append(f"<h3 id='f-{e(r['id'])}'>{e(r['id'])}</h3><pre>{e(r['detail'])}</pre>")
    out.append("<h2>All cases</h2><table id='cases'><tr><th class='row'>case</th><th>outcome</th><th>tier</th>"
               "<th>subject</th><th>dtype</th><th>profiles</th><th class='row'>note</th></tr>")
    for r in data["cases"]:
        note = r["detail"].strip().splitlines()[0][:200] if r["detail"] and r["outcome"] != "pass" else ""
        out.append(f"<tr class='case' data-id='{e(r['id'])}' data-outcome='{r['outcome']}'><td class='row'>"
                   f"{e(r['id'])}</td><td class='{r['outcome']}'>{r['outcome']}</td><td>{e(r['tier'])}</td>"
                   f"<td>{e(r['subject'])}</td><td>{e(r['dtype'])}</td><td>{e(' '.join(r['profiles']))}</td>"
                   f"<td class='row'>{e(note)}</td></tr>")
    out.append("</table></body></html>")
    return "\n".join(out)
