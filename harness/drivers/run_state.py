# SPDX-License-Identifier: GPL-2.0
"""The mutable parts of one attempt, shared by its stages (plan, watch,
readings, conclusion), and what an attempt returns (Attempt)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from harness.analysis import classify, cpu_state, kernel_waits, sleeping, thread_hang
from harness.analysis.outcome import Outcome, OutcomeKind
from harness.analysis.verdict import Verdict
from harness.base import arch as arches
from harness.base import background
from harness.base.reproducers import HangIn
from harness.debug import vcpus as debug
from harness.drivers import layouts
from harness.drivers.case import Case
from harness.drivers.options import Options
from harness.guest import hold
from harness.guest.hostwait import HostWait
from harness.guest.watch import Watch
from images.kernels import debuginfo, symcache

Echo = Callable[[str], None]
# a latency the reproducer measured ended at most this long before the progress line that showed it
# (its progress period, 10 ms, and the line's way to the host)
PROGRESS_SLACK_S = 0.05
# work done on a thread meanwhile (a compile of kstall's console patterns, a
# read of a kernel's variables) takes a fraction of a second: this bounds a stuck one
BACKGROUND_BOUND_S = 60.0
# a kernel's first run sends its symbols and BTF (~13 MB) as it starts: a
# reading that needs them waits this long for the rest (they took 1-5 s here)
SYMBOLS_BOUND_S = 60.0


@dataclass
class Attempt:
    verdict: Verdict
    outcome: Outcome
    watch: dict
    classes: list[classify.CpuClass]
    samples: debug.Samples | None
    timings: dict
    cmdline: str
    count_target: int
    interrupted: BaseException | None = None
    process: thread_hang.Analysis | None = None  # a process hang's thread analysis
    process_error: str = ""
    go: str = ""  # the GO line's parameters
    snapshot: dict | None = None  # restored from, or saved to
    stalls: dict | None = None  # the reproducer's latency measurement (harness/analysis/latency.py)
    hang: cpu_state.Hang | sleeping.SleepingHang | None = None  # a hang no signature named
    vmcore: dict | None = None  # RUN/vmcore written (harness/guest/vmcore.py)
    held: hold.Held | None = None  # the hung guest, kept stopped for the developer's debugger
    accel: str = ""  # the accelerator it ran under ("": no guest ran)
    reach: dict | None = None  # a guest environment's account of the program (harness/analysis/reach.py)
    wait_graph: dict | None = None  # who holds what the sleeping tasks wait for (harness/analysis/task_waits.py)
    health: dict | None = None  # whether the kernel let the program run (harness/analysis/starvation.py)

    def release(self) -> None:
        """Stop a held guest (an attempt that is retried, or a run that ends)."""
        if self.held is not None:
            self.held.release()
            self.held = None


class RunState:
    """The mutable parts of one attempt, so that its steps can be small."""

    def __init__(self, c: Case, opts: Options, out_dir: Path, echo: Echo) -> None:
        self.case, self.kernel, self.repro = c, c.kernel, c.repro.spec
        self.opts, self.out_dir, self.echo = opts, out_dir, echo
        self.syms_path = symcache.cached(c.kernel.key)
        self.classes: list[classify.CpuClass] = []
        self.sigs, self.own_bug = list(c.repro.signatures), c.repro.own_bug
        self.hang: cpu_state.Hang | sleeping.SleepingHang | None = None
        self.samples: debug.Samples | None = None
        self.timings: dict = {}
        self.process: thread_hang.Analysis | None = None
        self.process_error = ""
        self.dumped = False  # a process hang: its threads were dumped (or tried to be)
        self.prepared: debug.Prepared | None = None  # a GDB started while a hang is suspected
        self.host_wait: HostWait | None = None  # the vCPU threads' waits for a host CPU, while the reproducer runs
        self.vmcore: dict | None = None
        self.wait_graph: dict | None = None  # who holds what the sleeping tasks wait for (task_waits.py)
        self.silences: list[dict] = []  # each look the run went on after (note_silence)
        # the kernel's variables, read while a hang is suspected
        self._variables: background.Pending[kernel_waits.Variables | None] | None = None

    def prepare_debugger(self) -> None:
        """A kernel hang may be coming: start GDB now, and read the kernel's
        variables, off the path to the verdict."""
        if self.prepared is None and self.repro.hang == HangIn.KERNEL and self.syms_path is not None:
            self.prepared = debug.Prepared(self.out_dir / "gdb.log", self.debug_target())
            self._reading_variables()

    def debug_target(self) -> debug.Target:
        return debug.Target(arches.get(self.kernel.arch), self.syms_path,
                            self.kernel.vmlinux or self.opts.debug.vmlinux, self.layout())

    def layout(self) -> Path | None:
        """Where this kernel keeps who waits for whom (worked out once per kernel)."""
        return layouts.cached(self.syms_path, arches.get(self.kernel.arch)) if self.syms_path is not None else None

    def host_wait_during(self, w: Watch, outcome: Outcome):
        """host_wait(path, ms) for latency.evaluate: the most a vCPU thread
        waited for a host CPU during the path's longest latency, which ended
        by the progress line that first showed it (or by the outcome)."""
        if self.host_wait is None or self.repro.stall is None:
            return None
        prefixes = {p.name: p.progress for p in self.repro.stall.paths}

        def wait(path: str, ms: float) -> float | None:
            end = w.agent.max_at.get(prefixes.get(path, path), outcome.at)
            return self.host_wait.between(end - ms / 1e3 - PROGRESS_SLACK_S, end)
        return wait

    def host_wait_share(self, w: Watch, outcome: Outcome) -> float | None:
        """The share of the program's run, to the outcome, the host kept its vCPUs waiting (HostWait.share)."""
        if self.host_wait is None or not w.agent.repro_started_at:
            return None
        return self.host_wait.share(w.agent.repro_started_at, outcome.at)

    def note_silence(self, w: Watch, outcome: Outcome, looked_s: float, then: str = "") -> None:
        """A look the run went on from, as the verdict tells it: when, what
        fell silent (and what kstall did then), what each CPU was doing (a
        timer storm shows here: CPUs moving in interrupt context)."""
        cpus = self.hang.cpus if isinstance(self.hang, cpu_state.Hang) else []
        if not cpus and self.classes:  # a culprit a signature named: its CPUs as classified
            busy = [f"CPU{c.cpu} {c.title}" for c in self.classes if c.signature.role in classify.NAMED_ROLES]
        else:
            busy = [f"CPU{c.cpu} {c.short()}" for c in cpus if not c.benign]
        self.silences.append({"after_s": round(outcome.at - (w.go_at or w.t0), 1),
                              "what": outcome.detail + (f"; {then}" if then else ""), "looked_s": round(looked_s, 1),
                              "cpus": ", ".join(busy) or ("all idle or in user mode" if cpus else "not read")})

    def set_samples_aside(self, prefix: str) -> None:
        """A look that did not settle the run: its samples kept under prefix (the next look reuses the names)."""
        for f in self.out_dir.glob("sample-*.json"):
            f.rename(self.out_dir / f"{prefix}-{f.name}")

    def close_debugger(self) -> None:
        if self.prepared is not None:
            self.prepared.close()
            self.prepared = None

    def keep_symbols(self, w: Watch) -> None:
        if w.syms.complete(symcache.LAST_BLOB) and self.syms_path is None:
            self.syms_path = symcache.store(self.kernel.key, w.syms.blobs)
            done = w.syms.arrived[symcache.LAST_BLOB]
            took = done - w.agent.hello_at if w.agent.hello_at else 0
            info = w.agent.syms_info
            self.echo(f"symbols captured: {info.get('lines', '?')} text symbols "
                      f"({int(info.get('bytes', 0)) / 1e6:.1f} MB), {info.get('data_lines', '?')} variables, "
                      f"BTF {int(info.get('btf_bytes', 0)) / 1e6:.1f} MB; guest export {info.get('ms', '?')} ms, "
                      f"host receipt {took:.2f}s after hello")



    def debugger(self) -> dict:
        """What a debugger attached to the held guest loads (harness/drivers/attach.py)."""
        t = self.debug_target()
        return {"arch": t.arch.name, "symbols": str(t.symbols or ""), "layout": str(t.layout or ""),
                "vmlinux": str(t.vmlinux or debuginfo.cached_vmlinux(self.kernel) or "")}


    def variables(self) -> kernel_waits.Variables | None:
        """The kernel's variables, which name the locks CPUs spin on."""
        reading = self._reading_variables()
        return reading.result(BACKGROUND_BOUND_S) if reading else None

    def _reading_variables(self) -> background.Pending[kernel_waits.Variables | None] | None:
        if self._variables is None and self.syms_path is not None:
            self._variables = background.Pending(kernel_waits.Variables.load, self.syms_path)
        return self._variables

    def note_hang(self, w: Watch, outcome: Outcome, next_step: str) -> float:
        """Detection timings of a freeze or stuck run; the last sign of life."""
        since = (w.agent.last_hb_at if outcome.kind == OutcomeKind.FREEZE else w.agent.count_changed_at) or outcome.at
        self.timings["detection_latency_s"] = round(outcome.at - since, 3)
        if w.agent.repro_started_at:
            self.timings["hang_after_s"] = round(max(since - w.agent.repro_started_at, 0), 3)
        self.echo(f"{outcome.kind}: {outcome.detail}; {next_step}")
        return since
