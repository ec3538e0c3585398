"""The report's part of ``--coverage``: a backend's line coverage (``Backend.coverage_report``) as summary lines
and an HTML table. Measuring it is the backend's (the cpu backend: ``glow_cpu.build.coverage``, gcov over its
templates)."""
from __future__ import annotations


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
