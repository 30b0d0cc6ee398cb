# SPDX-License-Identifier: GPL-2.0
"""A verdict and its kinds (the contract in ARCHITECTURE.md); decide.py
reaches one from what a run found.

VULNERABLE      a hang or stall whose stacks match a culprit signature of the
                reproducer's; for a reproducer with no signatures of its own (a
                user's program), any hang with a culprit, named or classified
                from the CPUs' states (cpu_state.py)
CRASHED         a kernel panic or oops (with its title), not an emulator fault
NOT_REPRODUCED  the reproducer exercised the path at least min_count times
FAILED          the program failed on its own: it exited non-zero (not 4,
                kselftest's skip) or reported a failed test, with no hang
INCONCLUSIVE    the path was not exercised, a hang matched no culprit, or a
                reproducer with signatures hit a different hang than its own
ERROR           boot failure, QEMU died or stopped answering, emulator fault, bad input
A boot failure is never VULNERABLE, a program's own failure never a hang.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from harness.analysis.retry import Retry


class VerdictKind(StrEnum):
    VULNERABLE = "VULNERABLE"
    CRASHED = "CRASHED"
    NOT_REPRODUCED = "NOT_REPRODUCED"
    INCONCLUSIVE = "INCONCLUSIVE"
    ERROR = "ERROR"
    FAILED = "FAILED"

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self]


EXIT_CODES = {VerdictKind.NOT_REPRODUCED: 0, VerdictKind.VULNERABLE: 1, VerdictKind.CRASHED: 1,
              VerdictKind.INCONCLUSIVE: 3, VerdictKind.ERROR: 4, VerdictKind.FAILED: 5}


@dataclass
class Verdict:
    verdict: VerdictKind
    reason: str
    summary: str = ""
    confidence: str = ""
    signature: str | None = None
    retry: Retry | None = None  # why another attempt may overturn it (retry.py)
    p_miss: dict = field(default_factory=dict)
    # what was found, titled as syzbot titles it ("hang in cpu_clock_event_stop",
    # a signature's title, a crash's): "the same hang" across runs and bisect steps
    title: str = ""
    # a syzkaller reproducer's: whether and how the hang matched syzbot's title (syzbot.py Match)
    matched: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.verdict = VerdictKind(self.verdict)

    @property
    def exit_code(self) -> int:
        return self.verdict.exit_code

    @property
    def retryable(self) -> bool:
        return self.retry is not None

    def line(self) -> str:
        """'VULNERABLE: hrtimer_cancel self-deadlock on CPU1; ...'"""
        return f"{self.verdict}: {self.summary or self.reason}"
