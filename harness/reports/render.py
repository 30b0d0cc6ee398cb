# SPDX-License-Identifier: GPL-2.0
"""Matrix reports: matrix.json, junit.xml, summary.md, report.html, matrix.ktap,
kcidb.json.

Everything is generated from matrix.json alone (each cell carries its
classified CPUs, backtrace text and console excerpt), so shards run on
different CI runners merge by merging their matrix.json files.
"""
from __future__ import annotations

import html
import json
import os
import shutil
import time
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

from harness.analysis import console, latency
from harness.reports import kcidb
from harness.base import paths
from harness.analysis.expect import FAILING, STATUS_TEXT

if TYPE_CHECKING:  # the report command runs without the VM side (and pexpect)
    from harness.drivers.matrix import CellResult, Matrix

SCHEMA = "kstall.matrix/1"


def _console_excerpt(run_dir: Path | None, doc: dict, lines: int = 40) -> list[str]:
    reports = doc.get("evidence", {}).get("console_reports", [])
    if reports:
        out: list[str] = []
        for r in reports[:3]:
            out += r.get("excerpt", [])
        return out[:lines]
    if run_dir and (run_dir / "console.log").exists():
        return (run_dir / "console.log").read_text(errors="replace").splitlines()[-lines:]
    return []


def backtrace_text(cpus: list[dict]) -> str:
    out = []
    for c in cpus:
        if c.get("role") == "benign":
            continue
        out.append(f"CPU{c['cpu']}: {c['class']} ({'stuck' if c.get('stuck') else 'moving'}, "
                   f"{c.get('seen', {}).get(c.get('signature'), 0)}/{c.get('samples')} samples)")
        out += [f"    {f}" for f in c.get("frames", [])[:24]]
    return "\n".join(out)


def _threads_text(run_dir: Path | None) -> str:
    """A process hang's thread table (threads.txt), where a kernel hang has
    per-CPU backtraces."""
    p = run_dir / "threads.txt" if run_dir else None
    return p.read_text() if p is not None and p.is_file() else ""


def _kernel_said(c: dict) -> str:
    return f"kernel reported: {console.titles_text(c['console_titles'])}" if c.get("console_titles") else ""


def cell_doc(r: CellResult, root: Path) -> dict:
    d = r.doc
    ev = d.get("evidence", {})
    return {
        "id": r.cell.id, "kernel": r.cell.kernel, "reproducer": r.cell.reproducer,
        "expect": r.cell.expect, "xfail": r.cell.xfail, "skip": r.cell.skip,
        "status": r.status, "failing": r.status in FAILING,
        "verdict": r.verdict, "line": d.get("line"), "reason": d.get("reason") or r.cell.skip,
        "signature": d.get("signature"), "confidence": d.get("confidence"),
        "kernel_canonical": d.get("kernel", {}).get("canonical"),
        "kernel_sha256": d.get("kernel", {}).get("sha256"), "kernel_origin": d.get("kernel", {}).get("origin"),
        "started": d.get("started"), "vm": d.get("vm"),
        "count": ev.get("count"), "count_name": ev.get("count_name"), "p_miss": ev.get("p_miss"),
        "stalls": ev.get("stalls"), "latency": ev.get("latency"),
        "cpus": d.get("cpus", []),
        "backtraces": backtrace_text(d.get("cpus", [])) or _threads_text(r.run_dir),
        "process": d.get("process"),
        "console_excerpt": _console_excerpt(r.run_dir, d),
        "console_titles": console.titles(ev.get("console_reports", [])),
        "timings": d.get("timings", {}),
        "seconds": round(r.seconds, 2), "kernel_wait_s": round(r.kernel_wait_s, 2),
        "run_dir": os.path.relpath(r.run_dir, root) if r.run_dir else None,
    }


def totals(cells: list[dict]) -> dict:
    return dict(Counter(c["status"] for c in cells))


def exit_code(cells: list[dict]) -> int:
    return 1 if any(c["status"] in FAILING for c in cells) else 0


def matrix_doc(m: Matrix, results: list[CellResult], root: Path, run_id: str, shard: str | None,
               started: float, jobs: int, cores: int, interrupted: bool = False) -> dict:
    cells = [cell_doc(r, root) for r in results]
    return {"schema": SCHEMA, "id": run_id, "matrix": str(m.path), "shards": [shard] if shard else [],
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
            "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "wall_s": round(time.time() - started, 1), "interrupted": interrupted,
            "host": {"cores": cores, "jobs": jobs}, "kernels": m.kernels, "reproducers": m.reproducers,
            "cells": cells, "totals": totals(cells), "failing": [c["id"] for c in cells if c["failing"]],
            "exit_code": exit_code(cells)}


def merge(docs: list[dict]) -> dict:
    """One document from shards of the same matrix (cells keyed by id)."""
    if not docs:
        raise ValueError("nothing to merge")
    kernels: list[str] = []
    repros: list[str] = []
    cells: dict[str, dict] = {}
    for d in docs:
        kernels += [k for k in d["kernels"] if k not in kernels]
        repros += [r for r in d["reproducers"] if r not in repros]
        for c in d["cells"]:
            cells[c["id"]] = c
    order = {(k, r): i for i, (k, r) in enumerate((k, r) for k in kernels for r in repros)}
    merged = sorted(cells.values(), key=lambda c: order.get((c["kernel"], c["reproducer"]), 1 << 30))
    first = docs[0]
    return {**first, "id": first["id"] + (f"+{len(docs) - 1}" if len(docs) > 1 else ""),
            "shards": sorted({s for d in docs for s in d.get("shards", [])}),
            "started": min(d["started"] for d in docs), "finished": max(d["finished"] for d in docs),
            "wall_s": max(d["wall_s"] for d in docs), "interrupted": any(d.get("interrupted") for d in docs),
            "kernels": kernels, "reproducers": repros, "cells": merged, "totals": totals(merged),
            "failing": [c["id"] for c in merged if c["failing"]], "exit_code": exit_code(merged)}


# -- JUnit ----------------------------------------------------------------------

def junit_xml(doc: dict) -> str:
    suites = ET.Element("testsuites", name="kstall matrix")
    by_repro: dict[str, list[dict]] = {}
    for c in doc["cells"]:
        by_repro.setdefault(c["reproducer"], []).append(c)
    all_counts = Counter()
    for repro, cells in by_repro.items():
        counts = Counter()
        suite = ET.SubElement(suites, "testsuite", name=f"kstall.{repro}", timestamp=doc["started"][:19],
                              hostname="kstall")
        for c in cells:
            case = ET.SubElement(suite, "testcase", classname=f"kstall.{repro}", name=c["kernel"],
                                 time=f"{c['seconds']:.2f}")
            counts["tests"] += 1
            st = c["status"]
            expected = f"expected {c['expect']}"
            if st in ("regression", "unexpected-pass", "mismatch"):
                counts["failures"] += 1
                el = ET.SubElement(case, "failure", type=st, message=f"{STATUS_TEXT[st]}: {expected}: {c['line']}")
                el.text = "\n".join(filter(None, [c["line"], c["reason"], _kernel_said(c), c["backtraces"]]))
            elif st == "error":
                counts["errors"] += 1
                el = ET.SubElement(case, "error", type="error", message=f"{expected}: {c['reason']}")
                el.text = c["reason"] or ""
            elif st in ("skip", "xfail", "not-run"):
                counts["skipped"] += 1
                ET.SubElement(case, "skipped", message=f"{st}: {c['reason'] or c.get('xfail') or ''}")
            out = ET.SubElement(case, "system-out")
            out.text = "\n".join(filter(None, [c["line"], c["reason"], f"results: {c['run_dir']}" if c["run_dir"]
                                               else None]))
            counts["time"] += c["seconds"]
        for k in ("tests", "failures", "errors", "skipped"):
            suite.set(k, str(counts[k]))
        suite.set("time", f"{counts['time']:.2f}")
        all_counts.update(counts)
    for k in ("tests", "failures", "errors", "skipped"):
        suites.set(k, str(all_counts[k]))
    suites.set("time", f"{doc['wall_s']:.2f}")
    ET.indent(suites)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suites, encoding="unicode") + "\n"


# -- KTAP ----------------------------------------------------------------------

def _ktap_text(text: str) -> str:
    """One line, no '#' (KTAP starts a directive at the first '#')."""
    return " ".join(str(text or "").replace("#", "no.").split())


def matrix_ktap(doc: dict) -> str:
    """The matrix as KTAP v1 (Documentation/dev-tools/ktap.rst), one test per
    cell, for LAVA- and tuxrun-style consumers: failing cells are `not ok`,
    skipped and not-run cells `ok … # SKIP`, xfail cells `ok … # XFAIL`
    (kselftest's directive); the verdict line follows as a diagnostic."""
    out = ["KTAP version 1", f"1..{len(doc['cells'])}", f"# kstall matrix {doc['matrix']} ({doc['id']})"]
    for i, c in enumerate(doc["cells"], 1):
        st = c["status"]
        name = _ktap_text(c["id"]).replace(" ", "_")
        why = _ktap_text(c["reason"] or c.get("xfail") or st)
        directive = {"skip": f" # SKIP {why}", "not-run": f" # SKIP not run: {why}",
                     "xfail": f" # XFAIL {why}"}.get(st, "")
        out.append(f"{'not ok' if st in FAILING else 'ok'} {i} {name}{directive}")
        detail = c["line"] or c["reason"]
        if detail:
            out.append(f"# {_ktap_text(detail)} (expected {c['expect']}: {STATUS_TEXT.get(st, st)})")
        if c.get("console_titles"):
            out.append(f"# kernel reported: {_ktap_text(console.titles_text(c['console_titles']))}")
    t = doc["totals"]
    out.append(f"# totals: {' '.join(f'{k}={n}' for k, n in sorted(t.items()))}")
    return "\n".join(out) + "\n"


# -- Markdown / text -------------------------------------------------------------

def _cell_map(doc: dict) -> dict[tuple[str, str], dict]:
    return {(c["kernel"], c["reproducer"]): c for c in doc["cells"]}


def _headline(doc: dict) -> str:
    t = doc["totals"]
    parts = [f"{n} {STATUS_TEXT.get(s, s)}" for s, n in sorted(t.items(), key=lambda kv: kv[0] not in FAILING)]
    shards = f", shards {', '.join(doc['shards'])}" if doc.get("shards") else ""
    stopped = " (interrupted)" if doc.get("interrupted") else ""
    return f"kstall matrix: {', '.join(parts)}{stopped} ({doc['matrix']}{shards}, {doc['wall_s']:.0f}s)"


def summary_md(doc: dict) -> str:
    cells = _cell_map(doc)
    lines = [f"## {_headline(doc)}", "", "| kernel | " + " | ".join(doc["reproducers"]) + " |",
             "|---|" + "---|" * len(doc["reproducers"])]
    for k in doc["kernels"]:
        row = []
        for r in doc["reproducers"]:
            c = cells.get((k, r))
            if c is None:
                row.append("")
                continue
            text = c["verdict"] or STATUS_TEXT[c["status"]]
            if c["status"] in FAILING:
                row.append(f"**{text}** ({STATUS_TEXT[c['status']]}, expected {c['expect']})")
            else:
                row.append(f"{text}" + (f" ({c['status']})" if c["status"] != "pass" else ""))
        lines.append(f"| {k} | " + " | ".join(row) + " |")
    failing = [c for c in doc["cells"] if c["failing"]]
    if failing:
        lines += ["", "### Cells that differ from their expectation", ""]
        for c in failing:
            lines.append(f"- **{STATUS_TEXT[c['status']]}** `{c['id']}`: {c['line'] or c['reason']} "
                         f"(expected {c['expect']})")
    said = [c for c in doc["cells"] if c.get("console_titles")]
    if said:
        lines += ["", "### What the kernels reported on their consoles", ""]
        lines += [f"- `{c['id']}`: {console.titles_text(c['console_titles'])}" for c in said]
    lines += ["", "Details: `report.html`, `junit.xml`, `matrix.json` in the results directory.", ""]
    return "\n".join(lines)


def summary_text(doc: dict) -> str:
    """The verdict table `make run` prints."""
    cells = _cell_map(doc)
    w = max(len(k) for k in doc["kernels"]) + 2
    cols = [max(len(r), 30) for r in doc["reproducers"]]
    out = [_headline(doc), "", "kernel".ljust(w) + "".join(r.ljust(c + 2) for r, c in zip(doc["reproducers"], cols))]
    for k in doc["kernels"]:
        row = k.ljust(w)
        for r, width in zip(doc["reproducers"], cols):
            c = cells.get((k, r))
            if c is None:
                text = "-"
            else:
                text = (c["verdict"] or STATUS_TEXT[c["status"]]) + (
                    f" [{STATUS_TEXT[c['status']]}]" if c["status"] != "pass" else "")
            row += text.ljust(width + 2)
        out.append(row.rstrip())
    for c in doc["cells"]:
        if c["failing"]:
            out.append(f"{STATUS_TEXT[c['status']]}: {c['id']}: {c['line'] or c['reason']} (expected {c['expect']})")
    return "\n".join(out)


# -- HTML -----------------------------------------------------------------------

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
.status-regression,.status-unexpected-pass,.status-mismatch,.status-error{box-shadow:inset 0 0 0 3px #b00}
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

_BAR_COLORS = {"VULNERABLE": "#d9534f", "CRASHED": "#b52b27", "NOT_REPRODUCED": "#5cb85c",
               "INCONCLUSIVE": "#e0b020", "ERROR": "#888"}


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
                   f"<td>{'stuck' if x.get('stuck') else 'moving'}</td></tr>" for x in c["cpus"])
    traces = "\n\n".join(
        f"CPU{x['cpu']}: {x['class']}\n" + "\n".join("    " + f for f in x.get("frames", []))
        for x in c["cpus"] if x.get("role") != "benign") or c.get("backtraces") or "(no stacks: the guest did not hang)"
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
    if c.get("console_titles"):
        facts.append(f"kernel reported: {e(console.titles_text(c['console_titles']))}")
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


def report_html(doc: dict) -> str:
    e = html.escape
    cells = _cell_map(doc)
    index = {c["id"]: i for i, c in enumerate(doc["cells"])}
    rows = []
    for k in doc["kernels"]:
        tds = []
        for r in doc["reproducers"]:
            c = cells.get((k, r))
            if c is None:
                tds.append('<td class="cell verdict-none status-not-in-run">not in this run</td>')
                continue
            v = (c["verdict"] or "none").lower()
            sub = []
            if c["verdict"] in ("VULNERABLE", "CRASHED") and c["line"]:
                sub.append(c["line"].split(": ", 1)[-1])
            elif c.get("count") is not None:
                sub.append(f"{c['count']} {c.get('count_name') or ''}")
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
            f'<title>{e(_headline(doc))}</title><style>{_CSS}</style></head><body>'
            f'<h1>{e(_headline(doc))}</h1>'
            f'<p class="meta">run {e(doc["id"])}, {e(doc["started"])} to {e(doc["finished"])}; host {doc["host"]["cores"]} '
            f'cores, {doc["host"]["jobs"]} jobs. Click a cell for its backtraces (per CPU, or per thread for a process hang) and console.</p>'
            + (f"<ul>{failing}</ul>" if failing else "")
            + '<table class="grid" id="grid"><thead><tr><th>kernel</th>'
            + "".join(f"<th>{e(r)}</th>" for r in doc["reproducers"])
            + f'</tr></thead><tbody>{"".join(rows)}</tbody></table>'
            f'<section id="details">{"".join(_detail(i, c) for i, c in enumerate(doc["cells"]))}</section>'
            f'<h2>Time to verdict</h2>{_chart(doc["cells"])}'
            f'<script>{_JS}</script></body></html>\n')


def write_all(directory: Path, doc: dict) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    files = {"matrix.json": json.dumps(doc, indent=2) + "\n", "junit.xml": junit_xml(doc),
             "summary.md": summary_md(doc), "report.html": report_html(doc), "matrix.ktap": matrix_ktap(doc),
             "kcidb.json": json.dumps(kcidb.from_matrix(doc), indent=2) + "\n"}
    for name, text in files.items():
        paths.write_atomic(directory / name, text)


def load_doc(directory: Path) -> dict:
    p = directory / "matrix.json"
    if not p.is_file():
        raise FileNotFoundError(f"{directory}: no matrix.json (not a matrix results directory)")
    return json.loads(p.read_text())


def copy_runs(src: Path, dest: Path) -> None:
    """A merged report keeps its cells' run directories next to it."""
    runs = src / "runs"
    if runs.is_dir():
        for r in runs.iterdir():
            target = dest / "runs" / r.name
            if not target.exists():
                shutil.copytree(r, target)

