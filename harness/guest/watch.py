# SPDX-License-Identifier: GPL-2.0
"""Watches a running guest until something decides the run.

Three streams arrive on unix sockets: the kernel console (UART), the agent
channel (heartbeats, the reproducer's KTAP) and the symbols port. The watcher
reads them as they come and stops with an Outcome (its kinds are listed in
harness/analysis/outcome.py).

Every wait is bounded (Limits); watch() can be called again
after a false alarm to continue with the same state.
"""
from __future__ import annotations

import re
import select
import signal
import time
from dataclasses import dataclass

from harness.analysis import console, threads
from harness.analysis.ktap import KV as _KV, Ktap, unnest
from harness.analysis.outcome import Outcome, OutcomeKind
from harness.base.untrusted import num
from harness.guest.streams import BlobReader, LineReader
from harness.guest.vm import VM

_HB = re.compile(r"^HB (\d{1,20}) (\d{1,20}) (\d{1,20})$")
MAX_REPORTS = 100  # console reports kept per run; the rest are only counted
# a run is suspected of hanging (Watch.on_suspect) after this fraction of its freeze or stuck limit
SUSPECT_AT = 0.4
RESTORED_SILENCE = 10.0  # a guest restored at its gate heartbeats at once; silence means it did not load


@dataclass
class Limits:
    boot_timeout: float = 120.0
    freeze_after: float = 0.8
    stuck_after: float = 1.0
    run_timeout: float = 180.0
    report_grace: float = 1.5
    stalls: int = 0  # > 0: end with "stall" once the progress line's over= reaches this
    stall_measure: str = "measurement"  # what the reproducer times (its data file's [stall] measure)


class Watch:
    def __init__(self, vm: VM, limits: Limits, patterns: console.Patterns | None = None,
                 echo=None, on_repro_start=None, gate=None, cancel=None, on_line=None,
                 go: str = "", restored: dict | None = None, on_ready=None, on_suspect=None) -> None:
        self.vm = vm
        # callable(), once per arming, when heartbeats or the progress count have been
        # still for SUSPECT_AT of their limit: time to get a debugger ready
        self.on_suspect = on_suspect
        self.suspected = False
        self.go = go  # the GO line's parameters (repro/agent.c); the wall clock is added when it is sent
        self.on_ready = on_ready  # callable(), once, when the guest waits at its gate (a snapshot is saved)
        self.restored = restored is not None  # the guest was restored at its gate: no hello or ready comes
        self.on_line = on_line  # callable(line) for every reproducer line
        self.cancel = cancel  # threading.Event: another thread asks this run to end
        self.gate = gate  # harness.guest.cores.Gate: when set, the guest waits at "ready" for our "GO"
        self.ready_at: float | None = None
        self.go_at: float | None = None
        self.on_repro_start = on_repro_start  # callable(), once the reproducer's first line arrives
        self.limits = limits
        self.patterns = patterns or console.load_patterns()
        self.echo = echo  # callable(str) for progress output, or None
        self.console = LineReader(vm.console, max_line=4096)  # printk lines are under 1 KiB
        self.agent = LineReader(vm.agent)
        self.syms = BlobReader(vm.syms)
        self.t0 = vm.started_at or time.monotonic()
        self.hello: dict = {}
        self.hello_at: float | None = None
        self.syms_info: dict = {}
        self.first_hb_at: float | None = None
        self.last_hb_at: float | None = None
        self.last_hb_guest_ns = 0
        self.hb_count = 0
        self.max_hb_gap = 0.0
        self.repro_started_at: float | None = None
        self.count = 0
        self.count_changed_at: float | None = None
        self.exit_code: int | None = None
        self.poweroff = False
        self.ktap = Ktap()
        self.progress: dict = {}  # fields of the reproducer's last progress line
        self.stall_at: float | None = None
        self.reports: list[console.Report] = []
        self.reports_dropped = 0  # past MAX_REPORTS: a guest that repeats itself
        self.open_reports: list[console.Report] = []  # still taking their lines
        self.pending_report: console.Report | None = None
        self.pending_since = 0.0
        self.console_tail: list[str] = []
        self.proc_threads: dict[int, threads.ProcThread] = {}  # the agent's /proc view, on CORE
        self.core_info: dict = {}
        if restored is not None:
            self.hello = restored
            self.hello_at = self.ready_at = time.monotonic()
            self._say(f"guest up in {self.hello_at - self.t0:.1f}s, restored at its gate: "
                      f"{restored.get('uname', '?')}, {restored.get('cpus', '?')} CPUs")

    # -- stream handling -------------------------------------------------
    def _on_agent(self, line: str, now: float) -> None:
        m = _HB.match(line)
        if m:
            if self.last_hb_at is not None:
                self.max_hb_gap = max(self.max_hb_gap, now - self.last_hb_at)
            else:
                self.first_hb_at = now
            self.last_hb_at = now
            self.last_hb_guest_ns = int(m.group(2))
            self.hb_count += 1
            if "count" not in self.ktap.result_fields:  # a heartbeat may trail the final count with an older one
                self._set_count(int(m.group(3)), now)
            return
        if line.startswith("KSTALL "):
            words = line.split()
            fields = dict(_KV.findall(line))
            if words[1] == "hello":
                self.hello, self.hello_at = fields, now
                self._say(f"guest up in {now - self.t0:.1f}s: {fields.get('uname', '?')}, {fields.get('cpus', '?')} CPUs")
                if fields.get("cpus", "").isdigit() and int(fields["cpus"]) < self.vm.cfg.cpus:
                    self._say(f"warning: the guest brought up {fields['cpus']} of its {self.vm.cfg.cpus} vCPUs "
                              "(a kernel without SMP, or firmware tables it cannot read)")
            elif words[1] == "syms":
                self.syms_info = fields
            elif words[1] == "ready":
                self.ready_at = now
            elif words[1] == "exit":
                self.exit_code = num(fields.get("code"), -1)
            elif words[1] == "poweroff":
                self.poweroff = True
            elif words[1] == "thread" and (t := threads.from_agent_line(line)) is not None:
                self.proc_threads[t.tid] = t
            elif words[1] == "core":
                self.core_info = fields
            return
        if self.repro_started_at is None:
            self.repro_started_at = now
            self.count_changed_at = now
            if self.on_repro_start:
                self.on_repro_start()
                # the hook may have held the guest (a debugger): restart the clocks
                now = time.monotonic()
                self.repro_started_at = self.count_changed_at = now
                if self.last_hb_at is not None:
                    self.last_hb_at = now
        line = unnest(line)
        if line.startswith("# progress "):
            f = dict(_KV.findall(line))
            self.progress = f
            self._set_count(num(f.get("count"), self.count), now)
            if self.limits.stalls and num(f.get("over"), 0) >= self.limits.stalls and self.stall_at is None:
                self.stall_at = now
            return
        self.ktap.feed(line)
        if line.startswith("# result ") and num(self.ktap.result_fields.get("count")) is not None:
            self.count = num(self.ktap.result_fields["count"])  # the final word on the count
        if self.on_line:
            self.on_line(line)

    def _set_count(self, count: int, now: float) -> None:
        if count != self.count:
            self.count = count
            self.count_changed_at = now

    def _on_console(self, line: str, now: float) -> None:
        self.console_tail = (self.console_tail + [line])[-200:]
        # a report's lines (its RIP and trace name it) follow its first one
        self.open_reports = [r for r in self.open_reports if len(r.excerpt) < console.TRACE_LINES]
        for r in self.open_reports:
            r.excerpt.append(line)
        r = console.match_line(line, self.patterns)
        if r is None:
            return
        if len(self.reports) >= MAX_REPORTS:
            self.reports_dropped += 1
            return
        self.reports.append(r)
        self.open_reports.append(r)
        if r.kind in ("panic", "oops", "infra", "boot", "agent") and self.pending_report is None:
            self.pending_report, self.pending_since = r, now
        if r.kind in ("stall", "infra", "panic", "oops"):
            self._say(f"console: {r.message}")

    def _say(self, msg: str) -> None:
        if self.echo:
            self.echo(msg)

    def _pump(self, timeout: float) -> bool:
        """Read whatever is there (waiting up to timeout); whether anything was."""
        readers = {self.vm.console: self.console, self.vm.agent: self.agent, self.vm.syms: self.syms}
        socks = [s for s, r in readers.items() if s is not None and not r.eof]
        try:
            ready, _, _ = select.select(socks, [], [], max(timeout, 0))
        except (OSError, ValueError):
            ready = []
        now = time.monotonic()
        if self.vm.console in ready:
            for line in self.console.read():
                self._on_console(line, now)
        if self.vm.agent in ready:
            for line in self.agent.read():
                self._on_agent(line, now)
        if self.vm.syms in ready:
            self.syms.read()
        return bool(ready)

    # -- decisions -------------------------------------------------------
    def _drain(self) -> None:
        """QEMU has exited: take everything it wrote before it went."""
        for _ in range(1000):
            if not (self._pump(0)):
                return

    def _decide(self, now: float) -> Outcome | None:
        L = self.limits
        if not self.vm.alive():
            self._drain()
        if self.cancel is not None and self.cancel.is_set():
            return Outcome(OutcomeKind.INTERRUPTED, "interrupted (the matrix run was stopped)", now)
        if self.vm.alive() and self.vm.stopped():
            return Outcome(OutcomeKind.QEMU_STOPPED, "QEMU was stopped from outside kstall (SIGSTOP or SIGTSTP): "
                           "the guest's silence is no freeze", now)
        r = self.pending_report
        if r is not None and (now - self.pending_since >= L.report_grace
                              or not self.vm.alive()):
            kind = {"boot": OutcomeKind.BOOT_FAILURE, "agent": OutcomeKind.AGENT_ERROR}.get(r.kind) or OutcomeKind(r.kind)
            return Outcome(kind, r.title, now)
        if self.poweroff and self.exit_code is not None:
            return Outcome(OutcomeKind.DONE, f"reproducer exited with code {self.exit_code}", now)
        if not self.vm.alive():
            if self.exit_code is not None:
                return Outcome(OutcomeKind.DONE, f"reproducer exited with code {self.exit_code}", now)
            rc = self.vm.proc.returncode if self.vm.proc else None
            if rc is not None and rc < 0:  # a signal from outside (the OOM killer, a kill): not the kernel's doing
                sig = next((s.name for s in signal.Signals if s == -rc), f"signal {-rc}")
                return Outcome(OutcomeKind.QEMU_EXIT, f"QEMU exited unexpectedly, killed by {sig}"
                               f"{' before the guest agent started' if self.hello_at is None else ''}; "
                               f"{self.vm.qemu_log_tail(3)}", now)
            if self.hello_at is None:
                why = ("the guest reset before its agent started (QEMU runs with -no-reboot, so a kernel "
                       "that cannot boot ends like this)" if rc == 0 else
                       f"QEMU exited with status {rc} before the guest agent started: {self.vm.qemu_log_tail(3)}")
                tail = " | ".join(l for l in self.console_tail[-3:] if l.strip())
                return Outcome(OutcomeKind.BOOT_FAILURE, why + (f"; console: {tail}" if tail else "; console: empty"),
                               now)
            return Outcome(OutcomeKind.QEMU_EXIT, f"QEMU exited unexpectedly; {self.vm.qemu_log_tail(3)}", now)
        if self.hello_at is None:
            if now - self.t0 > L.boot_timeout:
                return Outcome(OutcomeKind.BOOT_FAILURE, f"no guest agent within {L.boot_timeout:.0f}s of boot", now)
            return None
        if self.ready_at is not None and self.go_at is None:
            if self.on_ready is not None:
                self.on_ready()
                self.on_ready = None
            if self.gate is None or self.gate.try_open():
                self._send_go(now)
            return None
        if self.restored and self.hb_count == 0 and now - self.hello_at > RESTORED_SILENCE:
            return Outcome(OutcomeKind.BOOT_FAILURE, f"the guest restored from its snapshot sent nothing within "
                           f"{RESTORED_SILENCE:.0f}s", now)
        if now - (self.go_at or self.hello_at) > L.run_timeout:
            return Outcome(OutcomeKind.TIMEOUT, f"run exceeded {L.run_timeout:.0f}s", now)
        if self.stall_at is not None:
            return Outcome(OutcomeKind.STALL, f"the reproducer measured {self.progress.get('over')} "
                           f"{L.stall_measure}(s) past its stall threshold", now)
        if self.last_hb_at is not None and now - self.last_hb_at >= L.freeze_after:
            return Outcome(OutcomeKind.FREEZE, f"no heartbeat for {now - self.last_hb_at:.2f}s", now)
        running = self.repro_started_at is not None and self.exit_code is None and not self.ktap.results
        if self.on_suspect and not self.suspected and running and (
                now - (self.last_hb_at or now) >= L.freeze_after * SUSPECT_AT or
                now - (self.count_changed_at or now) >= L.stuck_after * SUSPECT_AT):
            self.suspected = True
            self.on_suspect()
        if running and self.count_changed_at is not None and now - self.count_changed_at >= L.stuck_after:
            return Outcome(OutcomeKind.STUCK, f"progress count stuck at {self.count} for "
                           f"{now - self.count_changed_at:.2f}s "
                           "while heartbeats continue", now)
        return None

    def _send(self, command: bytes) -> None:
        assert self.vm.agent is not None
        self.vm.agent.setblocking(True)
        try:
            self.vm.agent.settimeout(5)
            self.vm.agent.sendall(command)
        except OSError:
            pass  # QEMU gone: the caller's next look will see it
        finally:
            self.vm.agent.setblocking(False)

    def finish(self, timeout: float = 10.0) -> bool:
        """Ask the agent to end the reproducer now (it still prints its final
        results) and read until it has exited; whether it did in time."""
        self._send(b"STOP\n")
        deadline = time.monotonic() + timeout
        while self.exit_code is None and self.vm.alive() and time.monotonic() < deadline:
            self._pump(0.05)
        self._pump(0)
        return self.exit_code is not None

    def take_core(self, timeout: float = 60.0) -> bytes | None:
        """Have the agent dump the stuck reproducer (its threads from /proc,
        then the kernel's core of it) and wait, bounded, for the core; None
        when the agent reported none."""
        self._send(b"CORE\n")
        deadline = time.monotonic() + timeout

        def arrived() -> bool:  # the blob comes before the agent's line about it
            return bool(self.core_info) and ("bytes" not in self.core_info or "CORE" in self.syms.blobs)
        acked = False
        while time.monotonic() < deadline:
            if "CORE" in self.syms.blobs and not acked:  # the agent powers off once it hears this
                self._send(b"CORE-OK\n")
                acked = True
            if arrived():
                break
            if not self.vm.alive():  # take what it sent
                self._drain()
                break
            self._pump(0.05)
        return self.syms.blobs.get("CORE") if "bytes" in self.core_info else None

    def _send_go(self, now: float) -> None:
        wall = time.time_ns()
        self._send(f"GO {self.go} time={wall // 10**9}.{wall % 10**9:09d}\n".encode())
        self.go_at = now
        # the guest idled at the gate: its heartbeat clock starts now
        if self.last_hb_at is not None:
            self.last_hb_at = now
        if now - self.ready_at > 0.5:
            self._say(f"waited {now - self.ready_at:.1f}s at the gate for free cores")

    def watch(self) -> Outcome:
        while True:
            now = time.monotonic()
            out = self._decide(now)
            if out is not None and out.kind in (OutcomeKind.FREEZE, OutcomeKind.STUCK):
                # kstall itself may have been late (a busy host, a long symbol store): signs of
                # life already waiting in the sockets are no freeze
                hbs, count = self.hb_count, self.count
                self._pump(0)
                if (self.hb_count != hbs) if out.kind == OutcomeKind.FREEZE else (self.count != count):
                    continue
            if out is not None:
                # take what is already buffered (the rest of a report, symbols)
                self._pump(0)
                return out
            self._pump(0.05)

    def rearm(self) -> None:
        """After a false alarm: start the freeze and stuck clocks afresh."""
        now = time.monotonic()
        if self.last_hb_at is not None:
            self.last_hb_at = now
        if self.count_changed_at is not None:
            self.count_changed_at = now
        self.limits.stuck_after *= 2
        self.limits.freeze_after *= 2
        self.suspected = False

    def summary(self) -> dict:
        return {"hello": self.hello, "boot_s": round(self.hello_at - self.t0, 2) if self.hello_at else None,
                "gate_wait_s": round(self.go_at - self.ready_at, 2) if self.go_at and self.ready_at else None,
                "heartbeats": self.hb_count, "max_heartbeat_gap_s": round(self.max_hb_gap, 3),
                "last_heartbeat_guest_s": round(self.last_hb_guest_ns / 1e9, 3) if self.hb_count else None,
                "count": self.count, "exit_code": self.exit_code, "syms": self.syms_info,
                "console_reports": [r.to_json() for r in self.reports],
                "console_reports_dropped": self.reports_dropped}

