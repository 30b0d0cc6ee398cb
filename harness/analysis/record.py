# SPDX-License-Identifier: GPL-2.0
"""The run record: what one verify run found, as verify hands it to the
matrix, the bisections, the reports and the command line. to_json() is
run.json (schema in results/README.md), written in this one place."""
from __future__ import annotations

from dataclasses import dataclass, field

from harness.analysis import console, cpu_state, sleeping
from harness.analysis.outcome import Outcome, OutcomeKind
from harness.analysis.verdict import Verdict, VerdictKind

SCHEMA = "kstall.run/1"


@dataclass
class Evidence:
    """What the verdict rests on."""
    count: int | None = None           # passes over the path, as the reproducer counted them
    count_name: str = ""
    stalls: dict | None = None         # harness/analysis/latency.py evidence() (with the measurement in "data")
    nmi_injection: dict | None = None
    p_miss: dict | None = None
    heartbeats: int | None = None
    max_heartbeat_gap_s: float | None = None
    # that gap less what the host held the guest back by (the freeze floor's margin)
    max_unexplained_gap_s: float | None = None
    console_reports: list[dict] = field(default_factory=list)
    console_reports_dropped: int = 0
    debug_method: str | None = None    # gdb | qmp
    debug_errors: list[str] = field(default_factory=list)
    reach: dict | None = None          # a guest environment's program: what its calls reached (reach.py)
    # whether the kernel let the program run: the agent's account and its judgement (starvation.py)
    health: dict | None = None
    # the looks the run went on after (run_state.py RunState.note_silence)
    silences: list[dict] = field(default_factory=list)
    # what the kernel's detectors said was stuck, and whether each became a hang (candidates.py)
    candidates: list[dict] = field(default_factory=list)
    reports_before_program: int = 0  # detector reports during the boot: never the program's

    @property
    def latency(self) -> dict | None:
        return (self.stalls or {}).get("data")

    @property
    def first_stall_count(self) -> int | None:
        return (self.latency or {}).get("first_stall_count")

    @property
    def console_titles(self) -> list[dict]:
        return console.titles(self.console_reports)

    def to_json(self) -> dict:
        return {"count": self.count, "count_name": self.count_name, "first_stall_count": self.first_stall_count,
                "stalls": {k: v for k, v in (self.stalls or {}).items() if k != "data"} or None,
                "latency": self.latency, "nmi_injection": self.nmi_injection, "p_miss": self.p_miss or None,
                "heartbeats": self.heartbeats, "max_heartbeat_gap_s": self.max_heartbeat_gap_s,
                "max_unexplained_gap_s": self.max_unexplained_gap_s,
                "console_reports": self.console_reports, "console_titles": self.console_titles,
                "console_reports_dropped": self.console_reports_dropped, "debug_method": self.debug_method,
                "debug_errors": self.debug_errors, "reach": self.reach, "health": self.health,
                "silences": self.silences, "candidates": self.candidates,
                "reports_before_program": self.reports_before_program}


@dataclass
class RunRecord:
    id: str
    verdict: Verdict
    outcome: Outcome
    kernel: dict                 # images.kernels.kernel.Kernel.to_json(), with the spec as the user wrote it
    reproducer: dict             # name, args, count_name, min_count, count_target
    vm: dict                     # cpus, memory_mb, accel, cmdline, go, boot_image, snapshot
    evidence: Evidence = field(default_factory=Evidence)
    cpus: list[dict] = field(default_factory=list)  # harness/analysis/classify.py CpuClass.to_json()
    process: dict | None = None  # a process hang: its thread analysis (threads.json), or why there is none
    hang: dict | None = None     # a hang no signature named: harness/analysis/cpu_state.py Hang.to_json()
    waits: dict | None = None    # who holds what the sleeping tasks wait for: harness/analysis/task_waits.py
    prediction: dict | None = None  # what the bug's record predicts: harness/analysis/bug_record.py
    guest: dict = field(default_factory=dict)       # the agent's hello
    symbols: dict = field(default_factory=dict)
    timings: dict = field(default_factory=dict)
    attempts: list[dict] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    command: list[str] = field(default_factory=list)
    started: str = ""
    finished: str = ""
    wall_s: float = 0.0
    results_dir: str | None = None

    @property
    def line(self) -> str:
        return self.verdict.line()

    @property
    def exit_code(self) -> int:
        return self.verdict.exit_code

    @property
    def stalled_by_measurement(self) -> bool:
        """The verdict came from the reproducer's own latency measurement, not from stacks."""
        return bool(self.evidence.stalls) and self.verdict.signature == self.evidence.stalls.get("signature")

    def to_json(self) -> dict:
        v = self.verdict
        doc = {"schema": SCHEMA, "id": self.id, "command": self.command, "started": self.started,
               "finished": self.finished, "wall_s": self.wall_s, "verdict": v.verdict, "exit_code": v.exit_code,
               "line": v.line(), "reason": v.reason, "summary": v.summary, "confidence": v.confidence,
               "signature": v.signature, "title": v.title, "kernel": self.kernel, "reproducer": self.reproducer,
               "vm": self.vm,
               "outcome": {"kind": self.outcome.kind, "detail": self.outcome.detail},
               "evidence": self.evidence.to_json(), "cpus": self.cpus, "hang": self.hang, "waits": self.waits,
               "process": self.process, "prediction": self.prediction, "guest": self.guest, "symbols": self.symbols,
               "timings": self.timings, "attempts": self.attempts,
               "files": self.files}
        if self.results_dir is not None:
            doc["results_dir"] = self.results_dir
        return doc

    @classmethod
    def from_json(cls, doc: dict) -> "RunRecord":
        """A run.json read back (a resumed bisection's bad end)."""
        ev = doc.get("evidence") or {}
        stalls = {**ev["stalls"], "data": ev.get("latency")} if ev.get("stalls") else None
        return cls(id=doc.get("id", ""),
                   verdict=Verdict(VerdictKind(doc["verdict"]), doc.get("reason", ""), doc.get("summary", ""),
                                   doc.get("confidence", ""), doc.get("signature"), p_miss=ev.get("p_miss") or {},
                                   title=doc.get("title") or ""),
                   outcome=Outcome(OutcomeKind(doc["outcome"]["kind"]), doc["outcome"]["detail"], 0.0),
                   kernel=doc.get("kernel", {}), reproducer=doc.get("reproducer", {}), vm=doc.get("vm", {}),
                   evidence=Evidence(count=ev.get("count"), count_name=ev.get("count_name", ""), stalls=stalls,
                                     nmi_injection=ev.get("nmi_injection"), p_miss=ev.get("p_miss"),
                                     heartbeats=ev.get("heartbeats"), max_heartbeat_gap_s=ev.get("max_heartbeat_gap_s"),
                                     max_unexplained_gap_s=ev.get("max_unexplained_gap_s"),
                                     console_reports=ev.get("console_reports", []),
                                     console_reports_dropped=ev.get("console_reports_dropped", 0),
                                     debug_method=ev.get("debug_method"), debug_errors=ev.get("debug_errors", []),
                                     reach=ev.get("reach"), health=ev.get("health"),
                                     silences=ev.get("silences", []), candidates=ev.get("candidates", []),
                                     reports_before_program=ev.get("reports_before_program", 0)),
                   cpus=doc.get("cpus", []), hang=doc.get("hang"), waits=doc.get("waits"), process=doc.get("process"),
                   prediction=doc.get("prediction"), guest=doc.get("guest", {}),
                   symbols=doc.get("symbols", {}), timings=doc.get("timings", {}), attempts=doc.get("attempts", []),
                   files=doc.get("files", []), command=doc.get("command", []), started=doc.get("started", ""),
                   finished=doc.get("finished", ""), wall_s=doc.get("wall_s", 0.0),
                   results_dir=doc.get("results_dir"))

    def hang_lines(self) -> list[str]:
        """A hang no signature named: its title, then each CPU that is not
        idle or in user mode, or each task asleep and its kernel stack."""
        h = self.hang or {}
        return [f"title: {h.get('title') or 'none (no CPU stuck)'}"] + [
            f"waits: {f}" for f in (self.waits or {}).get("findings", [])] + [
            sleeping.task_text(t) for t in h.get("tasks", [])] + [
            cpu_state.describe(c) for c in h.get("cpus", []) if c.get("state") not in ("idle", "user")]

    @property
    def passes_before_hang(self) -> int:
        """Passes over the path before the bug showed: the first stall past
        the threshold when the reproducer measured one, else the count at the hang."""
        first = self.evidence.first_stall_count
        return first if first is not None else self.evidence.count or 0


def failed(reason: str, verdict: VerdictKind = VerdictKind.ERROR, kind: OutcomeKind = OutcomeKind.ERROR,
           **known) -> RunRecord:
    """A record of a run that never reached a guest (a bad spec, a kernel that
    could not be fetched): the verdict and its reason, and what is known."""
    return RunRecord(id=known.pop("id", ""), verdict=Verdict(verdict, reason), outcome=Outcome(kind, reason, 0.0),
                     kernel=known.pop("kernel", {}), reproducer=known.pop("reproducer", {}), vm=known.pop("vm", {}),
                     **known)
