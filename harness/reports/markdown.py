# SPDX-License-Identifier: GPL-2.0
"""summary.md: the verdict grid and what failed, for a CI job summary or a PR comment."""
from __future__ import annotations

from harness.analysis.expect import FAILING, STATUS_TEXT
from harness.reports import views


def render(doc: dict) -> str:
    cells = views.cell_map(doc)
    lines = [f"## {views.headline(doc)}", "", "| kernel | " + " | ".join(doc["reproducers"]) + " |",
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
        lines += [f"- `{c['id']}`: {views.titles_text(c['console_titles'])}" for c in said]
    lines += ["", "Details: `report.html`, `junit.xml`, `matrix.json` in the results directory.", ""]
    return "\n".join(lines)
