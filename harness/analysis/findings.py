# SPDX-License-Identifier: GPL-2.0
"""What one attempt found: the one piece of evidence decide.py judges."""
from __future__ import annotations

from dataclasses import dataclass, field

from harness.analysis import classify, cpu_state, sleeping, thread_hang
from harness.analysis.reach import Reach
from harness.analysis.starvation import Starvation
from harness.analysis.ktap import Ktap
from harness.analysis.outcome import Outcome
from harness.base.reproducers import Reproducer


@dataclass(frozen=True)
class ProcessReading:
    """A stuck process's threads as read from its core (or why they could not be)."""
    analysis: thread_hang.Analysis | None
    error: str = ""


@dataclass
class Findings:
    outcome: Outcome
    repro: Reproducer
    ktap: Ktap = field(default_factory=Ktap)
    count: int = 0                      # passes over the path, as the reproducer counted them
    # the reproducer's name when it has signatures of its own ("" when it has
    # none, and any hang it makes is its finding)
    own_bug: str = ""
    pmiss: dict = field(default_factory=dict)  # pmiss.p_miss()
    pmiss_target: float = 1.0
    pmiss_given: bool = False           # the user asked for the target (--pmiss): an unknown P(miss) misses it
    classes: list[classify.CpuClass] = field(default_factory=list)  # every vCPU, classified
    debug_errors: list[str] = field(default_factory=list)  # why vCPUs could not be read
    report_reason: str = ""             # an emulator fault's console report, when one ended the run
    stall: dict | None = None           # latency.evidence(), for a reproducer that measures latencies
    process: ProcessReading | None = None  # a stuck process's threads, when they were dumped
    # a hang no culprit signature named: the CPUs' states, or a task asleep in D state
    hang: cpu_state.Hang | sleeping.SleepingHang | None = None
    ended_by: str = ""                  # a program run again and again: which of its limits ended it
    reports: list[dict] = field(default_factory=list)  # the kernel's console reports (console.Report.to_json())
    # a guest environment's account of the program (reach.py): what its calls reached, what it lacked
    reach: Reach | None = None
    leftovers: list[dict] = field(default_factory=list)  # its tasks that did not die when its time was up
    starvation: Starvation | None = None  # whether the kernel let the program run (starvation.py)
    # the looks the run went on after: no culprit, or one left to the kernel's detectors (run_state.py note_silence)
    silences: list[dict] = field(default_factory=list)
    # the kernel detectors' reports, each thing they said was stuck (candidates.py to_json)
    candidates: list[dict] = field(default_factory=list)
    host_share: float | None = None     # how much of the run the host kept the vCPUs waiting (measured)
    count_target: int = 0               # the passes the run was asked for (0: as many as its time gives)
    accel: str = ""                     # the attempt's accelerator (tcg, tcg-single, kvm): "" not known

    @property
    def stalled(self) -> bool:
        return self.stall is not None and bool(self.stall["stalled"])

    @property
    def suspect(self) -> bool:
        """A stall the host's delay could explain (latency.py)."""
        return self.stall is not None and bool(self.stall.get("suspect"))
