# SPDX-License-Identifier: GPL-2.0
"""summary.md: the verdict grid and what failed, for a CI job summary or a PR comment."""
from __future__ import annotations

import re
from urllib.parse import quote

from harness.analysis.expect import FAILING, STATUS_TEXT
from harness.reports import views

# what Markdown (GitHub's) would read as a table's structure, emphasis, a
# link, code or HTML: a syzbot title, a program's output or a kernel's text
# is guest or user text, shown as it is written (an underscore inside a
# word, as in function names, is no emphasis there and stays as it is)
_MARKUP = re.compile(r"([\\`*\[\]<>|]|(?<!\w)_|_(?!\w))")


def esc(text: object) -> str:
    """text as a table cell or list item shows it: one line, no markup."""
    return _MARKUP.sub(r"\\\1", " ".join(str(text).split()))


def code_span(text: object) -> str:
    """text in a code span: one line, no backtick to end it early."""
    return "`" + " ".join(str(text).split()).replace("`", "'") + "`"


def safe_link(url: str) -> str:
    """A bug's link, only when it is a web address; its characters quoted."""
    return quote(url, safe=":/?=&%.-_~") if url.startswith(("https://", "http://")) else ""


def _cell_text(c: dict | None) -> str:
    if c is None:
        return ""
    text = c["verdict"] or STATUS_TEXT[c["status"]]
    if views.predicted(c):  # beside what was measured
        text += f" ({views.predicted(c)})"
    if c["status"] in FAILING:
        return f"**{esc(text)}** ({STATUS_TEXT[c['status']]}, expected {esc(c['expect'])})"
    return esc(text) + (f" ({c['status']})" if c["status"] != "pass" else "")


def render(doc: dict) -> str:
    bugs = views.syzbot_rows(doc)
    lines = [f"## {esc(views.headline(doc))}", ""]
    if len(bugs) < len(doc["reproducers"]):
        lines += ["| kernel | " + " | ".join(map(esc, doc["reproducers"])) + " |",
                  "|---|" + "---|" * len(doc["reproducers"])]
        for k, row in views.grid(doc):
            lines.append(f"| {esc(k)} | " + " | ".join(_cell_text(c) for c in row) + " |")
    if bugs:
        lines += ["", "### syzbot's bugs", ""]
        lines += [f"- {esc(k)}: {esc(views.syzbot_counts_text(n))}" for k, n in views.syzbot_counts(doc)]
        lines += ["", "| bug | syzbot's title | " + " | ".join(map(esc, doc["kernels"])) + " |",
                  "|---|---|" + "---|" * len(doc["kernels"])]
        lines += [f"| [{esc(b.get('bug_id', '')[:12] or b['reproducer'])}]({safe_link(b.get('link', ''))}) | "
                  f"{esc(b.get('title', ''))} | " + " | ".join(esc(views.syzbot_text(c)) for c in row) + " |"
                  for b, row in bugs]
    if bugs:
        lines += ["", "### Per kernel: syzbot's hangs still open, fixed, other hangs, not reproduced, not run"]
        for k, page in views.per_kernel(doc):
            lines += ["", f"#### {esc(k)}", ""]
            lines += [f"- {esc(x)}" for x in page["open"]] or [f"- {views.nothing_open(page)}"]
            lines += [f"- {esc(x)}" for x in page["fixed"]]
            lines += [f"- another hang: {esc(x)}" for x in page["other hang"]]
            if page["not reproduced"]:
                lines.append(f"- not reproduced ({len(page['not reproduced'])}): "
                             + ", ".join(esc(x.split(":")[0]) for x in page["not reproduced"]))
            lines += [f"- not run: {esc(x)}" for x in page["not run"]]
    failing = [c for c in doc["cells"] if c["failing"]]
    if failing:
        lines += ["", "### Cells that differ from their expectation", ""]
        for c in failing:
            lines.append(f"- **{STATUS_TEXT[c['status']]}** {code_span(c['id'])}: {esc(c['line'] or c['reason'])} "
                         f"(expected {esc(c['expect'])})")
    said = [c for c in doc["cells"] if c.get("console_titles") or c.get("waits")]
    if said:
        lines += ["", "### What the kernels reported on their consoles, and who held what their tasks waited for",
                  ""]
        lines += [f"- {code_span(c['id'])}: {esc(views.kernel_said(c))}" for c in said]
    lines += ["", "Details: `report.html`, `junit.xml`, `matrix.json` in the results directory.", ""]
    return "\n".join(lines)
