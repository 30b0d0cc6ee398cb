# SPDX-License-Identifier: GPL-2.0
"""The benchmark's rows kept in a document (repro/README.md), merged with a
pass's: the state under ~/.cache goes with a machine, the document stays, so
a pass replaces the rows of the bugs it ran and keeps every other row.

The block is the lines from `<!-- rows ... -->` to `<!-- /rows -->`: a
table with a row per bug (its first column the bug's 12-digit id), then a
line per kernel counting the rows' outcomes, then a line per pass with its
cells and times ("- pass ...")."""
from __future__ import annotations

import re

START, END = "<!-- rows", "<!-- /rows -->"
ROW = re.compile(r"^\| ([0-9a-f]{12})\b")
# what a column's text starts with, in the order the count line gives them
OUTCOMES = (("reproduced", "reproduced"), ("different", "different"), ("not reproduced", "not reproduced"),
            ("starved", "starved"), ("not in the kernel", "not in the kernel"),
            ("test device not built", "test device not built"), ("not in the guest", "not in the guest"),
            ("needs", "needs"))  # the older rows' word, before the three kinds were told apart


def outcome(column: str) -> str:
    """A column's outcome as the count line names it: "" where the kernel did not run the bug."""
    column = column.strip()
    if column in ("", "-"):
        return ""
    return next((name for start, name in OUTCOMES if column.startswith(start)), "other")


def counts(header: str, rows: list[str]) -> list[str]:
    """A line per kernel column: how many bugs it ran, by outcome."""
    kernels = [c.strip() for c in header.strip("|").split("|")][2:]
    lines = []
    for i, k in enumerate(kernels):
        seen = [o for r in rows if (o := outcome(r.strip().strip("|").split(" | ")[2 + i]))]
        if not seen:
            continue
        by = [f"{name} {seen.count(name)}" for name in [n for _, n in OUTCOMES] + ["other"] if seen.count(name)]
        lines.append(f"- {k}: {len(seen)} bugs: " + ", ".join(by))
    return lines


def _kernels(header: str) -> list[str]:
    return [c.strip() for c in header.strip().strip("|").split("|")][2:]


def _columns(row: str, have: list[str], want: list[str]) -> str:
    """A table's row laid out in the block's kernel columns ("-" where the pass had none)."""
    if set(have) - set(want):
        raise ValueError(f"the pass's kernels {', '.join(have)} are not all among the block's: {', '.join(want)}")
    cells = [c.strip() for c in row.strip().strip("|").split(" | ")]
    by = dict(zip(have, cells[2:]))
    return "| " + " | ".join([*cells[:2], *(by.get(k, "-").strip() for k in want)]) + " |"


def _over(new: str, old: str | None) -> str:
    """A bug's new row over its old one: a kernel the pass did not run it on ("-") keeps the old row's cell."""
    if old is None:
        return new
    cells, before = new.strip().strip("|").split(" | "), old.strip().strip("|").split(" | ")
    if len(cells) != len(before):
        return new
    return "| " + " | ".join(b if c.strip() in ("", "-") else c for c, b in zip(cells, before)).strip() + " |"


def passes(block: list[str]) -> dict[str, list[str]]:
    """The block's passes by name, each its "- pass" line and the "  - " lines under it."""
    out: dict[str, list[str]] = {}
    name = ""
    for x in block:
        if x.startswith("- pass "):
            name = x
            out[name] = [x]
        elif name and x.startswith("  - "):
            out[name].append(x)
        else:
            name = ""
    return out


def merge(doc: str, table: str, pass_lines: list[str], block: str = "") -> str:
    """doc with its rows block merged with table (`--table --brief`'s
    output): the table's rows replace the block's rows of the same bugs,
    but for the kernels the pass did not run a bug on ("-"), whose cells
    stay (a "(to run again)" after an id goes with its row); the rest stay, in id order; the count
    lines are made again from the rows; pass_lines (a "- pass NAME:" line
    and its own) replace the block's pass of that name or are added. block
    names the block (`<!-- rows NAME`) where a document keeps several, one
    per set of kernels; else the first."""
    lines = doc.split("\n")
    opening = f"{START} {block} " if block else START
    try:
        start = next(i for i, x in enumerate(lines) if (x + " ").startswith(opening))
        end = next(i for i, x in enumerate(lines) if i > start and x.startswith(END))
    except StopIteration:
        raise ValueError(f"no {opening.strip()} ... {END} block") from None
    block = lines[start + 1:end]
    head = [x for x in block if x.startswith("|") and not ROW.match(x)][:2]
    new = [x for x in table.split("\n") if ROW.match(x)]
    theirs = [x for x in table.split("\n") if x.startswith("|") and not ROW.match(x)][:2]
    if not head:
        head = theirs
    elif theirs and new:
        new = [_columns(x, _kernels(theirs[0]), _kernels(head[0])) for x in new]
    rows = {ROW.match(x)[1]: x for x in block if ROW.match(x)}
    rows.update({ROW.match(x)[1]: _over(x, rows.get(ROW.match(x)[1])) for x in new})
    merged = [rows[k] for k in sorted(rows)]
    kept = {**passes(block), pass_lines[0]: pass_lines}
    body = [*head, *merged, "", f"{len(merged)} bugs", "", *counts(head[0], merged),
            *[x for p in kept.values() for x in p]]
    return "\n".join(lines[:start + 1] + body + lines[end:])


def blocks(doc: str) -> list[tuple[str, list[str], dict[str, list[str]]]]:
    """Every rows block of doc: its name, its kernel columns, and each bug's
    cells in their order, by its 12-digit id."""
    out: list[tuple[str, list[str], dict[str, list[str]]]] = []
    lines = doc.split("\n")
    for i, x in enumerate(lines):
        if not x.startswith(START) or x.startswith(END):
            continue
        body = next((lines[i + 1:j] for j in range(i + 1, len(lines)) if lines[j].startswith(END)), [])
        head = next((r for r in body if r.startswith("|") and not ROW.match(r)), "")
        rows = {m[1]: [c.strip() for c in r.strip().strip("|").split(" | ")][2:]
                for r in body if (m := ROW.match(r))}
        out.append((x[len(START):].strip(" ->"), _kernels(head) if head else [], rows))
    return out
