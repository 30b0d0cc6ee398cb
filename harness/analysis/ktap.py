# SPDX-License-Identifier: GPL-2.0
"""A reproducer's KTAP output as the agent forwards it: its results, its
`# result k=v` line and its diagnostics, out of the kselftest runner's "# "
nesting. Guest text: bounded, and nothing here raises on it."""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from harness.base.untrusted import num

KV = re.compile(r"(\w{1,32})=(\S+)")  # bounded: guest text, no quadratic scans


@dataclass
class Ktap:
    lines: list[str] = field(default_factory=list)  # all but progress lines, up to MAX_CHARS
    results: list[dict] = field(default_factory=list)
    result_fields: dict = field(default_factory=dict)  # "# result k=v ..."
    # a program the agent runs and reports for (one that knows nothing of
    # kstall): its own TAP results, which never stand for the agent's
    program_results: list[dict] = field(default_factory=list)
    kept_chars: int = 0
    dropped: int = 0  # lines past MAX_CHARS: a guest that does not stop talking
    MAX_CHARS = 4 << 20  # up to 4 bytes each in memory; a real run prints a few KB
    MAX_RESULTS = 1000

    def feed(self, line: str, program: bool = False) -> None:
        """A line of the run's TAP; program: a line of the program the agent
        reports for, output only (its results kept apart, no result fields)."""
        line = unnest(line)
        if self.kept_chars + len(line) > self.MAX_CHARS:
            self.dropped += 1
        else:
            self.lines.append(line)
            self.kept_chars += len(line) + 1
        m = _RESULT.match(line)
        results = self.program_results if program else self.results
        if m and len(results) < self.MAX_RESULTS:
            results.append({"ok": m.group(1) == "ok", "number": num(m.group(2), 0),
                            "name": (m.group(3) or "").strip(), "directive": (m.group(4) or "").upper(),
                            "reason": (m.group(5) or "").strip()})
        elif line.startswith("# result ") and not program:
            self.result_fields = dict(KV.findall(line))


# "ok 1 name", "not ok 2 name # SKIP why", kselftest's "ok 1 # SKIP why", the
# runner's "ok 1 selftests: kstall: perf-refresh"
_RESULT = re.compile(r"^(not ok|ok) (\d+)(?: ([^#]*))?(?:#\s*(\w+)\s*(.*))?$")
# kstall's own diagnostics, wherever the kselftest runner nests them ("# # ...")
_KSTALL_DIAG = ("# progress ", "# result ", "# first-stall ", "# stats ", "# hist ", "# nmi-source: ")


def unnest(line: str) -> str:
    """A reproducer's diagnostic as it printed it, out of the kselftest
    runner's "# " nesting; any other line as it is."""
    inner = line
    while inner.startswith("# # "):
        inner = inner[2:]
        if inner.startswith(_KSTALL_DIAG):
            return inner
    return line
