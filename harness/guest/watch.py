# SPDX-License-Identifier: GPL-2.0
"""Watches a running guest until something decides the run.

Three streams arrive on unix sockets: the kernel console (UART, read by
harness/analysis/console.py's Tracker), the agent channel (heartbeats, the
reproducer's KTAP: harness/guest/agent.py) and the symbols port. The watcher
reads them as they come, lets the reproducer start at the agent's gate, and
stops with an Outcome (its kinds are listed in harness/analysis/outcome.py).

Every wait is bounded (Limits); watch() can be called again
after a false alarm to continue with the same state.
"""
from __future__ import annotations

import math
import select
import time
from typing import Callable

from harness.analysis import console
from harness.analysis.candidates import Candidates
from harness.base import procs
from harness.base.guest_env import ConfirmRule
from harness.analysis.outcome import NO_AGENT, Outcome, OutcomeKind
from harness.guest.agent import AgentChannel
from harness.guest.agent_talk import AgentTalk
from harness.guest.limits import Calls, Limits
from harness.guest.thresholds import Thresholds
from harness.guest.streams import BlobReader, LineReader
from harness.guest.vm import VM
from images.kernels import symcache

# a run is suspected of hanging (Calls.on_suspect) after this fraction of its freeze or stuck limit
SUSPECT_AT = 0.4
# the outcome of a console report that ends the run, where its kind is not the outcome's name
REPORT_ENDS = {"boot": OutcomeKind.BOOT_FAILURE, "agent": OutcomeKind.AGENT_ERROR}
RESTORED_SILENCE = 10.0  # a guest restored at its gate heartbeats at once; silence means it did not load
# the agent reports every task asleep past the threshold in one pass (250 ms): wait for the rest
SLEEPING_GRACE = 0.5
# a hung-task report's stack and locks take the kernel this long to print: the tasks are read after
HUNG_TASK_TOLD_S = 1.0
# while a kernel report is a candidate hang, the agent's time-up kill is held
# (HOLD S: not before S seconds from now), renewed this often, each lease at
# most this long: a host that stops renewing frees the guest soon
HOLD_RENEW_S = 5.0
HOLD_LEASE_S = 30.0
# the longest the first hung-task look takes (the kernel's symbols on its first run, then its tasks)
HUNG_TASK_LOOK_S = 90.0


class Watch(AgentTalk, Thresholds):
    def __init__(self, vm: VM, limits: Limits, patterns: console.Patterns | None = None,
                 echo: Callable[[str], None] | None = None, calls: Calls | None = None, gate=None, cancel=None,
                 go: str = "", restored: dict | None = None, want_syms: bool = False) -> None:
        self.vm = vm
        self.limits = limits
        self.echo = echo  # progress output, or None
        self.calls = calls or Calls()
        self.suspected = False
        # the guest's clock stands while a look reads it: the run's bound leaves those seconds out
        self.looked_s = 0.0
        self._returned_at: float | None = None
        self.unanswered = ""  # why a command the host sent went unanswered (take_core)
        self._hung_task_at: float | None = None  # when the kernel's first hung-task report came
        self.go = go  # the GO line's parameters (repro/agent/agent.h); the wall clock is added when it is sent
        self.restored = restored is not None  # the guest was restored at its gate: no hello or ready comes
        self.cancel = cancel  # threading.Event: another thread asks this run to end
        self.gate = gate  # harness.guest.cores.Gate: when set, the guest waits at "ready" for our "GO"
        self.go_at: float | None = None
        self.t0 = vm.started_at or time.monotonic()
        self.agent = AgentChannel(self._say, vm.cfg.cpus, limits.stalls, self.calls.on_repro_start,
                                  self.calls.on_line, time.monotonic)
        self.agent.t0 = self.t0
        self.console = console.Tracker(patterns or console.default_patterns(), self._say, self._on_report)
        ruled = {r.name for r in limits.confirm}
        self.candidates = Candidates(limits.confirm + tuple(ConfirmRule(n, 0, 0, 0) for n in limits.report_ends
                                                            if n not in ruled),
                                     lambda t0, t1: self.calls.host_delay(t0, t1) if self.calls.host_delay else None)
        self._held_at: float | None = None  # when the agent's time-up kill was last held (HOLD)
        self._console_lines = LineReader(vm.console, max_line=4096)  # printk lines are under 1 KiB
        self._agent_lines = LineReader(vm.agent)
        self.syms = BlobReader(vm.syms)
        self.want_syms = want_syms
        # blob tag -> the acknowledgement the agent waits for, bounded, before it powers off:
        # a port write returns once queued, and QEMU gone takes the queue's tail with it
        self._acks: dict[str, bytes] = {}
        if want_syms:  # the guest sends its symbols once: syms=1 in the GO, kstall.syms=1 on the command line
            for tag, (_, max_bytes) in symcache.BLOBS.items():
                self.syms.expect(tag, max_bytes)
            self._acks[symcache.LAST_BLOB] = b"SYMS-OK\n"
        if restored is not None:
            a = self.agent
            a.hello, a.hello_at = restored, time.monotonic()
            a.ready_at = a.hello_at
            self._say(f"guest up in {a.hello_at - self.t0:.1f}s, restored at its gate: "
                      f"{restored.get('uname', '?')}, {restored.get('cpus', '?')} CPUs")

    def _say(self, msg: str) -> None:
        if self.echo:
            self.echo(msg)

    def _pump(self, timeout: float) -> bool:
        """Read whatever is there (waiting up to timeout); whether anything was."""
        readers = {self.vm.console: self._console_lines, self.vm.agent: self._agent_lines, self.vm.syms: self.syms}
        socks = [s for s, r in readers.items() if s is not None and not r.eof]
        try:
            ready, _, _ = select.select(socks, [], [], max(timeout, 0))
        except (OSError, ValueError):
            ready = []
        now = time.monotonic()
        if self.vm.console in ready:
            for line in self._console_lines.read():
                self.console.feed(line, now)
        if self.vm.agent in ready:
            for line in self._agent_lines.read():
                self.agent.feed(line, now)
        if self.vm.syms in ready:
            self.syms.read()
            for tag in [t for t in self._acks if t in self.syms.blobs]:
                self._send(self._acks.pop(tag))
        return bool(ready)

    def _drain(self) -> None:
        """QEMU has exited: take everything it wrote before it went. The
        console is read to the log file's end, whatever its tail thread has
        marked yet: an oops QEMU wrote in its last 10 ms (a panic's reboot
        ends it at once) was missed, and the run was "QEMU exited unexpectedly"."""
        for _ in range(1000):
            got = self._pump(0)
            now = time.monotonic()
            lines = self._console_lines.read()
            for line in lines:
                self.console.feed(line, now)
            if not (got or lines):
                return

    # -- decisions -------------------------------------------------------
    def _decide(self, now: float) -> Outcome | None:
        if not self.vm.alive():
            self._drain()
        self._hold(now)
        out = self._ended(now)
        if out is not None or self.agent.hello_at is None or self._in_grace(now):
            return out
        if self.agent.ready_at is not None and self.go_at is None:
            if now - self.agent.ready_at > self.limits.gate_timeout:
                return Outcome(OutcomeKind.TIMEOUT, f"waited more than {self.limits.gate_timeout:.0f}s at the gate "
                               "for free cores", now)
            self._at_gate(now)
            return None
        return self._hung(now)

    def _in_grace(self, now: float) -> bool:
        """A report that ends the run, or a candidate just become a hang, waits
        out its grace for the lines that follow it while QEMU lives: nothing
        else (the host's bound, a freeze) ends the run meanwhile."""
        if not self.vm.alive():
            return False
        if self.console.pending is not None:
            return now - self.console.pending_since < self.limits.report_grace
        h = self.candidates.hang
        return h is not None and now - (h.decided_at or now) < self.limits.report_grace

    def _ended(self, now: float) -> Outcome | None:
        """The run is over whatever the guest does: stopped from outside, a
        report that ends it, the reproducer done, QEMU gone, no boot."""
        a, L = self.agent, self.limits
        if self.cancel is not None and self.cancel.is_set():
            return Outcome(OutcomeKind.INTERRUPTED, "interrupted (the matrix run was stopped)", now)
        if self.vm.alive() and self.vm.stopped():
            return Outcome(OutcomeKind.QEMU_STOPPED, "QEMU was stopped from outside kstall (SIGSTOP or SIGTSTP): "
                           "the guest's silence is no freeze", now)
        # a report that ends the run is its answer however the run ended: the
        # agent's exit waits for its lines as much as the guest's life does
        if self._in_grace(now):
            return None
        if (r := self.console.pending) is not None:
            if r.kind in ("oops", "panic") and (why := self.console.patterns.impossible_state(r)):
                return Outcome(OutcomeKind.INFRA, f"{r.title}: {why}", now)
            return Outcome(REPORT_ENDS.get(r.kind) or OutcomeKind(r.kind), r.title, now)
        if (h := self.candidates.hang) is not None:
            return Outcome(OutcomeKind.REPORTED, h.first.title, now)
        if a.exit_code is not None and (a.poweroff or not self.vm.alive()):
            return Outcome(OutcomeKind.DONE, f"reproducer exited with code {a.exit_code}", now)
        if not self.vm.alive():
            return self._qemu_gone(now)
        if a.hello_at is None and now - self.t0 > L.boot_timeout:
            tail = " | ".join(l for l in self.console.tail[-3:] if l.strip())
            return Outcome(OutcomeKind.BOOT_FAILURE, f"{NO_AGENT} {L.boot_timeout:.0f}s of boot; console: "
                           f"{tail or 'empty'}", now)
        return None

    def _on_report(self, r: console.Report, now: float) -> bool:
        """Each kernel report as it comes: a detector's that ends the run is a
        candidate hang (kept when it is a new thing's first); one before the
        program started is the boot's (the command line's detectors are set
        for the boot), never the program's."""
        if r.name not in self.limits.report_ends:
            return False
        if self.agent.repro_started_at is None:
            self.candidates.of_boot(r)
            return False
        return self.candidates.feed(r, now, self._guest_now())

    def _guest_now(self) -> float | None:
        """The guest's clock at its last heartbeat (seconds); None before one."""
        return self.agent.last_hb_guest_ns / 1e9 if self.agent.hb_count else None

    def _hold(self, now: float) -> None:
        """While a candidate hang is open, hold the agent's time-up kill, so
        that the task it reports stays as it is until it is a hang or went
        on (a kill frees a holder that is killable, and the hang with it)."""
        self.candidates.update(now, self._guest_now())
        if self.go_at is None or not self.agent.running:
            return
        start = self.agent.repro_started_at or self.go_at  # the agent's time box counts from the program's start
        if still := [c for c in self.candidates.open if c.first_at - start <= self.limits.hold_for]:
            # until it would be a hang, and the kernel's next word on it after that
            lease = max(c.due_in(now) for c in still) + max(c.quiet_after() for c in still)
            if self._held_at is None or now - self._held_at >= HOLD_RENEW_S:
                self._send(f"HOLD {math.ceil(min(lease, HOLD_LEASE_S))}\n".encode())
                self._held_at = now
        elif self._held_at is not None:
            self._send(b"HOLD 0\n")
            self._held_at = None

    def _qemu_gone(self, now: float) -> Outcome:
        rc = self.vm.proc.returncode if self.vm.proc else None
        booted = self.agent.hello_at is not None
        if rc is not None and rc < 0:  # a signal: not the kernel's doing
            tail = self.vm.qemu_log_tail(3)
            when = f"{'' if booted else ' before the guest agent started'}{'; ' + tail if tail else ''}"
            if crash := self.vm.crashed():  # another attempt may not meet it
                return Outcome(OutcomeKind.INFRA, f"{crash}{when}", now)
            # from outside (the OOM killer, a kill): another attempt would meet it again
            return Outcome(OutcomeKind.QEMU_EXIT, f"{self.vm.outside_fault()}{when}", now)
        if booted:
            return Outcome(OutcomeKind.QEMU_EXIT, f"QEMU exited unexpectedly; {self.vm.qemu_log_tail(3)}", now)
        why = ("the guest reset before its agent started (QEMU runs with -no-reboot, so a kernel "
               "that cannot boot ends like this)" if rc == 0 else
               f"QEMU exited with status {rc} before the guest agent started: {self.vm.qemu_log_tail(3)}")
        tail = " | ".join(l for l in self.console.tail[-3:] if l.strip())
        return Outcome(OutcomeKind.BOOT_FAILURE, why + (f"; console: {tail}" if tail else "; console: empty"), now)

    def _at_gate(self, now: float) -> None:
        """The guest waits at its gate: save it (once), then GO when cores are free."""
        if self.calls.on_ready is not None:
            self.calls.on_ready()
            self.calls.on_ready = None
        if self.gate is None or self.gate.try_open():
            self._send_go(now)

    def _hung(self, now: float) -> Outcome | None:
        """A running guest: silent after a restore, too long, stalled by its own
        measurement, frozen (no heartbeat), or stuck (no progress)."""
        a, L = self.agent, self.limits
        if self.restored and a.hb_count == 0 and now - a.hello_at > RESTORED_SILENCE:
            return Outcome(OutcomeKind.BOOT_FAILURE, f"the guest restored from its snapshot sent nothing within "
                           f"{RESTORED_SILENCE:.0f}s", now)
        # the bound grows by what the host held back a candidate it holds the guest for
        if now - (self.go_at or a.hello_at) - self.looked_s > L.run_timeout + self.candidates.held_s():
            besides = f" besides {self.looked_s:.0f}s of looks at it" if self.looked_s >= 1 else ""
            return Outcome(OutcomeKind.TIMEOUT, f"run exceeded {L.run_timeout:.0f}s{besides}", now)
        if a.sleeping_at is not None and now - a.sleeping_at >= SLEEPING_GRACE:  # every such task reported
            t = a.sleeping[0]
            return Outcome(OutcomeKind.SLEEPING, f"task {t['comm']}:{t['tid']} in D state for {t['secs']}s in "
                           f"{t['wchan']}" + (f" (and {len(a.sleeping) - 1} more)" if len(a.sleeping) > 1 else ""),
                           now)
        if any(now - c.last_at < c.quiet_after() for c in self.candidates.open):
            # a kernel detector spoke and is to speak again: the candidate decides, not a
            # silence (9157524e6230 on 6.1.170: a soft lockup's report, then a freeze read
            # from the CPUs 7 s before syzbot's "task hung in jfs_commit_inode" came)
            return None
        if a.stall_at is not None:
            return Outcome(OutcomeKind.STALL, f"the reproducer measured {a.progress.get('over')} "
                           f"{L.stall_measure}(s) past its stall threshold", now)
        freeze_after = self.freeze_after(now)
        if a.last_hb_at is not None and now - a.last_hb_at >= freeze_after:
            return Outcome(OutcomeKind.FREEZE, f"no heartbeat for {now - a.last_hb_at:.2f}s", now)
        stuck_after = self.stuck_after(now)
        if self.calls.on_suspect and not self.suspected and a.running and (
                now - (a.last_hb_at or now) >= freeze_after * SUSPECT_AT or
                now - (a.count_changed_at or now) >= stuck_after * SUSPECT_AT):
            self.suspected = True
            self.calls.on_suspect()
        if a.running and a.count_changed_at is not None and now - a.count_changed_at >= stuck_after:
            return Outcome(OutcomeKind.STUCK, f"progress count stuck at {a.count} for "
                           f"{now - a.count_changed_at:.2f}s while heartbeats continue", now)
        return None

    def _send_go(self, now: float) -> None:
        wall = time.time_ns()
        self._send(f"GO {self.go} time={wall // 10**9}.{wall % 10**9:09d}\n".encode())
        self.go_at = now
        # the guest idled at the gate: its heartbeat clock starts now
        if self.agent.last_hb_at is not None:
            self.agent.last_hb_at = now
        if now - self.agent.ready_at > 0.5:
            self._say(f"waited {now - self.agent.ready_at:.1f}s at the gate for free cores")

    # -- the loop ---------------------------------------------------------
    def watch(self) -> Outcome:
        while True:
            procs.check_terminated()
            now = time.monotonic()
            out = self._decide(now)
            if out is not None and out.kind.hang:
                # kstall itself may have been late (a busy host, a long symbol store): signs of
                # life already waiting in the sockets are no freeze
                hbs, count = self.agent.hb_count, self.agent.count
                self._pump(0)
                if (self.agent.hb_count != hbs) if out.kind == OutcomeKind.FREEZE else (self.agent.count != count):
                    continue
            if out is not None:
                # take what is already buffered (the rest of a report, symbols)
                self._pump(0)
                self._returned_at = time.monotonic()
                return out
            if self.calls.on_hung_task and self._hung_task_told(now):
                hook, self.calls.on_hung_task = self.calls.on_hung_task, None
                if self.candidates.open:  # the look may wait a minute for symbols: no lease lapses meanwhile
                    self._send(f"HOLD {math.ceil(HUNG_TASK_LOOK_S)}\n".encode())
                    self._held_at = now
                hook()
                self.looked_s += time.monotonic() - now
                self.agent.restart_clocks(time.monotonic())  # the guest was stopped while it was read
                continue
            self._pump(self._until_due(now))

    def _hung_task_told(self, now: float) -> bool:
        """The kernel reported a hung task, HUNG_TASK_TOLD_S ago: done printing it."""
        if self._hung_task_at is None and any(r.name == "hung-task" and not r.before_program
                                              for r in self.console.reports):
            self._hung_task_at = now
        return self._hung_task_at is not None and now - self._hung_task_at >= HUNG_TASK_TOLD_S

    def _until_due(self, now: float) -> float:
        """How long the next look may wait for the guest: up to 50 ms, but
        no later than the moment the silence since the last heartbeat becomes
        a freeze (a fixed 50 ms poll added 25 ms to the average detection)."""
        last = self.agent.last_hb_at
        if last is None:
            return 0.05
        return min(0.05, max(last + self.freeze_after(now) - now, 0.002))

    def summary(self) -> dict:
        a = self.agent
        return {"hello": a.hello, "boot_s": round(a.hello_at - self.t0, 2) if a.hello_at else None,
                "gate_wait_s": round(self.go_at - a.ready_at, 2) if self.go_at and a.ready_at else None,
                "heartbeats": a.hb_count, "max_heartbeat_gap_s": round(a.max_hb_gap, 3),
                "max_unexplained_gap_s": self.unexplained_gap(),
                "last_heartbeat_guest_s": round(a.last_hb_guest_ns / 1e9, 3) if a.hb_count else None,
                "count": a.count, "exit_code": a.exit_code, "syms": a.syms_info,
                "console_reports": [r.to_json() for r in self.console.reports],
                "console_reports_dropped": self.console.dropped, "candidates": self.candidates.to_json(),
                "reports_before_program": self.candidates.before_program}
