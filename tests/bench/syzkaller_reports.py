#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0
"""How well kstall's console recogniser (harness/analysis/console.py) finds
and titles kernel reports, measured on a directory in the format of
syzkaller's golden report corpus (pkg/report/testdata/linux/report/): each
file a header of TITLE:/ALT:/TYPE:/CORRUPTED: lines, a blank line, then a
console log. A file with no TITLE has no report: finding one is a false
positive.

Prints detection and exact-title rates (the first report's title is TITLE or
one of its ALT lines), overall and per family (TYPE: HANG and LOCKDEP are the
hang family), the false positives, the misses, and the speed.

  tests/bench/syzkaller_reports.py ../shared/syzkaller-reports/linux [--misses N] [--json] [--part a|b]

--part splits the directory in two by a rule fixed before any rule was
written against either part: the first byte of the SHA-1 of a file's name,
even (a) or odd (b). Rules are written against one part and measured on the
other, to see how they do on reports nobody tuned them to.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from harness.analysis import console  # noqa: E402

HANG_TYPES = ("HANG", "LOCKDEP")


@dataclass
class Case:
    name: str
    titles: list[str] = field(default_factory=list)
    alts: list[str] = field(default_factory=list)
    type: str = ""
    corrupted: bool = False
    log: str = ""

    @property
    def family(self) -> str:
        if not self.titles:
            return "none"
        return "hang" if self.type in HANG_TYPES else (self.type or "other").lower()


def load(path: Path) -> Case:
    text = path.read_text(errors="replace")
    head, _, log = text.partition("\n\n")
    case = Case(path.name, log=log)
    for line in head.splitlines():
        key, _, value = line.partition(": ")
        value = value.strip()
        if key == "TITLE":
            case.titles.append(value)
        elif key == "ALT":
            case.alts.append(value)
        elif key == "TYPE":
            case.type = value
        elif key == "CORRUPTED":
            case.corrupted = value == "Y"
    if not head.startswith(("TITLE", "ALT", "TYPE", "CORRUPTED", "FRAME", "EXECUTOR")) and head.strip():
        case.log = text  # no header at all: all of it is the log
    return case


def first_title(log: str, patterns: console.Patterns) -> str | None:
    reports = [r for r in console.scan(log, patterns) if r.kind in console.TITLED_KINDS]
    return reports[0].title if reports else None


def part_of(name: str) -> str:
    """a or b: the half a file belongs to, by its name alone."""
    return "ab"[hashlib.sha1(name.encode()).digest()[0] & 1]


def rate(n: int, d: int) -> str:
    return f"{n}/{d} ({100 * n / d:.0f}%)" if d else "0/0"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("directory", type=Path)
    ap.add_argument("--misses", type=int, default=40, help="how many misses to list (default 40)")
    ap.add_argument("--family", default="", help="list only this family's misses (hang, dos, warning, ...)")
    ap.add_argument("--json", action="store_true", help="print the figures as JSON")
    ap.add_argument("--part", choices=("a", "b"), help="only one half of the directory (see above)")
    a = ap.parse_args()
    files = sorted(p for p in a.directory.iterdir() if p.is_file() and not p.name.startswith(".")
                   and (not a.part or part_of(p.name) == a.part))
    if not files:
        print(f"{a.directory}: no files", file=sys.stderr)
        return 2
    patterns = console.load_patterns()
    cases = [load(p) for p in files]
    found, exact, total = defaultdict(int), defaultdict(int), defaultdict(int)
    false_pos, misses, times = [], [], []
    t_all = time.perf_counter()
    for c in cases:
        t0 = time.perf_counter()
        got = first_title(c.log, patterns)
        times.append((time.perf_counter() - t0, c.name))
        if not c.titles:
            if got is not None:
                false_pos.append((c.name, got))
            continue
        for fam in ("all", c.family):
            total[fam] += 1
            found[fam] += got is not None
            exact[fam] += got is not None and (got == c.titles[0] or got in c.alts)
        if got is None or not (got == c.titles[0] or got in c.alts):
            misses.append((c.family, c.name, c.titles[0], got))
    wall = time.perf_counter() - t_all
    longest = max(times)
    figures = {
        "files": len(cases), "with_report": total["all"], "seconds": round(wall, 3),
        "files_per_second": round(len(cases) / wall, 1), "longest_file": longest[1],
        "longest_file_ms": round(longest[0] * 1000, 1),
        "median_file_ms": round(statistics.median(t for t, _ in times) * 1000, 2),
        "families": {f: {"reports": total[f], "detected": found[f], "exact": exact[f]} for f in sorted(total)},
        "false_positives": [{"file": n, "title": t} for n, t in false_pos],
    }
    if a.json:
        print(json.dumps(figures, indent=2))
        return 0
    print(f"{len(cases)} files, {total['all']} with a report, {len(cases) - total['all']} without, "
          f"in {wall:.2f}s ({figures['files_per_second']} files/s; longest {longest[1]} "
          f"{figures['longest_file_ms']} ms)")
    print(f"{'family':<28} {'detected':>16} {'exact title':>16}")
    for fam in ["all", "hang"] + sorted(f for f in total if f not in ("all", "hang")):
        if total[fam]:
            print(f"{fam:<28} {rate(found[fam], total[fam]):>16} {rate(exact[fam], total[fam]):>16}")
    print(f"false positives: {len(false_pos)} of {len(cases) - total['all']}")
    for n, t in false_pos:
        print(f"  {n}: {t}")
    shown = [m for m in misses if not a.family or m[0] == a.family][:a.misses]
    print(f"misses: {len(misses)}" + (f" (first {len(shown)})" if len(shown) < len(misses) else ""))
    for fam, n, want, got in shown:
        print(f"  [{fam}] {n}: want {want!r}, got {got!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
