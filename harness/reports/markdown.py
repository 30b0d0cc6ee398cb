# SPDX-License-Identifier: GPL-2.0
"""summary.md: the verdict grid and what failed, for a CI job summary or a PR comment."""
from __future__ import annotations

from harness.analysis.expect import FAILING, STATUS_TEXT
from harness.reports import views


def _cell_text(c: dict | None) -> str:
    if c is None:
        return ""
    text = c["verdict"] or STATUS_TEXT[c["status"]]
    if views.predicted(c):  # beside what was measured
        text += f" ({views.predicted(c)})"
    if c["status"] in FAILING:
        return f"**{text}** ({STATUS_TEXT[c['status']]}, expected {c['expect']})"
    return text + (f" ({c['status']})" if c["status"] != "pass" else "")


def render(doc: dict) -> str:
    bugs = views.syzbot_rows(doc)
    lines = [f"## {views.headline(doc)}", ""]
    if len(bugs) < len(doc["reproducers"]):
        lines += ["| kernel | " + " | ".join(doc["reproducers"]) + " |", "|---|" + "---|" * len(doc["reproducers"])]
        for k, row in views.grid(doc):
            lines.append(f"| {k} | " + " | ".join(_cell_text(c) for c in row) + " |")
    if bugs:
        lines += ["", "### syzbot's bugs", ""]
        lines += [f"- {k}: {views.syzbot_counts_text(n)}" for k, n in views.syzbot_counts(doc)]
        lines += ["", "| bug | syzbot's title | " + " | ".join(doc["kernels"]) + " |",
                  "|---|---|" + "---|" * len(doc["kernels"])]
        lines += [f"| [{b.get('bug_id', '')[:12] or b['reproducer']}]({b.get('link', '')}) | {b.get('title', '')} | "
                  + " | ".join(views.syzbot_text(c) for c in row) + " |" for b, row in bugs]
    failing = [c for c in doc["cells"] if c["failing"]]
    if failing:
        lines += ["", "### Cells that differ from their expectation", ""]
        for c in failing:
            lines.append(f"- **{STATUS_TEXT[c['status']]}** `{c['id']}`: {c['line'] or c['reason']} "
                         f"(expected {c['expect']})")
    said = [c for c in doc["cells"] if c.get("console_titles") or c.get("waits")]
    if said:
        lines += ["", "### What the kernels reported on their consoles, and who held what their tasks waited for",
                  ""]
        lines += [f"- `{c['id']}`: {views.kernel_said(c)}" for c in said]
    lines += ["", "Details: `report.html`, `junit.xml`, `matrix.json` in the results directory.", ""]
    return "\n".join(lines)
