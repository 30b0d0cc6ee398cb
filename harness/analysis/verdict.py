# SPDX-License-Identifier: GPL-2.0
"""Turns what a run observed into one verdict (the contract in ARCHITECTURE.md).

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

import math
from dataclasses import dataclass, field
from enum import StrEnum

from harness.analysis import classify, cpu_state, sleeping, thread_hang
from harness.analysis.classify import Role
from harness.analysis.outcome import OutcomeKind
from harness.base.reproducers import Reproducer
from harness.analysis.ktap import Ktap
from harness.analysis.outcome import Outcome

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
    retryable: bool = False
    p_miss: dict = field(default_factory=dict)
    # what was found, titled as syzbot titles it ("hang in cpu_clock_event_stop",
    # a signature's title, a crash's): "the same hang" across runs and bisect steps
    title: str = ""

    def __post_init__(self) -> None:
        self.verdict = VerdictKind(self.verdict)

    @property
    def exit_code(self) -> int:
        return self.verdict.exit_code

    def line(self) -> str:
        """'VULNERABLE: hrtimer_cancel self-deadlock on CPU1; ...'"""
        return f"{self.verdict}: {self.summary or self.reason}"


def from_stalls(outcome: Outcome, stall: dict) -> Verdict:
    return Verdict(VerdictKind.VULNERABLE, f"{outcome.kind}: {outcome.detail}; measured {stall['text']}",
                   summary=stall["text"], confidence="high", signature=stall["signature"], title=stall["signature"])


def host_noise(outcome: Outcome, stall: dict) -> Verdict:
    """A latency past its threshold only while the host kept a vCPU waiting
    as long: the host's, perhaps, not the kernel's. Retried; never VULNERABLE."""
    worst = stall["suspect"][0]
    return Verdict(VerdictKind.INCONCLUSIVE, f"{outcome.kind}: {worst['title']} took {worst['max_ms']:.1f} ms "
                   f"(threshold {worst['threshold_ms']:g} ms), but a vCPU waited {worst['host_wait_ms']:.0f} ms for "
                   "a host CPU within as long: the host's delay, not necessarily the kernel's", retryable=True)


def different_hang(outcome: Outcome, summary: str, title: str) -> Verdict:
    """A reproducer with signatures of its own hung some other way: not its bug."""
    return Verdict(VerdictKind.INCONCLUSIVE, f"{outcome.kind}: {outcome.detail}; a different hang than this "
                   f"reproducer's signatures describe: {summary}", summary=f"a different hang: {title}", title=title)


def from_unnamed(outcome: Outcome, hang: cpu_state.Hang | sleeping.SleepingHang, own_bug: str, how: str,
                 confidence: str) -> Verdict:
    """A hang no signature names: the finding of a reproducer with no
    signatures of its own, a different hang for one with."""
    if own_bug:
        return different_hang(outcome, hang.summary(), hang.title)
    return Verdict(VerdictKind.VULNERABLE, f"{outcome.kind}: {outcome.detail}; no signature names it: {how}",
                   summary=hang.summary(), confidence=confidence, title=hang.title)


def from_sleeping(outcome: Outcome, hang: sleeping.SleepingHang, own_bug: str) -> Verdict:
    """A task asleep for good: named by the signature its kernel stack
    matched, else titled from that stack as an unnamed hang."""
    sig = hang.signature
    if sig is None:
        return from_unnamed(outcome, hang, own_bug, "titled from its kernel stack", "high")
    if own_bug and sig.bug not in ("", own_bug):
        return different_hang(outcome, hang.summary(), sig.title)
    return Verdict(VerdictKind.VULNERABLE, f"{outcome.kind}: {outcome.detail}", summary=hang.summary(),
                   confidence="high", signature=sig.name, title=sig.title)


def from_hang(outcome: Outcome, classes: list[classify.CpuClass], debug_errors: list[str],
              stall: dict | None = None, hang: cpu_state.Hang | None = None, own_bug: str = "") -> Verdict:
    """hang: the CPUs' states, for a hang no culprit signature names; own_bug:
    the reproducer's name when it has signatures of its own ("" when it has
    none, and any hang it makes is its finding)."""
    stalled = stall is not None and bool(stall["stalled"])
    if not classes:
        if stalled:
            return from_stalls(outcome, stall)
        if any(e.startswith("qmp:") for e in debug_errors):  # QEMU answered neither its gdbstub nor QMP
            return Verdict(VerdictKind.ERROR, f"{outcome.kind}: {outcome.detail}; QEMU did not answer QMP or its "
                           "gdbstub, "
                           f"so no vCPU could be read ({'; '.join(debug_errors)})")
        return Verdict(VerdictKind.INCONCLUSIVE, f"{outcome.kind}: {outcome.detail}; CPU state could not be read "
                       f"({'; '.join(debug_errors) or 'no samples'})")
    summary = classify.summarize(classes)
    culprits = [c for c in classes if c.signature.role == Role.CULPRIT]
    if culprits:
        sig = culprits[0].signature
        if own_bug and sig.bug not in ("", own_bug):
            return different_hang(outcome, summary, sig.title)
        all_samples = all(c.seen.get(c.signature.name, 0) == c.samples for c in culprits)
        victims = any(c.signature.role == Role.VICTIM for c in classes)
        confidence = "high" if all_samples and (victims or all(c.stuck for c in culprits)) else "medium"
        if stall is not None and stall.get("frozen_s"):
            summary += f" (stalled at least {stall['frozen_s']:.1f} s: frozen from the last sign of life to the last sample)"
        return Verdict(VerdictKind.VULNERABLE, f"{outcome.kind}: {outcome.detail}", summary=summary,
                       confidence=confidence, signature=sig.name, title=sig.title)
    if stalled:
        return from_stalls(outcome, stall)
    if any(c.signature.role == Role.INFRA for c in classes):
        return Verdict(VerdictKind.ERROR, f"emulator fault: {outcome.kind}: {outcome.detail}; {summary}",
                       retryable=True)
    if hang is not None and hang.culprits:
        waited_on = any(c.waits_for for c in hang.cpus)
        return from_unnamed(outcome, hang, own_bug, "classified from the CPUs' states",
                            "medium" if waited_on or outcome.kind == OutcomeKind.FREEZE else "low")
    return Verdict(VerdictKind.INCONCLUSIVE, f"{outcome.kind}: {outcome.detail}; no CPU matched a culprit signature"
                   + (f" ({summary})" if summary else "") + (f"; {hang.summary()}" if hang else ""), summary="")


def from_process_hang(outcome: Outcome, analysis: thread_hang.Analysis | None, error: str,
                      own_bug: str = "") -> Verdict:
    """A user-space reproducer stuck while the kernel heartbeats on: named
    by its threads, never by the vCPUs. A deadlock cycle among them is the
    finding of a program with no signatures of its own."""
    if analysis is None:
        return Verdict(VerdictKind.INCONCLUSIVE, f"{outcome.kind}: {outcome.detail}; no thread dump ({error})")
    if analysis.signature is None and analysis.cycles:
        title = analysis.title()
        if own_bug:
            return different_hang(outcome, analysis.summary(), title)
        return Verdict(VerdictKind.VULNERABLE, f"{outcome.kind}: {outcome.detail}; the kernel stayed responsive",
                       summary=analysis.summary(), confidence="high", title=title)
    if analysis.signature is None:
        return Verdict(VerdictKind.INCONCLUSIVE, f"{outcome.kind}: {outcome.detail}; {analysis.summary()}")
    owner_from = analysis.group.owner_from if analysis.group else ""
    return Verdict(VerdictKind.VULNERABLE, f"{outcome.kind}: {outcome.detail}; the kernel stayed responsive",
                   summary=analysis.summary(), signature=analysis.signature.name, title=analysis.title(),
                   confidence="high" if owner_from == "__owner" or analysis.queued else "medium")


def program_failure(ktap: Ktap, tail: int = 12) -> Verdict | None:
    """A program that knows nothing of kstall failed on its own: the agent's
    result says it exited non-zero, or the program's own TAP has a failed test.
    FAILED, with the end of its output; never a hang."""
    final = ktap.results[-1]
    own = [r for r in ktap.results[:-1] if not r["ok"] and r["directive"] not in ("SKIP", "TODO")]
    if final["ok"] and not own:
        return None
    why = final["reason"] if not final["ok"] else f"its test {own[0]['number']} {own[0]['name']} failed"
    output = [line for line in ktap.lines if not line.startswith(("# result ", "KTAP version", "1.."))][-tail:]
    return Verdict(VerdictKind.FAILED, f"the program failed on its own, with no hang: {why}"
                   + ("; its last output:\n  " + "\n  ".join(output) if output else ""),
                   summary=f"the program failed: {why}")


def decide(outcome: Outcome, ktap: Ktap, count: int, repro: Reproducer, classes: list[classify.CpuClass] | None,
           debug_errors: list[str], pmiss: dict, report_reason: str = "", stall: dict | None = None,
           process: tuple[thread_hang.Analysis | None, str] | None = None, pmiss_target: float = 1.0,
           hang: cpu_state.Hang | sleeping.SleepingHang | None = None, own_bug: str = "") -> Verdict:
    """stall: stall evidence (harness/analysis/latency.py evidence()) for reproducers
    that measure latencies; a stall past the threshold is VULNERABLE.
    process: (thread analysis, error) for reproducers whose hang is a process's.
    hang, own_bug: see from_hang."""
    kind = outcome.kind
    if kind == OutcomeKind.INFRA:
        return Verdict(VerdictKind.ERROR, f"emulator fault: {report_reason or outcome.detail} ({outcome.detail})",
                       retryable=True)
    if kind == OutcomeKind.BOOT_FAILURE:
        return Verdict(VerdictKind.ERROR, f"boot failure: {outcome.detail}")
    if kind == OutcomeKind.AGENT_ERROR:
        return Verdict(VerdictKind.ERROR, f"the guest agent could not run: {outcome.detail}")
    if kind in (OutcomeKind.PANIC, OutcomeKind.OOPS):
        if outcome.detail.startswith("Attempted to kill init"):
            return Verdict(VerdictKind.ERROR, f"the guest agent died: {outcome.detail}")
        return Verdict(VerdictKind.CRASHED, f"kernel {kind}: {outcome.detail}",
                       summary=f"kernel {kind}: {outcome.detail}", confidence="high", title=outcome.detail)
    if kind == OutcomeKind.STUCK and process is not None:
        return from_process_hang(outcome, *process, own_bug=own_bug)
    if kind == OutcomeKind.SLEEPING and isinstance(hang, sleeping.SleepingHang):
        return from_sleeping(outcome, hang, own_bug)
    if kind.hang:
        return from_hang(outcome, classes or [], debug_errors, stall, hang, own_bug)
    if kind == OutcomeKind.STALL:
        if stall and stall["stalled"]:
            return from_stalls(outcome, stall)
        if stall and stall.get("suspect"):
            return host_noise(outcome, stall)
        # cut short at the first measurement past a threshold, before its
        # path had the stalls it needs: another run decides
        return Verdict(VerdictKind.INCONCLUSIVE, f"{outcome.detail}, but its counters do not confirm it",
                       retryable=True)
    if kind in (OutcomeKind.QEMU_EXIT, OutcomeKind.QEMU_STOPPED):
        return Verdict(VerdictKind.ERROR, outcome.detail)
    if kind == OutcomeKind.TIMEOUT:
        return Verdict(VerdictKind.ERROR, f"{outcome.detail} without a verdict")
    if kind == OutcomeKind.INTERRUPTED:
        return Verdict(VerdictKind.ERROR, outcome.detail)
    # done: the reproducer ran to its end
    result = ktap.results[-1] if ktap.results else None
    if result is None and not ktap.lines:  # it never ran: the agent's doing, or the channel's; retried
        return Verdict(VerdictKind.ERROR, f"the reproducer printed nothing ({outcome.detail})", retryable=True)
    if result is None:
        return Verdict(VerdictKind.ERROR, f"reproducer reported no KTAP result ({outcome.detail})")
    if result["directive"] == "SKIP":
        return Verdict(VerdictKind.INCONCLUSIVE, f"reproducer skipped: {result['reason']}")
    if repro.generic and (failed := program_failure(ktap)):
        return failed
    if not result["ok"]:
        return Verdict(VerdictKind.INCONCLUSIVE, f"reproducer failed: {result['reason'] or outcome.detail}")
    if stall and stall["stalled"]:
        return from_stalls(outcome, stall)
    if stall and stall.get("suspect"):
        return host_noise(outcome, stall)
    if count < repro.min_count:
        what = "not exercised" if count == 0 else f"exercised only {count} times (< {repro.min_count})"
        return Verdict(VerdictKind.INCONCLUSIVE, f"path {what}")
    log10 = pmiss.get("p_miss_log10")
    if log10 is not None and log10 > math.log10(pmiss_target):
        return Verdict(VerdictKind.INCONCLUSIVE, f"{count} {repro.count_name} without a hang, but {pmiss['text']} is "
                       f"above the target {pmiss_target:g} (the run ended before it got there: --duration?)",
                       p_miss=pmiss)
    return Verdict(VerdictKind.NOT_REPRODUCED,
                   f"{count} {repro.count_name} without a hang; {pmiss.get('text', '')}",
                   summary=f"{count} {repro.count_name}, {pmiss.get('text', 'P(miss) unknown')}",
                   confidence="high" if (pmiss.get("p_miss_log10") or 0) <= -6 else "low", p_miss=pmiss)
