# SPDX-License-Identifier: GPL-2.0
"""report.html: the verdict grid, each cell opening its backtraces (per CPU,
or per thread for a process hang), latency chart and console excerpt, and
the time to verdict per cell. Self-contained: no script or style from outside."""
from __future__ import annotations

import html

from harness.analysis import latency
from harness.analysis.expect import STATUS_TEXT
from harness.analysis.verdict import VerdictKind
from harness.reports import views

_CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222}
h1{font-size:1.4em}.meta{color:#555}
table.grid{border-collapse:collapse;margin:1em 0}
table.grid th,table.grid td{border:1px solid #ccc;padding:.4em .7em;text-align:left}
td.cell{cursor:pointer;min-width:12em}td.cell small{display:block;color:#333}
td.cell:focus,td.cell.open{outline:3px solid #333}
.verdict-vulnerable{background:#f8c9c4}.verdict-crashed{background:#f4a99f}
.verdict-not_reproduced{background:#cdebc5}.verdict-inconclusive{background:#f6e7b0}
.verdict-error{background:#ddd}.verdict-none{background:#fff;color:#888}
.status-regression,.status-unexpected-pass,.status-mismatch,.status-disagrees,
.status-error{box-shadow:inset 0 0 0 3px #b00}
.badge{font-weight:bold}.failing{color:#b00;font-weight:bold}
article.detail{border:1px solid #bbb;padding:.5em 1em;margin:1em 0;max-width:70em}
pre{background:#f6f6f6;padding:.6em;overflow-x:auto;font-size:12px}
table.cpus td,table.cpus th{padding:.1em .6em;text-align:left}
svg text{font:12px system-ui,sans-serif}
"""

_JS = """
document.querySelectorAll('td.cell').forEach(function (td) {
  function open() {
    document.querySelectorAll('article.detail').forEach(function (a) { a.hidden = true; });
    document.querySelectorAll('td.cell.open').forEach(function (c) { c.classList.remove('open'); });
    var target = document.getElementById(td.dataset.detail);
    if (target) { target.hidden = false; td.classList.add('open'); target.scrollIntoView({block: 'nearest'}); }
  }
  td.addEventListener('click', open);
  td.addEventListener('keydown', function (e) { if (e.key === 'Enter' || e.key === ' ') { open(); } });
});
"""

_BAR_COLORS = {VerdictKind.VULNERABLE: "#d9534f", VerdictKind.CRASHED: "#b52b27",
               VerdictKind.NOT_REPRODUCED: "#5cb85c", VerdictKind.INCONCLUSIVE: "#e0b020", VerdictKind.ERROR: "#888",
               VerdictKind.FAILED: "#8a6d3b"}


def _chart(cells: list[dict]) -> str:
    ran = [c for c in cells if c["verdict"]]
    if not ran:
        return "<p>No cell ran.</p>"
    longest = max(c["seconds"] for c in ran) or 1
    label_w, bar_w, row_h = 300, 420, 22
    parts = [f'<svg id="chart" role="img" aria-label="time to verdict per cell" width="{label_w + bar_w + 80}" '
             f'height="{row_h * len(ran) + 10}" xmlns="http://www.w3.org/2000/svg">']
    for i, c in enumerate(ran):
        y = 5 + i * row_h
        w = max(2, int(bar_w * c["seconds"] / longest))
        color = _BAR_COLORS.get(c["verdict"], "#888")
        parts.append(f'<text x="0" y="{y + 14}">{html.escape(c["id"])}</text>'
                     f'<rect class="bar" data-cell="{html.escape(c["id"])}" x="{label_w}" y="{y}" width="{w}" '
                     f'height="{row_h - 6}" fill="{color}"><title>{html.escape(c["id"])}: {c["seconds"]:.1f}s, '
                     f'{html.escape(c["verdict"])}</title></rect>'
                     f'<text x="{label_w + w + 5}" y="{y + 14}">{c["seconds"]:.1f}s</text>')
    parts.append("</svg>")
    return "".join(parts)


def _detail(i: int, c: dict) -> str:
    e = html.escape
    cpus = "".join(f"<tr><td>CPU{x['cpu']}</td><td>{e(x['class'])}</td><td>{e(x.get('pc', ''))}</td>"
                   f"<td>{views.cpu_state(x)}</td></tr>" for x in c["cpus"])
    # the cell's own text: per-CPU backtraces (views.cpu_backtraces), or a process hang's thread table
    traces = c.get("backtraces") or "(no stacks: the guest did not hang)"
    pm = c.get("p_miss") or {}
    st = c.get("stalls") or {}
    what = f"{st.get('measure', 'measurement')} latency"
    chart = latency.svg(c["latency"], st.get("threshold_ms") or {}, st.get("titles") or {}, f"{c['id']}: {what}") \
        if c.get("latency") else ""
    facts = [f"expected <b>{e(c['expect'])}</b>, got <b>{e(c['verdict'] or 'nothing')}</b>: "
             f"<span class=\"{'failing' if c['failing'] else ''}\">{e(STATUS_TEXT[c['status']])}</span>"]
    if c.get("count") is not None:
        facts.append(f"{c['count']} {e(c.get('count_name') or '')}" + (f"; {e(pm.get('text', ''))}" if pm else ""))
    if c.get("reason"):
        facts.append(f"reason: {e(c['reason'])}")
    if views.kernel_said(c):
        facts.append(e(views.kernel_said(c)))
    if c.get("run_dir"):
        facts.append(f"results: <code>{e(c['run_dir'])}</code>")
    return (f'<article class="detail" id="detail-{i}" hidden><h2>{e(c["id"])}</h2>'
            f'<p class="badge">{e(c["line"] or c["reason"] or "")}</p><p>{"<br>".join(facts)}</p>'
            + (f'<table class="cpus"><tr><th>CPU</th><th>class</th><th>at</th><th></th></tr>{cpus}</table>'
               if cpus else "")
            + (f'<details open><summary>{e(what)}</summary>{chart}</details>' if chart else "")
            + f'<details open><summary>{"thread stacks" if c.get("process") else "per-CPU backtraces"}</summary>'
            f'<pre>{e(traces)}</pre></details>'
            f'<details><summary>console excerpt</summary><pre>{e(chr(10).join(c["console_excerpt"]) or "(empty)")}'
            f'</pre></details></article>')


def _syzbot_section(doc: dict, index: dict[str, int]) -> str:
    """syzbot's bugs, one a row, each kernel's answer in a cell that opens
    its details; and per kernel, how many came out each way."""
    e = html.escape
    bugs = views.syzbot_rows(doc)
    if not bugs:
        return ""
    counts = "".join(f"<li>{e(k)}: {e(views.syzbot_counts_text(n))}</li>" for k, n in views.syzbot_counts(doc))
    rows = []
    for b, row in bugs:
        tds = []
        for c in row:
            if c is None:
                tds.append('<td class="cell verdict-none">not in this run</td>')
                continue
            tds.append(f'<td class="cell verdict-{e((c["verdict"] or "none").lower())} status-{e(c["status"])}" '
                       f'tabindex="0" data-cell="{e(c["id"])}" data-outcome="{e(views.syzbot_outcome(c))}" '
                       f'data-detail="detail-{index[c["id"]]}">{e(views.syzbot_text(c))}</td>')
        bug = e(b.get("bug_id", "")[:12] or b["reproducer"])
        rows.append(f'<tr><th><a href="{e(b.get("link", ""))}">{bug}</a></th><td>{e(b.get("title", ""))}</td>'
                    f'{"".join(tds)}</tr>')
    return ('<h2>syzbot\'s bugs</h2><ul id="syzbot-counts">' + counts + '</ul>'
            '<table class="grid" id="syzbot"><thead><tr><th>bug</th><th>syzbot\'s title</th>'
            + "".join(f"<th>{e(k)}</th>" for k in doc["kernels"])
            + f'</tr></thead><tbody>{"".join(rows)}</tbody></table>' + _per_kernel(doc))


def _per_kernel(doc: dict) -> str:
    """Each kernel's page (views.per_kernel): its open syzbot hangs first."""
    e = html.escape
    out = ['<h2>Per kernel</h2>']
    for k, page in views.per_kernel(doc):
        items = [f'<li class="open">{e(x)}</li>' for x in page["open"]] or [f"<li>{views.nothing_open(page)}</li>"]
        items += [f'<li class="fixed">{e(x)}</li>' for x in page["fixed"]]
        items += [f"<li>another hang: {e(x)}</li>" for x in page["other hang"]]
        if page["not reproduced"]:
            items.append(f"<li>not reproduced ({len(page['not reproduced'])}): "
                         + ", ".join(e(x.split(":")[0]) for x in page["not reproduced"]) + "</li>")
        items += [f"<li>not run: {e(x)}</li>" for x in page["not run"]]
        out.append(f'<section class="kernel-page"><h3>{e(k)}</h3><ul>{"".join(items)}</ul></section>')
    return "".join(out)


def render(doc: dict) -> str:
    e = html.escape
    index = {c["id"]: i for i, c in enumerate(doc["cells"])}
    rows = []
    for k, row in views.grid(doc):
        tds = []
        for c in row:
            if c is None:
                tds.append('<td class="cell verdict-none status-not-in-run">not in this run</td>')
                continue
            v = (c["verdict"] or "none").lower()
            sub = []
            if c["verdict"] in (VerdictKind.VULNERABLE, VerdictKind.CRASHED) and c["line"]:
                sub.append(c["line"].split(": ", 1)[-1])
            elif c["verdict"] in (VerdictKind.INCONCLUSIVE, VerdictKind.ERROR) and (c["line"] or c["reason"]):
                sub.append(views.one_line((c["line"] or c["reason"]).split(": ", 1)[-1]))  # why, in a line
            elif c.get("count") is not None:
                sub.append(f"{c['count']} {c.get('count_name') or ''}")
            if views.predicted(c):
                sub.append(views.predicted(c))
            if c["status"] != "pass":
                sub.append(STATUS_TEXT[c["status"]] + f" (expected {c['expect']})")
            tds.append(f'<td class="cell verdict-{e(v)} status-{e(c["status"])}" tabindex="0" '
                       f'data-cell="{e(c["id"])}" data-verdict="{e(c["verdict"] or "")}" '
                       f'data-status="{e(c["status"])}" data-detail="detail-{index[c["id"]]}">'
                       f'{e(c["verdict"] or STATUS_TEXT[c["status"]])}'
                       + "".join(f"<small>{e(s)}</small>" for s in sub) + "</td>")
        rows.append(f"<tr><th>{e(k)}</th>{''.join(tds)}</tr>")
    failing = "".join(f"<li class=\"failing\">{e(STATUS_TEXT[c['status']])}: {e(c['id'])}: "
                      f"{e(c['line'] or c['reason'] or '')} (expected {e(c['expect'])})</li>"
                      for c in doc["cells"] if c["failing"])
    return (f'<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width,initial-scale=1">'
            f'<title>{e(views.headline(doc))}</title><style>{_CSS}</style></head><body>'
            f'<h1>{e(views.headline(doc))}</h1>'
            f'<p class="meta">run {e(doc["id"])}, {e(doc["started"])} to {e(doc["finished"])}; '
            f'host {doc["host"]["cores"]} cores, {doc["host"]["jobs"]} jobs. Click a cell for its backtraces '
            '(per CPU, or per thread for a process hang) and console.</p>'
            + (f"<ul>{failing}</ul>" if failing else "")
            + ('<table class="grid" id="grid"><thead><tr><th>kernel</th>'
               + "".join(f"<th>{e(r)}</th>" for r in doc["reproducers"])
               + f'</tr></thead><tbody>{"".join(rows)}</tbody></table>'
               if len(views.syzbot_rows(doc)) < len(doc["reproducers"]) else "")
            + _syzbot_section(doc, index)
            + f'<section id="details">{"".join(_detail(i, c) for i, c in enumerate(doc["cells"]))}</section>'
            f'<h2>Time to verdict</h2>{_chart(doc["cells"])}'
            f'<script>{_JS}</script></body></html>\n')
