# SPDX-License-Identifier: GPL-2.0
"""Watching one attempt's guest to a decided outcome: a hang with no culprit
resumed from (its thresholds doubled), one on a busy host seen again, one in
a program run for its time left to the kernel's detectors; the readings
each outcome calls for (readings.py)."""
from __future__ import annotations

import time

from harness.analysis import classify, pmiss
from harness.analysis.classify import Role
from harness.analysis.hang_kinds import Reading, way_for
from harness.analysis.outcome import Outcome, OutcomeKind
from harness.base import guest_env
from harness.base.procs import Interrupted
from harness.drivers import readings
from harness.drivers.readings import read_vcpus
from harness.drivers.run_state import RunState
from harness.guest.nmi import NmiInjector
from harness.guest.vm import VM
from harness.guest.watch import Watch

# false_alarms_allowed's figures (thresholds double at each look: a true hang costs two longer looks at most)
FALSE_ALARMS, FALSE_ALARMS_BUSY, HOST_BUSY_SHARE = 2, 4, 0.25


def false_alarms_allowed(host_share: float | None) -> int:
    """How many hangs with no culprit a run resumes from before it takes the
    next as it is: twice, or FALSE_ALARMS_BUSY times while the host held the
    guest back for HOST_BUSY_SHARE or more of the stillness (a fixed 6.17.8
    under the kselftest runner, beside the other half of make test: its
    count still 8.9 s, 64 % of it a vCPU waiting for a host CPU, every CPU
    moving between samples, called "stuck" on its third look)."""
    return FALSE_ALARMS_BUSY if host_share is not None and host_share >= HOST_BUSY_SHARE else FALSE_ALARMS


def widens(false_alarms: int, allowed: int, timebox: bool) -> bool:
    """Whether a false alarm doubles the thresholds: each of the first
    `allowed` does. A program run for its time resumes from every one, and
    each doubles them, so that its looks stay few: at most log2(its time /
    the first threshold) + 1, about 9 in 245 s. With the thresholds fixed
    after the second, 4c456547958b's taprio timer storm on 6.1.170 (its
    CPUs moving in hrtimer_interrupt and run_timer_softirq, heartbeats a
    second or more apart) was looked at 160 times, and the run's bound ran
    out before the program's time did: ERROR, no verdict."""
    return timebox or false_alarms <= allowed


def detectors_wait(r: RunState, vm: VM, w: Watch, outcome: Outcome) -> float:
    """How much longer a culprit found in a program run for its time waits
    for the kernel's detectors to report it, the program going on (its
    environment's [report] wait_s from the silence's start; 0: it does not
    wait). A report ends the run with its title, as syzbot's; a guest
    silent all along (every CPU with interrupts off: no detector can speak)
    is looked at again and titled from its CPUs."""
    env = guest_env.get(r.repro.env) if r.repro.timebox and r.repro.env else None
    if env is None or not env.report_wait or r.samples is None or not r.samples.dumps or not vm.alive():
        return 0.0
    since = w.agent.last_hb_at if outcome.kind == OutcomeKind.FREEZE and w.agent.last_hb_at else outcome.at
    return max(env.report_wait - (outcome.at - since), 1.0)


def seen_again(r: RunState, w: Watch, outcome: Outcome, host_share: float | None, looks: int) -> bool:
    """Whether a culprit found on the first look is to be seen on a second
    before it is the verdict: when another CPU went on meanwhile (not idle,
    not waiting) and the host held the guest back (HOST_BUSY_SHARE of the
    silence, or over pmiss.MAX_HOST_SHARE of the run). A CPU that waits for
    work another vCPU is doing looks stuck for as long as the host keeps that
    vCPU from running: debian:6.18.15, which has the bpf_timer fix, beside
    make test's other half: "VULNERABLE: bpf_timer callbacks cancelling each
    other on CPU1; running in __hrtimer_cb_get_time (moving) on CPU0", its
    vCPUs waiting 56 % of the run; 6.1.176-rt, with the requeue-PI fix, beside
    two CPU-bound loops 2 times in 3. A true hang is there again; one whose
    other CPUs wait or idle is not looked at twice."""
    if looks != 1 or not any(c.signature.role == Role.CULPRIT for c in r.classes):
        return False
    if not any(c.signature.role in (Role.UNKNOWN, Role.BENIGN) and c.signature.name != "idle" and not c.stuck
               for c in r.classes):
        return False
    run_share = r.host_wait_share(w, outcome)
    return (host_share is not None and host_share >= HOST_BUSY_SHARE) or \
        (run_share is not None and run_share > pmiss.MAX_HOST_SHARE)


def watch_until_decided(r: RunState, vm: VM, w: Watch, nmi: NmiInjector) -> tuple[Outcome, BaseException | None]:
    """Watch until the run is decided: a hang read and settled (a hang with no
    culprit is resumed, up to twice, more on a busy host (false_alarms_allowed),
    with doubled thresholds), a stall's final histograms in, or any other
    outcome. Ctrl-C and SIGTERM end it as interrupted, to be raised once the
    run is written."""
    false_alarms = looks = 0
    waited = False  # a culprit has been left to the kernel's detectors once
    try:
        while True:
            outcome = w.watch()
            looks += 1
            share = w.host_share(outcome)  # before the reading stops the guest
            injecting = nmi.running
            nmi.stop()  # the run is decided, or about to be examined
            r.keep_symbols(w)
            way = way_for(outcome.kind, r.repro)
            if way is None:  # no hang: what its outcome calls for, if anything
                return readings.take(outcome.kind, r, vm, w, outcome) or outcome, None
            if way.reading != Reading.VCPUS:
                return readings.take(way.reading, r, vm, w, outcome) or outcome, None
            # a program run for its time goes on to its end whatever a silence was: its
            # hangs are the kernel detectors' to report (at most twice wider)
            allowed = false_alarms_allowed(share)
            settled = read_vcpus(r, vm, w, outcome)
            if settled and not r.repro.timebox and seen_again(r, w, outcome, share, looks):
                r.set_samples_aside("unconfirmed")
                r.echo(f"{classify.summarize(r.classes)}, on a host that kept the guest waiting: resuming, "
                       "thresholds doubled, to see it again")
                r.classes, r.hang = [], None
                w.rearm(widen=True)
                if injecting:
                    nmi.start()
                continue
            if settled and not waited and (wait := detectors_wait(r, vm, w, outcome)) > 0:
                found = classify.summarize(r.classes) or (r.hang.title if r.hang else "a CPU stuck")
                r.note_silence(w, outcome, time.monotonic() - outcome.at,
                               f"the kernel's detectors were left {wait:.0f}s to report it")
                r.set_samples_aside("before-the-detectors")
                r.echo(f"{found}: leaving the kernel's detectors {wait:.0f}s to report it (syzbot titles a hang "
                       "by their report)")
                r.classes, r.hang, waited = [], None, True
                w.rearm_for(wait)
                if injecting:
                    nmi.start()
                continue
            if settled or (false_alarms >= allowed and not r.repro.timebox):
                if r.samples is not None and not r.samples.dumps:
                    outcome = qemu_at_fault(vm, w, outcome)
                return outcome, None
            false_alarms += 1
            r.note_silence(w, outcome, time.monotonic() - outcome.at)
            r.set_samples_aside(f"false-alarm-{false_alarms}")
            widen = widens(false_alarms, allowed, r.repro.timebox)
            busy = f"; the host held the guest back {share:.0%} of it" if share and allowed > FALSE_ALARMS else ""
            r.echo(f"no culprit on any CPU ({classify.summarize(r.classes) or 'all idle/user'}){busy}: "
                   f"resuming{', thresholds doubled' if widen else ''}")
            if r.repro.timebox:  # its end is judged on its own: a silence it outlived is no part of it
                r.classes, r.hang = [], None
            w.rearm(widen=widen)
            if injecting:
                nmi.start()
    except KeyboardInterrupt:
        return Outcome(OutcomeKind.INTERRUPTED, "interrupted by the user (SIGINT)", time.monotonic()), \
            KeyboardInterrupt()
    except Interrupted as e:
        return Outcome(OutcomeKind.INTERRUPTED, f"interrupted ({e})", time.monotonic()), e


# a guest that powers off as kstall starts to read it closes QMP (a broken
# pipe) before QEMU's process ends; on a busy host that took more than the read
QEMU_EXIT_GRACE_S = 3.0


def qemu_at_fault(vm: VM, w: Watch, outcome: Outcome) -> Outcome:
    """A hang whose vCPUs could not be read: when QEMU died or was stopped
    meanwhile, that is the finding, not the hang; when the guest powered off
    after its reproducer ended, the hang was a false alarm and the run is done."""
    if vm.alive() and not vm.stopped() and not vm.ends_within(QEMU_EXIT_GRACE_S):
        return outcome
    after = w.watch()  # the watch reads what QEMU left and names how the run ended
    if after.kind == OutcomeKind.DONE:
        return after
    return Outcome(after.kind, f"{after.detail} (while kstall read its vCPUs, after the guest looked hung: "
                               f"{outcome.kind})", outcome.at)
