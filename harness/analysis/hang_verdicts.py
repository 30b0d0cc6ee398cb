# SPDX-License-Identifier: GPL-2.0
"""How each kind of hang is judged (hang_kinds.py names which judge a kind
gets): from the CPUs' classes, a sleeping task's stack, a stuck process's
threads, or the reproducer's own latency measurement."""
from __future__ import annotations

from harness.analysis import classify, cpu_state, retry, sleeping
from harness.analysis.classify import Role
from harness.analysis.findings import Findings
from harness.analysis.outcome import OutcomeKind
from harness.analysis.retry import Retry
from harness.analysis.verdict import Verdict, VerdictKind


def _what(f: Findings) -> str:
    return f"{f.outcome.kind}: {f.outcome.detail}"


def measured_stall(f: Findings) -> Verdict:
    """A latency past its path's threshold, as often as the path needs."""
    stall = f.stall
    assert stall is not None
    return Verdict(VerdictKind.VULNERABLE, f"{_what(f)}; measured {stall['text']}", summary=stall["text"],
                   confidence="high", signature=stall["signature"], title=stall["signature"])


def host_noise(f: Findings) -> Verdict:
    """A latency past its threshold only while the host kept a vCPU waiting
    as long: the host's, perhaps, not the kernel's. Retried; never VULNERABLE."""
    assert f.stall is not None
    worst = f.stall["suspect"][0]
    took = f"{_what(f)}: {worst['title']} took {worst['max_ms']:.1f} ms (threshold {worst['threshold_ms']:g} ms)"
    if worst["host_wait_ms"] is None:  # fails closed: a stall the host may have made is never the kernel's
        return Verdict(VerdictKind.INCONCLUSIVE, f"{took}, but the host-wait gauge read nothing then: whether "
                       "the host kept a vCPU waiting as long cannot be told", retry=Retry.HOST_DELAY)
    return Verdict(VerdictKind.INCONCLUSIVE, f"{took}, but a vCPU waited {worst['host_wait_ms']:.0f} ms for "
                   "a host CPU within as long: the host's delay, not necessarily the kernel's", retry=Retry.HOST_DELAY)


def different_hang(f: Findings, summary: str, title: str) -> Verdict:
    """A reproducer with signatures of its own hung some other way: not its bug."""
    return Verdict(VerdictKind.INCONCLUSIVE, f"{_what(f)}; a different hang than this reproducer's signatures "
                   f"describe: {summary}", summary=f"a different hang: {title}", title=title)


def unnamed(f: Findings, hang: cpu_state.Hang | sleeping.SleepingHang, how: str, confidence: str) -> Verdict:
    """A hang no signature names: the finding of a reproducer with no
    signatures of its own, a different hang for one with."""
    if f.own_bug:
        return different_hang(f, hang.summary(), hang.title)
    return Verdict(VerdictKind.VULNERABLE, f"{_what(f)}; no signature names it: {how}",
                   summary=hang.summary(), confidence=confidence, title=hang.title)


def sleeping_task(f: Findings) -> Verdict:
    """A task asleep for good: named by the signature its kernel stack
    matched, else titled from that stack as an unnamed hang."""
    hang = f.hang
    if not isinstance(hang, sleeping.SleepingHang):
        return Verdict(VerdictKind.INCONCLUSIVE, f"{_what(f)}; the agent named no task")
    sig = hang.signature
    if sig is None:
        return unnamed(f, hang, "titled from its kernel stack", "high")
    if f.own_bug and sig.bug not in ("", f.own_bug):
        return different_hang(f, hang.summary(), sig.title)
    return Verdict(VerdictKind.VULNERABLE, _what(f), summary=hang.summary(), confidence="high",
                   signature=sig.name, title=sig.title)


def int3_crash(f: Findings, c: classify.CpuClass) -> Verdict:
    """A CPU that oopsed on an int3 in the kernel's text and panicked, under
    an accelerator where TCG's text-patching race cannot be: the kernel
    crashed, as the same oops on the console says (decide.py); titled by
    the code the int3 interrupted."""
    trapped = next((classify.base_name(fr.get("function", "")) for fr in c.frames if fr.get("interrupted")), "")
    title = f"Oops: int3 in {trapped}" if trapped else "Oops: int3"
    said = f"kernel oops: {title}, then a panic (CPU{c.cpu}; {retry.no_race_under(f.accel)})"
    return Verdict(VerdictKind.CRASHED, f"{_what(f)}; {said}", summary=said, confidence="high", title=title)


def cpus(f: Findings) -> Verdict:
    """A freeze or stuck progress, judged by every vCPU's class: a culprit
    signature's, a measured stall, an emulator fault, or a culprit the CPUs'
    states name (cpu_state.py) when no signature does."""
    classes = f.classes
    if not classes:
        if f.stalled:
            return measured_stall(f)
        if any(e.startswith("qmp:") for e in f.debug_errors):  # QEMU answered neither its gdbstub nor QMP
            return Verdict(VerdictKind.ERROR, f"{_what(f)}; QEMU did not answer QMP or its gdbstub, so no vCPU "
                           f"could be read ({'; '.join(f.debug_errors)})")
        return Verdict(VerdictKind.INCONCLUSIVE, f"{_what(f)}; CPU state could not be read "
                       f"({'; '.join(f.debug_errors) or 'no samples'})")
    summary = classify.summarize(classes)
    culprits = [c for c in classes if c.signature.role == Role.CULPRIT]
    if culprits:
        sig = culprits[0].signature
        if f.own_bug and sig.bug not in ("", f.own_bug):
            return different_hang(f, summary, sig.title)
        all_samples = all(c.seen.get(c.signature.name, 0) == c.samples for c in culprits)
        victims = any(c.signature.role == Role.VICTIM for c in classes)
        confidence = "high" if all_samples and (victims or all(c.stuck for c in culprits)) else "medium"
        if f.stall is not None and f.stall.get("frozen_s"):
            summary += (f" (stalled at least {f.stall['frozen_s']:.1f} s: frozen from the last sign of life to the "
                        "last sample)")
        return Verdict(VerdictKind.VULNERABLE, _what(f), summary=summary, confidence=confidence,
                       signature=sig.name, title=sig.title)
    if f.stalled:
        return measured_stall(f)
    if (fault := classify.emulator_fault(classes)) is not None:
        if retry.text_patching_race(f.accel):
            return Verdict(VerdictKind.ERROR, f"emulator fault: {_what(f)}; {summary}", retry=Retry.EMULATOR_FAULT)
        if fault.signature.shape_alone:  # a panic over an int3 oops where no race patches the text: the kernel's
            return int3_crash(f, fault)
    hang = f.hang
    if isinstance(hang, cpu_state.Hang) and hang.culprits:
        waited_on = any(c.waits_for for c in hang.cpus)
        return unnamed(f, hang, "classified from the CPUs' states",
                       "medium" if waited_on or f.outcome.kind == OutcomeKind.FREEZE else "low")
    return Verdict(VerdictKind.INCONCLUSIVE, f"{_what(f)}; no CPU matched a culprit signature"
                   + (f" ({summary})" if summary else "") + (f"; {hang.summary()}" if hang else ""), summary="")


def process(f: Findings) -> Verdict:
    """A user-space reproducer stuck while the kernel heartbeats on: named
    by its threads, never by the vCPUs. A deadlock cycle among them is the
    finding of a program with no signatures of its own."""
    analysis = f.process.analysis if f.process else None
    if analysis is None:
        error = f.process.error if f.process else "not dumped"
        return Verdict(VerdictKind.INCONCLUSIVE, f"{_what(f)}; no thread dump ({error})")
    if analysis.signature is None and analysis.cycles:
        title = analysis.title()
        if f.own_bug:
            return different_hang(f, analysis.summary(), title)
        return Verdict(VerdictKind.VULNERABLE, f"{_what(f)}; the kernel stayed responsive",
                       summary=analysis.summary(), confidence="high", title=title)
    if analysis.signature is None:
        return Verdict(VerdictKind.INCONCLUSIVE, f"{_what(f)}; {analysis.summary()}")
    owner_from = analysis.group.owner_from if analysis.group else ""
    return Verdict(VerdictKind.VULNERABLE, f"{_what(f)}; the kernel stayed responsive",
                   summary=analysis.summary(), signature=analysis.signature.name, title=analysis.title(),
                   confidence="high" if owner_from == "__owner" or analysis.queued else "medium")


def stuck(f: Findings) -> Verdict:
    """Progress stopped while heartbeats went on: the process's threads when
    they were read (a user's program with no culprit CPU), else the CPUs."""
    return process(f) if f.process is not None else cpus(f)


def stall(f: Findings) -> Verdict:
    """The reproducer's measurement passed a threshold and the run was ended for its histograms."""
    if f.stalled:
        return measured_stall(f)
    if f.suspect:
        return host_noise(f)
    # cut short at the first measurement past a threshold, before its path
    # had the stalls it needs: another run decides
    return Verdict(VerdictKind.INCONCLUSIVE, f"{f.outcome.detail}, but its counters do not confirm it",
                   retry=Retry.CUT_SHORT)


def stuck_text(c: dict) -> str:
    """A candidate hang as a verdict says it: 'INFO: task hung in x (pid 177):
    stuck 45 s, then went on (a hang here after 280 s; syzbot's detector 140 s)'."""
    who = f" ({c['who']})" if c.get("who") else ""
    held = f", {c['held_s']:.0f} s of it the host's" if c.get("held_s", 0) >= 1 else ""
    what = {"hang": "", "went on": ", then went on", "open": ", still so when the run ended"}.get(c["state"], "")
    return (f"{c['title']}{who}: stuck {c['stuck_s']:.0f} s{held}{what} (a hang here after {c['hang_s']:g} s; "
            f"syzbot's detector {c['syzbot_s']:g} s)")


def report_that_lasted(f: Findings) -> Verdict | None:
    """A kernel report whose task or CPU stayed stuck for syzbot's time
    (candidates.py) is the run's answer however the run ended: the host's
    bound may end a run whose kill was held for it a moment before the watch
    would have, and a run may end at its time-up as the report turns into a
    hang. None where no report lasted."""
    hang = next((c for c in f.candidates if c.get("state") == "hang"), None)  # the first to be one (to_json)
    if hang is None:
        return None
    return Verdict(VerdictKind.VULNERABLE, f"the kernel's own detector reported it before the run ended "
                   f"({_what(f)}): {stuck_text(hang)}",
                   summary=f"the kernel reported: {hang['title']}", confidence="high", title=hang["title"])


def kernel_report(f: Findings) -> Verdict:
    """The kernel's own detector reported a hang (a hung task, a soft lockup,
    an RCU stall) and what it reported stayed stuck for syzbot's time (candidates.py),
    in a run whose environment lets its detectors judge."""
    title = f.outcome.detail
    hang = next((c for c in f.candidates if c.get("state") == "hang"), None)
    said = f": {stuck_text(hang)}" if hang else ""
    return Verdict(VerdictKind.VULNERABLE, f"{_what(f)}; the kernel's own detector reported it{said}",
                   summary=f"the kernel reported: {title}", confidence="high", title=title)
