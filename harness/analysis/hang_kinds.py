# SPDX-License-Identifier: GPL-2.0
"""The kinds of hang kstall knows, in one table: for each, the watch outcome
that detects it (harness/guest/watch.py), how the attempt reads it
(harness/drivers/readings.py has a row per Reading) and how it is judged
(hang_verdicts.py). A new kind is a row here, plus its reader or judge when
no existing one fits."""
from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Callable

from harness.analysis import hang_verdicts
from harness.analysis.findings import Findings
from harness.analysis.outcome import OutcomeKind
from harness.analysis.verdict import Verdict
from harness.base.reproducers import HangIn, Reproducer


class HangKind(StrEnum):
    FREEZE = "kernel freeze"       # heartbeats stopped: the kernel spins with interrupts off somewhere
    STUCK = "stuck progress"       # heartbeats go on, the reproducer's count does not: wedged CPUs
    PROGRAM = "program stuck"      # a user's program stopped coming back: the kernel's doing, or its own
    PROCESS = "process hang"       # the reproducer's process stuck while the kernel stays responsive
    SLEEPING = "sleeping task"     # a task of the reproducer's asleep in D state, in one kernel wait
    STALL = "latency stall"        # the reproducer's own latency measurement passed its threshold
    REPORTED = "kernel report"     # the kernel's own detector reported a hang (a guest environment's run)


class Reading(StrEnum):
    VCPUS = "vcpus"                       # every vCPU through GDB (QMP if GDB fails); resumed on a false alarm
    VCPUS_THEN_THREADS = "vcpus, then threads"  # a culprit CPU settles it, else the process's core
    THREADS = "threads"                   # the process's core, through GDB
    TASKS = "tasks"                       # the agent's report of the sleeping tasks and their kernel stacks
    HISTOGRAMS = "histograms"             # the reproducer ended at once, for its final measurements
    REPORT = "report"                     # the kernel's report on the console is the evidence


@dataclass(frozen=True)
class Way:
    kind: HangKind
    outcome: OutcomeKind                      # what the watch reports
    applies: Callable[[Reproducer], bool]     # for which reproducers
    reading: Reading
    judge: Callable[[Findings], Verdict]


def _process(r: Reproducer) -> bool:
    return r.hang == HangIn.PROCESS


def _program(r: Reproducer) -> bool:
    return r.hang == HangIn.KERNEL and r.generic and bool(r.program)


def _kernel(r: Reproducer) -> bool:
    return r.hang == HangIn.KERNEL


# the first row that fits an outcome and a reproducer is the way
WAYS = (
    Way(HangKind.FREEZE, OutcomeKind.FREEZE, lambda r: True, Reading.VCPUS, hang_verdicts.cpus),
    Way(HangKind.PROCESS, OutcomeKind.STUCK, _process, Reading.THREADS, hang_verdicts.process),
    Way(HangKind.PROGRAM, OutcomeKind.STUCK, _program, Reading.VCPUS_THEN_THREADS, hang_verdicts.stuck),
    Way(HangKind.STUCK, OutcomeKind.STUCK, _kernel, Reading.VCPUS, hang_verdicts.stuck),
    Way(HangKind.SLEEPING, OutcomeKind.SLEEPING, lambda r: True, Reading.TASKS, hang_verdicts.sleeping_task),
    Way(HangKind.STALL, OutcomeKind.STALL, lambda r: True, Reading.HISTOGRAMS, hang_verdicts.stall),
    Way(HangKind.REPORTED, OutcomeKind.REPORTED, lambda r: True, Reading.REPORT, hang_verdicts.kernel_report),
)


def way_for(outcome: OutcomeKind, repro: Reproducer) -> Way | None:
    """How a run that ended with outcome is read and judged; None when the outcome is no hang."""
    return next((w for w in WAYS if w.outcome == outcome and w.applies(repro)), None)
