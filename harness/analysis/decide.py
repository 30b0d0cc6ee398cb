# SPDX-License-Identifier: GPL-2.0
"""One verdict from what an attempt found (findings.py): a hang by its kind's
judge (hang_kinds.py), every other ending here. The verdicts' meanings are in
verdict.py."""
from __future__ import annotations

from typing import Callable

from harness.analysis import console, cpu_state, hang_kinds, hang_verdicts, pmiss as pmiss_module, retry, sleeping, \
    syzbot
from harness.analysis.classify import base_name
from harness.analysis.findings import Findings
from harness.analysis.ktap import Ktap
from harness.analysis.outcome import NO_AGENT, OutcomeKind
from harness.analysis.reach import HOST, KERNEL, TEST_DEVICE, need_kind
from harness.analysis.retry import Retry
from harness.analysis.verdict import Verdict, VerdictKind
from harness.base import paths
from harness.base.syzkaller import titles_of
from harness.base.untrusted import num


def decide(f: Findings) -> Verdict:
    way = hang_kinds.way_for(f.outcome.kind, f.repro)
    v = way.judge(f) if way is not None else ENDINGS.get(f.outcome.kind, completed)(f)
    return against_syzbot(v, f) if f.repro.syzbot else v


def run_hangs(v: Verdict, f: Findings) -> list[syzbot.Hang]:
    """The hangs a run found, as syzbot.py compares them: the verdict's (with
    the stack it rests on), then every kernel report's."""
    frames: tuple[str, ...] = ()
    if isinstance(f.hang, sleeping.SleepingHang) and f.hang.tasks:
        frames = tuple(f.hang.tasks[0]["kstack"])
    elif isinstance(f.hang, cpu_state.Hang):
        frames = tuple(base_name(fr.get("function", "")) for c in f.classes for fr in c.frames)
    ours = [syzbot.Hang(v.title, frames)] if v.title else []
    return ours + [syzbot.report_hang(r) for r in f.reports if r.get("kind") in console.TITLED_KINDS
                   and not r.get("before_program") and r.get("stuck", {}).get("state") != "went on"]


def against_syzbot(v: Verdict, f: Findings) -> Verdict:
    """A syzkaller reproducer's hang or crash, said against syzbot's title:
    reproduced (and how it matched), or a different one."""
    theirs = titles_of(f.repro.syzbot)
    if v.verdict not in (VerdictKind.VULNERABLE, VerdictKind.CRASHED) or not theirs:
        return v
    m = syzbot.match(theirs, run_hangs(v, f))
    if m is not None:
        v.matched = {"how": m.how, "theirs": m.theirs, "ours": m.ours}
        v.reason = f"{m.text()}; {v.reason}"
        v.summary = m.text() + (f": {v.summary}" if v.summary and m.how != "title" else "")
    elif v.verdict == VerdictKind.VULNERABLE:
        v.reason = f"a different hang than syzbot's \"{theirs[0]}\"; {v.reason}"
        v.summary = f"a different hang: {v.title or v.summary}"
    return v


def _emulator_fault(f: Findings) -> Verdict:
    # the report that ended the run (its title is the outcome's), not an earlier one
    infra: dict = next((r for r in f.reports if r.get("kind") == OutcomeKind.INFRA
                        and r.get("title") == f.outcome.detail), {})
    if console.races(infra.get("name", "")) and not retry.text_patching_race(f.accel):
        # the oops TCG's race makes, where that race cannot be: the kernel's own
        said = f"kernel oops: {f.outcome.detail}"
        return Verdict(VerdictKind.CRASHED, f"{said} ({retry.no_race_under(f.accel)})",
                       summary=said, confidence="high", title=f.outcome.detail)
    why = f"{f.report_reason} ({f.outcome.detail})" if f.report_reason else f.outcome.detail
    return Verdict(VerdictKind.ERROR, f"emulator fault: {why}", retry=Retry.EMULATOR_FAULT)


def _crash(f: Findings) -> Verdict:
    kind, detail = f.outcome.kind, f.outcome.detail
    if detail.startswith("Attempted to kill init"):
        return Verdict(VerdictKind.ERROR, f"the guest agent died: {detail}")
    # a panic's title names its kind already, as syzbot's do ("kernel panic: ...")
    said = detail if detail.startswith(f"kernel {kind}") else f"kernel {kind}: {detail}"
    if OOM_PANIC in detail and (starved := _ran_out_of_memory(f, said)) is not None:
        return starved
    return Verdict(VerdictKind.CRASHED, said, summary=said, confidence="high", title=detail)


# out_of_memory() found no task it may kill: the guest's memory ran out, and
# the program it ran (syzkaller's OOM-protected parent, its children killed
# one after another) was starved, not crashed by a bug
OOM_PANIC = "System is deadlocked on memory"


def _ran_out_of_memory(f: Findings, said: str) -> Verdict | None:
    """The OOM killer's panic after the agent's account saw the guest starve:
    INCONCLUSIVE with the events, like any starved run (the e2e
    starved_oom.c program ends either way, beside a busy host). Not when
    syzbot titled the bug with that panic: then it is the bug."""
    st = f.starvation
    if st is None or not st.events or any(OOM_PANIC in t for t in titles_of(f.repro.syzbot)):
        return None
    # the panic is in why: a report's cell (starved (WHY: event)) says how the run ended
    st.mostly, st.why = True, f"starved for {st.starved_s} of {st.seconds} s, then {said}"
    return Verdict(VerdictKind.INCONCLUSIVE, f"the program did not run as intended: the guest ran out of memory "
                   f"with no task left that the OOM killer may kill ({said}): {st.text()}",
                   summary=f"{st.why} ({st.events[0]})")


def _timeout(f: Findings) -> Verdict:
    """The host's bound ended a run the guest never concluded. Where the
    agent's running account shows the kernel starving the guest, that is why
    (its program time-boxed, but the agent held up in reclaim or the OOM
    killer's loop): no evidence either way, INCONCLUSIVE with the events,
    not kstall's error."""
    st = f.starvation
    if (lasted := hang_verdicts.report_that_lasted(f)) is not None:
        return lasted
    if still := [c for c in f.candidates if c.get("state") == "open"]:  # neither a hang nor a slow wait yet
        return Verdict(VerdictKind.INCONCLUSIVE, f"the run did not end in its time ({f.outcome.detail}) with the "
                       f"kernel's report still open, not yet a hang: "
                       f"{'; '.join(map(hang_verdicts.stuck_text, still))}",
                       summary=f"never ended, still stuck: {still[0]['title']}")
    if (st is None or not st.events) and f.silences:
        return Verdict(VerdictKind.INCONCLUSIVE, f"the run did not end in its time ({f.outcome.detail}): "
                       f"{silences_text(f.silences)}", summary=f"never ended, {silences_text(f.silences, short=True)}")
    if st is None or not st.events:
        return Verdict(VerdictKind.ERROR, f"{f.outcome.detail} without a verdict")
    st.mostly, st.why = True, "the guest never ended the run"  # the record and its reports say starved
    return Verdict(VerdictKind.INCONCLUSIVE, f"the run did not end in its time ({f.outcome.detail}), the guest "
                   f"starved: {st.text()}", summary=f"starved, never ended ({st.events[0]})")


def silences_text(silences: list[dict], short: bool = False) -> str:
    """The looks the guest went on after: how many, and what the CPUs did
    at the last (a timer storm keeps them moving in interrupt context, the
    heartbeats seconds apart; a CPU stuck for a while no kernel detector
    reported)."""
    n, last = len(silences), silences[-1]
    said = f"the guest fell silent {n} time{'s' * (n != 1)}"
    if short:
        return said
    return f"{said}, and went on after each look (the last, {last['after_s']:g} s in, {last['what']}: {last['cpus']})"


def _error(prefix: str = "", suffix: str = "") -> Callable[[Findings], Verdict]:
    return lambda f: Verdict(VerdictKind.ERROR, f"{prefix}{f.outcome.detail}{suffix}")


ENDINGS: dict[OutcomeKind, Callable[[Findings], Verdict]] = {
    OutcomeKind.INFRA: _emulator_fault,
    OutcomeKind.BOOT_FAILURE: lambda f: Verdict(VerdictKind.ERROR, f"boot failure: {f.outcome.detail}",
                                                retry=Retry.SILENT_BOOT if f.outcome.detail.startswith(NO_AGENT)
                                                else None),
    OutcomeKind.AGENT_ERROR: _error("the guest agent could not run: "),
    OutcomeKind.PANIC: _crash,
    OutcomeKind.OOPS: _crash,
    OutcomeKind.QEMU_EXIT: _error(),
    OutcomeKind.QEMU_STOPPED: _error(),
    OutcomeKind.TIMEOUT: _timeout,
    OutcomeKind.INTERRUPTED: _error(),
}


def program_failure(ktap: Ktap, tail: int = 12) -> Verdict | None:
    """A program that knows nothing of kstall failed on its own: the agent's
    result says it exited non-zero, or the program's own TAP has a failed test.
    FAILED, with the end of its output; never a hang."""
    final = ktap.results[-1]
    own = [r for r in ktap.program_results + ktap.results[:-1]
           if not r["ok"] and r["directive"] not in ("SKIP", "TODO")]
    if final["ok"] and not own:
        return None
    why = final["reason"] if not final["ok"] else f"its test {own[0]['number']} {own[0]['name']} failed"
    output = [line for line in ktap.lines if not line.startswith(("# result ", "KTAP version", "1.."))][-tail:]
    return Verdict(VerdictKind.FAILED, f"the program failed on its own, with no hang: {why}"
                   + ("; its last output:\n  " + "\n  ".join(output) if output else ""),
                   summary=f"the program failed: {why}")


def unmet_requirements(f: Findings) -> list[str]:
    """What a run without a hang still lacks for NOT_REPRODUCED: passes over
    the path, and its P(miss) target (an unknown P(miss) meets a target the
    user gave only by being calibrated)."""
    repro, count, pmiss = f.repro, f.count, f.pmiss
    out = []
    if count < repro.min_count:
        out.append("path not exercised" if count == 0 else f"path exercised only {count} times (< {repro.min_count})")
    reached = pmiss_module.reaches(pmiss, f.pmiss_target)
    if reached is False:
        out.append(f"{count} {repro.count_name} without a hang, but {pmiss['text']} is above the target "
                   f"{f.pmiss_target:g} (the run ended before it got there: --duration?)")
    elif reached is None and f.pmiss_given and pmiss.get("host_busy") is not None:
        out.append(f"{count} {repro.count_name} without a hang, but {pmiss['text']}, so --pmiss "
                   f"{f.pmiss_target:g} cannot be checked")
    elif reached is None and f.pmiss_given:
        spec = repro.source or repro.program or repro.name  # what calibrate takes: a user's file by its path
        out.append(f"P(miss) unknown: calibrate first ({paths.COMMAND} calibrate KERNEL {spec} --write, on a "
                   f"kernel known to be affected), so that --pmiss {f.pmiss_target:g} can be checked")
    return out


def completed(f: Findings) -> Verdict:
    """The reproducer ran to its end (or the watch saw no hang): its result,
    its measurements, and whether it ran the path often enough."""
    ktap, repro, count, pmiss = f.ktap, f.repro, f.count, f.pmiss
    result = ktap.results[-1] if ktap.results else None
    if (lasted := hang_verdicts.report_that_lasted(f)) is not None:  # whatever the program said, or not
        return lasted
    if result is None and not ktap.lines:  # it never ran: the agent's doing, or the channel's; retried
        return Verdict(VerdictKind.ERROR, f"the reproducer printed nothing ({f.outcome.detail})", retry=Retry.SILENT)
    if result is None:
        return Verdict(VerdictKind.ERROR, f"reproducer reported no KTAP result ({f.outcome.detail})")
    if result["directive"] == "SKIP":
        return Verdict(VerdictKind.INCONCLUSIVE, f"reproducer skipped: {result['reason']}")
    if repro.timebox:
        return timeboxed(f)
    if repro.generic and (failed := program_failure(ktap)):
        return failed
    if not result["ok"]:
        return Verdict(VerdictKind.INCONCLUSIVE, f"reproducer failed: {result['reason'] or f.outcome.detail}")
    if f.stalled:
        return hang_verdicts.measured_stall(f)
    if f.suspect:
        return hang_verdicts.host_noise(f)
    unmet = unmet_requirements(f)
    if unmet:  # every one of them, not the first; with the P(miss) when that is one
        about_pmiss = any(not u.startswith("path ") for u in unmet)
        return short_of_passes(Verdict(VerdictKind.INCONCLUSIVE, "; ".join(unmet),
                                       p_miss=pmiss if about_pmiss else {}), f)
    ran = f"{count} {repro.count_name} without a hang{f' ({f.ended_by})' if f.ended_by else ''}"
    if (starved := starved_run(f, ran)) is not None:
        return starved
    return weakened(Verdict(VerdictKind.NOT_REPRODUCED, f"{ran}; {pmiss.get('text', '')}",
                            summary=f"{count} {repro.count_name}, {pmiss.get('text', 'P(miss) unknown')}",
                            confidence="high" if (pmiss.get("p_miss_log10") or 0) <= -6 else "low", p_miss=pmiss), f)


def short_of_passes(v: Verdict, f: Findings) -> Verdict:
    """A run its time ended short of its passes, where the host's delay
    explains the shortfall (at the rate its vCPUs had while they ran, the
    time would have given them all), is the host's doing, not the kernel's:
    said so, and tried again. Not a run that did the passes it was asked
    for (--count below the minimum), nor one the kernel starved."""
    share = f.host_share
    by_time = not (f.count_target and f.count >= f.count_target)
    starved = f.starvation is not None and f.starvation.mostly
    if by_time and not starved and 0 < f.count < f.repro.min_count and share is not None and 0 < share < 1 \
            and f.count / (1 - share) >= f.repro.min_count:
        v.reason += f" (the host kept the vCPUs waiting {share:.0%} of the run: its delay, not the kernel's)"
        v.retry = Retry.HOST_DELAY
    return v


def starved_run(f: Findings, ran: str) -> Verdict | None:
    """A run the kernel starved for most of its time (starvation.py) is no
    evidence: INCONCLUSIVE, with every event that starved it."""
    st = f.starvation
    if st is None or not st.mostly:
        return None
    return Verdict(VerdictKind.INCONCLUSIVE, f"the program did not run as intended: {st.text()}; {ran}",
                   summary=f"{st.why} ({st.events[0]})" if st.events else st.why)


def weakened(v: Verdict, f: Findings) -> Verdict:
    """A NOT_REPRODUCED whose program the kernel starved at times names each
    event: a weaker piece of evidence, said so. A program run for its time
    names the silences it was looked at in and resumed from, too."""
    if f.silences and f.repro.timebox:
        v.reason += f"; {silences_text(f.silences)}"
        v.summary += f" ({silences_text(f.silences, short=True)})"
    st = f.starvation
    if st is None or not st.events:
        return v
    v.reason += f"; weaker evidence: {st.text()}"
    v.summary += f" (weaker: {st.events[0]})"
    v.confidence = "low"
    return v


# a need's kind as a verdict's summary says it (reach.need_kind): the kernel's, kstall's, the guest's
LACKS = {KERNEL: "which this kernel lacks (the bug's code is not in it as configured)",
         TEST_DEVICE: "a test device kstall could not build for this kernel",
         HOST: "which this guest lacks"}

# syzkaller's fail(): its setup could not do what the program needs
SYZ_FAIL = 67
# a run that died of one of these crashed on its own (SIGILL, SIGABRT, SIGBUS, SIGFPE, SIGSEGV)
CRASH_SIGNALS = {128 + n: name for n, name in ((4, "SIGILL"), (6, "SIGABRT"), (7, "SIGBUS"), (8, "SIGFPE"),
                                                (11, "SIGSEGV"))}


def timeboxed(f: Findings) -> Verdict:
    """A program run for its time (a guest environment's) that hung nothing:
    its tasks that did not die when the time was up (the environment's
    dying_s after SIGKILL, whatever their state) are a hang;
    a program that crashed every run, or whose setup failed every run, says
    so; one that needed what this kernel lacks, or whose calls never
    reached the kernel, is INCONCLUSIVE; else NOT_REPRODUCED, with what its
    calls reached."""
    fields = f.ktap.result_fields
    runs, failed = num(fields.get("count")) or 0, num(fields.get("failed")) or 0
    codes = [num(c.lstrip("-")) or 0 for c in fields.get("codes", "-").split(",") if c != "-"]
    seconds = (num(fields.get("elapsed_ms")) or 0) / 1000
    if f.leftovers:  # asleep in D state, or running on: killed, they are still there
        hang = sleeping.SleepingHang.named(f.leftovers, [])
        return Verdict(VerdictKind.VULNERABLE, f"{len(f.leftovers)} task(s) did not die when the time was up: "
                       f"{hang.summary()}", summary=hang.summary(), confidence="high", title=hang.title)
    ran = f"ran for {seconds:.0f} s ({runs} run{'s' * (runs != 1)}"
    ran += f", {failed} exited non-zero: {', '.join(map(str, codes))})" if failed else ")"
    whole_runs = runs - (fields.get("cut") == "1")
    if failed and failed >= whole_runs and codes and all(c in CRASH_SIGNALS for c in codes):
        return Verdict(VerdictKind.FAILED, f"the program crashed on its own, every run: {ran}",
                       summary=f"the program crashed ({', '.join(CRASH_SIGNALS[c] for c in codes)})")
    if failed and failed >= whole_runs and codes == [SYZ_FAIL]:
        said = [l for l in f.ktap.lines if not l.startswith(("#", "KTAP", "1..", "ok ", "not ok "))][-3:]
        return Verdict(VerdictKind.INCONCLUSIVE, f"its setup failed every run (exit {SYZ_FAIL}, syzkaller's "
                       f"fail()): {' | '.join(said) or 'it said nothing'}; {ran}",
                       summary=f"its setup failed: {said[-1] if said else f'exit {SYZ_FAIL}'}")
    if still := [c for c in f.candidates if c.get("state") == "open"]:
        return Verdict(VerdictKind.INCONCLUSIVE, f"the kernel reported what was still stuck when the run ended, "
                       f"not yet for long enough to be a hang, nor seen to go on: "
                       f"{'; '.join(map(hang_verdicts.stuck_text, still))}; {ran}",
                       summary=f"still stuck at the end, not yet a hang: {still[0]['title']}")
    reach = f.reach
    if reach is not None and reach.needs:
        return Verdict(VerdictKind.INCONCLUSIVE, f"the reproducer needs what this guest lacks: "
                       f"{'; '.join(reach.needs)}; {ran}; {reach.text()}",
                       summary=f"the reproducer needs {reach.needs[0].split(':')[0]}, "
                       + LACKS[need_kind(reach.needs[0])])
    if reach is not None and not reach.reached_kernel:
        return Verdict(VerdictKind.INCONCLUSIVE, f"its calls did not reach the kernel: {reach.text()}; {ran}",
                       summary="its calls did not reach the kernel")
    if (starved := starved_run(f, ran)) is not None:
        return starved
    what = reach.text() if reach is not None else (
        f"what its calls reached is unknown (a {f.repro.abi} program's calls are not counted)" if f.repro.abi
        else "what its calls reached is unknown (no system call count)")
    slow = [c for c in f.candidates if c.get("state") == "went on"]
    waits = f"; slow waits the kernel reported, none a hang: {'; '.join(map(hang_verdicts.stuck_text, slow))}" \
        if slow else ""
    n_slow = f" ({len(slow)} slow wait{'s' * (len(slow) != 1)})" if slow else ""
    return weakened(Verdict(VerdictKind.NOT_REPRODUCED, f"{ran} without a hang; {what}{waits}; "
                            f"{f.pmiss.get('text', '')}",
                            summary=f"{ran} without a hang{n_slow}, {f.pmiss.get('text', 'P(miss) unknown')}",
                            confidence="low", p_miss=f.pmiss), f)
