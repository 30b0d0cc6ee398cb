# SPDX-License-Identifier: GPL-2.0
"""Whether a hang is syzbot's: a run of a syzkaller reproducer against the
title its header (or the bug's record) gives.

syzbot titles a hang "KIND in FUNCTION" (console-patterns.toml's titles
follow the same format). A run reproduces the bug when one of its hangs
(the verdict's, or any kernel report of the run: a hung task, a lockup, a
stall) matches one of syzbot's titles (the header's, and the bug's crashes'
from its record) in one of these ways, tried in order:

1. the titles are equal once syzbot's "(N)" suffix is dropped ("title");
2. the kinds are equal and syzbot's function is on the stack the hang's
   report or task shows ("stack"): kstall and syzkaller pass over
   different helper frames to name a hung task, so the same hang can be
   "INFO: task hung in lock_sock_nested" there and "... in vsock_connect"
   here, with lock_sock_nested on its stack; or syzbot's function is one
   the distro's build inlined into a frame of the report ("inlined", read
   from the kernel's debug info: harness/debug/inlines.py), which syzbot's
   symbolized reports show and a distro kernel's console does not;
3. the kinds are alike ("kind"): a task that "can't die" (a linux-next
   report Debian's kernels do not have) is a hung task here, and a soft
   lockup, an RCU stall and a hard lockup in the same function are the same
   stall seen by three detectors. syzbot's "INFO: task syz-executor can't
   die for more than N seconds." names no function: any hung task matches.

Any other hang is "a different hang".
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from harness.analysis import console
from harness.base.syzkaller import base_title

_KIND_IN = re.compile(r"^(?P<kind>.+?) in (?P<func>[\w.]+)$")  # "hang in X": kind "hang"
# kinds that are one hang seen by different detectors (see the module's docstring);
# kstall's own "hang in X" (cpu_state.py: a CPU frozen in X, its interrupts off,
# read by GDB before any detector spoke) is that stall seen by a fourth
ALIKE = (
    frozenset({"INFO: task hung", "INFO: task can't die"}),
    frozenset({"BUG: soft lockup", "INFO: rcu detected stall", "BUG: hard lockup", "hang"}),
)
# syzbot's titles that name no function, and the kind of hang they are
FUNCTIONLESS = {re.compile(r"^INFO: task .*can't die for more than \d+ seconds\.?$"): "INFO: task hung"}


@dataclass(frozen=True)
class Hang:
    """One hang of a run: its title, the functions on its stack and those
    inlined into them."""
    title: str
    frames: tuple[str, ...] = ()
    inlined: tuple[str, ...] = ()


@dataclass(frozen=True)
class Match:
    how: str       # "title", "stack", "inlined" or "kind"
    theirs: str    # syzbot's title that matched
    ours: str      # the run's hang that matched it

    def text(self) -> str:
        if self.how == "title":
            return f"reproduced syzbot's \"{self.theirs}\""
        why = {"stack": "its function is on the stack",
               "inlined": "its function is inlined into a frame, as the kernel's debug info says"}.get(
            self.how, "the same kind of hang")
        return f"reproduced syzbot's \"{self.theirs}\" ({self.ours}: {why})"


def split(title: str) -> tuple[str, str]:
    """'INFO: task hung in foo' -> ('INFO: task hung', 'foo'); a title with no function -> (title, '')."""
    t = base_title(title)
    for pattern, kind in FUNCTIONLESS.items():
        if pattern.match(t):
            return kind, ""
    m = _KIND_IN.match(t)
    return (m.group("kind"), m.group("func")) if m else (t, "")


def _alike(a: str, b: str) -> bool:
    return a == b or any(a in group and b in group for group in ALIKE)


def match_one(theirs: str, hang: Hang) -> Match | None:
    if not theirs or not hang.title:
        return None
    if base_title(theirs) == base_title(hang.title):
        return Match("title", theirs, hang.title)
    kind, func = split(theirs)
    our_kind, our_func = split(hang.title)
    if kind == our_kind and func and func in hang.frames:
        return Match("stack", theirs, hang.title)
    if kind == our_kind and func and func in hang.inlined:
        return Match("inlined", theirs, hang.title)
    if _alike(kind, our_kind) and (not func or func == our_func or func in hang.frames):
        return Match("kind", theirs, hang.title)
    return None


def match(titles: list[str], hangs: list[Hang]) -> Match | None:
    """The first of the run's hangs that matches one of syzbot's titles, the best way first."""
    found = [m for h in hangs for t in titles if (m := match_one(t, h)) is not None]
    order = {"title": 0, "stack": 1, "inlined": 2, "kind": 3}
    return min(found, key=lambda m: order[m.how]) if found else None


def unnamed(titles: list[str], reports: list[dict]) -> list[dict]:
    """The reports none of syzbot's titles names by their title, stack or
    inlined functions (a hang of the same kind only is not named): those a
    module's inlined functions may still name. None once one report is
    named: the run reproduced syzbot's title whatever the others name
    (2373f6be3e6d on 6.1.170 waited 75 s for sg.ko's debug file, for the
    blk_trace_setup reports beside its blk_trace_remove one)."""
    left = [rep for rep in reports if (m := match(titles, [report_hang(rep)])) is None or m.how == "kind"]
    return left if len(left) == len(reports) else []


def report_hang(report: dict) -> Hang:
    """A console report of run.json: its title and the functions of its own
    trace (console.report_frames: not "? " frames, not other CPUs' output),
    as the report's pattern reads them ("trace" for a pattern that names none)."""
    pattern = next((p for p in console.default_patterns() if p.name == report.get("name")), None)
    frames = console.report_frames(list(report.get("excerpt", ())), pattern.func_from if pattern and
                                   pattern.func_from else "trace")
    return Hang(report.get("title", ""), tuple(frames), tuple(report.get("inlined", ())))
