# SPDX-License-Identifier: GPL-2.0
"""One attempt of a verify run: the guest booted (or restored at its agent's
gate), the reproducer started with the GO, watched to an outcome; a hang read
(every vCPU with GDB, or a user-space reproducer's threads through its core)
and classified; a latency stall measured; the verdict.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import shlex
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from harness.analysis import (classify, console, cpu_state, kernel_waits, latency, pmiss, reach, sleeping, starvation,
                              syzbot, task_waits, thread_hang)
from harness.analysis.classify import Role
from harness.analysis.decide import decide
from harness.analysis.findings import Findings, ProcessReading
from harness.analysis.hang_kinds import Reading, way_for
from harness.analysis.outcome import NO_AGENT, Outcome, OutcomeKind
from harness.analysis.retry import Retry
from harness.analysis.verdict import Verdict
from harness.base import arch as arches
from harness.base import background, guest_env, paths, reproducers, syscall_numbers
from harness.base.kernel_cache import KernelKey
from harness.base.reproducers import HangIn
from harness.base.syzkaller import titles_of
from harness.base.procs import Interrupted
from harness.analysis.kallsyms import Kallsyms
from harness.debug import inlines, process, vcpus as debug, vmcore
from harness.drivers import layouts
from harness.drivers.case import Case
from harness.drivers.options import FREEZE_CEILING, FREEZE_FLOOR, Options
from harness.guest import hold, hostfs, machine, snapshot
from harness.guest.cores import Gate
from harness.guest.hostwait import HostWait
from harness.guest.nmi import NmiInjector
from harness.guest.qmp import QMPError
from harness.guest.vm import VM, VMConfig, VMError
from harness.guest.watch import Calls, Limits, Watch
from images.kernels import debuginfo, module_tree, symcache
from images.kernels.kernel import SpecError

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
# false_alarms_allowed's figures (thresholds double at each look: a true hang costs two longer looks at most)
FALSE_ALARMS, FALSE_ALARMS_BUSY, HOST_BUSY_SHARE = 2, 4, 0.25


def kernel_cmdline(m: machine.Machine, extra: str) -> str:
    """The same for every reproducer, so that one snapshot of a kernel serves
    them all: what to run comes with the GO at the agent's gate."""
    return m.kernel_cmdline("kstall.gate=1", extra)


def go_params(repro: reproducers.Reproducer, args: list[str], want_syms: bool) -> str:
    """The GO line's parameters (repro/agent/agent.h): what to run, and a fresh RNG
    seed, since every guest restored from one snapshot has the same one."""
    if any("," in a or " " in a for a in args):
        raise SpecError("reproducer arguments may not contain commas or spaces")
    return (f"repro={repro.binary} args={','.join(args)} syms={int(want_syms)} "
            f"seed={os.urandom(32).hex()}")


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


@dataclass
class Plan:
    """What one attempt's guest runs, and how it is watched."""
    target: int       # passes over the path the reproducer is asked for (0: as many as its time allows)
    duration: float   # its time limit
    cpus: int
    go: str           # the GO line's parameters
    vm: VMConfig
    limits: Limits

    def until(self, count_name: str) -> str:
        """'until 10000 REFRESH cycles or 30s', 'again and again for 3s'"""
        if self.target:
            return f"until {self.target} {count_name} or {self.duration:.0f}s"
        return f"again and again for {self.duration:g}s"


def make_plan(c: Case, opts: Options, out_dir: Path, want_syms: bool) -> Plan:
    repro, disk = c.repro.spec, c.disk
    target = opts.run.count or max(repro.min_count, pmiss.count_for(c.calibration, opts.run.pmiss_target))
    env = guest_env.get(repro.env) if repro.env else None
    duration = opts.run.duration or (env.seconds_for(c.accel) if env else repro.max_seconds)
    extra = " ".join(a for a in (disk.cmdline if disk else "", *c.check.cmdline, opts.guest.cmdline_extra) if a)
    cpus = c.cpus
    m = machine.for_kernel(c.kernel)
    cfg = VMConfig(kernel=m.boot_file(c.kernel), initrd=c.initrd, cmdline=kernel_cmdline(m, extra), log_dir=out_dir,
                   cpus=cpus, memory_mb=c.memory_mb, accel=c.accel, machine=m.name, arch=m.arch,
                   extra_args=disk.qemu_args() if disk else [], host_fs=bool(repro.command), disks=c.disks)
    # a program run for its time (a guest environment's) completes no count to watch: its
    # hangs are the kernel's detectors', a freeze, a task asleep
    stuck_after = math.inf if repro.timebox else opts.run.stuck_after or repro.stuck_after_s
    confirm = env.confirm_for(c.accel, opts.run.hang_after) if env else ()
    # after its time: the kernel's time to report a task asleep then, a candidate's to
    # become a hang (the kill is held meanwhile), and the tasks that do not die their time to
    after = env.detect_s + max((r.hang_s for r in confirm), default=0) + env.dying_s if env else 0
    limits = Limits(boot_timeout=opts.run.boot_timeout, freeze_after=opts.run.freeze_after or FREEZE_CEILING,
                    freeze_floor=None if opts.run.freeze_after else FREEZE_FLOOR,
                    stuck_after=stuck_after, run_timeout=duration + 60 + after,
                    stalls=repro.stall.min_stalls if repro.stall else 0,
                    stall_measure=repro.stall.measure if repro.stall else "",
                    report_ends=env.report_ends if env else (), confirm=confirm)
    if repro.generic and (opts.run.duration or repro.timebox) and not opts.run.count:
        target = 0  # --duration alone: again and again until the time is up
    go = go_params(repro, [] if repro.command else repro_arguments(repro, opts, target, duration), want_syms)
    go += f" {starvation.rules().go_param()}"
    if repro.generic:  # the agent repeats it: until target runs or the time is up, whichever comes first
        go += f" repeat={target or UNTIL_THE_TIME_IS_UP} seconds={math.ceil(duration)}"
    if env:
        go += f" dying={math.ceil(env.dying_s)} detect={math.ceil(env.detect_s)}"
    if repro.sleep_after_s:
        go += f" sleep={math.ceil(repro.sleep_after_s)}"
    if repro.command:  # the user's arguments join the command, which travels hex-encoded
        command = " ".join([repro.command, *(shlex.quote(a) for a in opts.run.repro_args)])
        go += f" hostfs={hostfs.TAG} cmd={command.encode().hex()} cwd={repro.cwd.encode().hex()}"
    return Plan(target, duration, cpus, go, cfg, limits)


def repro_arguments(repro: reproducers.Reproducer, opts: Options, target: int, duration: float) -> list[str]:
    """The reproducer's command line: stop conditions (none for a program
    that knows nothing of kstall), its defaults, the stall threshold from its
    data file, then the user's arguments (which win)."""
    return [*([repro.count_arg, str(target)] if repro.count_arg else []),
            *([repro.duration_arg, f"{duration:g}"] if repro.duration_arg else []),
            *repro.arguments(opts.run.repro_args)]


# the agent's repeat= for "as many runs as the time allows"
UNTIL_THE_TIME_IS_UP = 1 << 62


class _Run:
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

    def debug_hang(self, vm: VM, w: Watch, outcome: Outcome) -> bool:
        """GDB samples of every vCPU; whether they settle the run: a culprit
        (victims alone may be a stall that ends, which the reproducer's own
        measurement then reports), or no samples at all. For a reproducer
        with no signatures of its own, a culprit the CPUs' states name
        (cpu_state.py) settles it too."""
        since = self.note_hang(w, outcome, "reading every vCPU with gdb")
        t = time.monotonic()
        prepared, self.prepared = self.prepared, None
        self.samples = debug.sample(vm.gdb_socket, vm.qmp, self.out_dir, self.debug_target(), self.opts.debug.samples,
                                    self.opts.debug.sample_interval, resume=True, prepared=prepared,
                                    console=vm.console_log, qemu_gone=vm.gone,
                                    host_delay=self.host_wait.silence if self.host_wait else None)
        self.timings["debug_s"] = round(time.monotonic() - t, 2)
        # a lower bound on the hang: from the last sign of life to the last sample
        self.timings["hang_observed_s"] = round(time.monotonic() - since, 2)
        self.classes = classify.classify_samples(self.samples.dumps, self.sigs)
        if not self.samples.dumps:
            return True
        hang = cpu_state.analyze(self.samples.dumps, self.classes, variables=self.variables())
        cpu_state.note_waits(self.classes, hang)
        if any(c.signature.role == Role.CULPRIT for c in self.classes):
            return True
        self.hang = hang
        return bool(self.hang.culprits) and not self.own_bug

    def hand_over(self, vm: VM, outcome: Outcome, interrupted: BaseException | None) -> bool:
        """A hang's guest, once read: stopped, written as a core (--vmcore);
        whether it is to be held for the developer's debugger (--hold)."""
        d = self.opts.debug
        if not outcome.kind.handed_over or interrupted is not None or not vm.alive() or \
                (not d.vmcore and d.hold is None):
            return False
        try:
            vm.qmp.cmd("stop")
        except (QMPError, OSError) as e:
            self.echo(f"could not stop the guest to hand it over ({e})")
            return False
        if d.vmcore:
            self.echo("writing the guest's memory and registers to vmcore")
            v = self.variables()
            try:
                lay = self.layout()
                self.vmcore = vmcore.write(vm, self.out_dir, arches.get(self.kernel.arch),
                                           v.symbols.by_name.get("vmcoreinfo_note") if v else None, vm.cfg.cpus,
                                           json.loads(lay.read_text()) if lay else None)
            except Exception as e:  # noqa: BLE001 - the core is an extra: the verdict stands without it
                self.vmcore = {"error": f"internal error: {type(e).__name__}: {e}"}
            self.echo(f"vmcore: {self.vmcore['error']}" if "error" in self.vmcore else
                      f"vmcore: {self.vmcore['disk_bytes'] / 1e6:.0f} MB on disk "
                      f"({self.vmcore['bytes'] / 1e6:.0f} MB ELF) in {self.vmcore['seconds']}s"
                      + (f"; {self.vmcore['missing']}" if self.vmcore.get("missing") else ""))
        return d.hold is not None

    def debugger(self) -> dict:
        """What a debugger attached to the held guest loads (harness/drivers/attach.py)."""
        t = self.debug_target()
        return {"arch": t.arch.name, "symbols": str(t.symbols or ""), "layout": str(t.layout or ""),
                "vmlinux": str(t.vmlinux or debuginfo.cached_vmlinux(self.kernel) or "")}

    def read_wait_graph(self, vm: VM, w: Watch) -> dict:
        """Who holds what the guest's sleeping tasks wait for (task_waits.py),
        once per run: its tasks and locks read with the guest stopped, then
        the agent's stacks of the tasks that graph names."""
        if self.wait_graph is not None:
            return self.wait_graph
        if self.syms_path is None and w.want_syms:  # a kernel's first run: its symbols may be on their way
            self.echo(f"waiting up to {SYMBOLS_BOUND_S:g}s for the kernel's symbols and BTF (its first run here), "
                      "to read who holds what the sleeping tasks wait for")
            w.wait_for_blob(symcache.LAST_BLOB, SYMBOLS_BOUND_S)
            self.keep_symbols(w)
        lay = self.layout()
        if lay is None:
            self.wait_graph = {"error": "the kernel's symbols and BTF were not captured"}
            return self.wait_graph
        t = time.monotonic()
        try:
            vm.qmp.cmd("stop")
            try:
                order = arches.get(self.kernel.arch).monitor_byteorder
                doc = task_waits.read(lambda a, k: debug.hmp_bytes(vm.qmp, 0, a, k, order),
                                      json.loads(lay.read_text()), vm.cfg.cpus,
                                      Kallsyms.load(self.syms_path) if self.syms_path else None)
            finally:
                vm.qmp.cmd("cont")
        except (QMPError, OSError) as e:
            doc = {"error": f"QEMU did not answer while the tasks were read ({e})"}
        read_s = round(time.monotonic() - t, 2)
        if doc.get("tasks"):
            task_waits.with_stacks(doc, w.ask_tasks([task["pid"] for task in doc["tasks"]]))
            names = kernel_waits.LockNames(v, []) if (v := self.variables()) else None
            for wait in doc["waits"]:
                if names and "lock" in wait and (name := names.name(int(wait["lock"], 16))):
                    wait["name"] = name
        doc["read_s"], doc["total_s"] = read_s, round(time.monotonic() - t, 2)
        self.timings["wait_graph_s"] = doc["total_s"]
        graph = task_waits.Graph(doc)
        findings = graph.roots() + [graph.cpus_text(), doc.get("walk_stopped", "")] if "error" not in doc else []
        doc["findings"] = [f for f in findings if f]
        self.wait_graph = doc
        self.echo(f"who holds what the sleeping tasks wait for ({doc['total_s']}s): "
                  + ("; ".join(doc["findings"]) or doc.get("error") or
                     f"no task in D state waits on a lock ({len(doc.get('tasks', []))} in D state)"))
        return doc

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

    def dump_process(self, w: Watch, outcome: Outcome) -> None:
        """A stuck user-space reproducer with a healthy kernel: its threads,
        through the kernel's core of it and GDB, then the hang class."""
        self.dumped = True
        self.note_hang(w, outcome, "dumping the reproducer's threads (core to the host, gdb)")
        t = time.monotonic()
        core = w.take_core()
        self.timings["core_s"] = round(time.monotonic() - t, 2)
        if core is None:
            why = w.unanswered or w.agent.core_info.get('error', 'timed out')
            self.process_error = f"no core of the reproducer arrived ({why})"
            return
        core_path = self.out_dir / "core"
        core_path.write_bytes(core)
        exe = Path(self.repro.program) if self.repro.program else \
            paths.guest_dir(self.kernel.arch) / Path(w.agent.core_info.get("exe") or self.repro.binary).name
        t = time.monotonic()
        try:
            dump = process.dump_core(core_path, exe, self.out_dir / "gdb-threads.log", w.agent.proc_threads,
                                     hook=self.opts.hooks.on_thread_command, gdb_name=arches.get(self.kernel.arch).gdb)
        except process.DumpError as e:
            self.process_error = str(e)
            return
        self.timings["thread_dump_s"] = round(time.monotonic() - t, 2)
        (self.out_dir / "thread-dump.json").write_text(json.dumps(dump.to_json(), indent=1) + "\n")
        self.process = thread_hang.analyse(dump, w.agent.proc_threads)
        doc = self.process.to_json() | {"core": core_path.name, "exe": str(exe), "core_bytes": len(core),
                                        "dump_errors": dump.errors, "gdb_starts": dump.gdb_starts}
        (self.out_dir / "threads.json").write_text(json.dumps(doc, indent=2) + "\n")
        (self.out_dir / "threads.txt").write_text(self.process.table())


def run_attempt(c: Case, opts: Options, out_dir: Path, echo: Echo, number: int = 1) -> Attempt:
    kernel, repro, disk = c.kernel, c.repro.spec, c.disk
    r = _Run(c, opts, out_dir, echo)
    plan = make_plan(c, opts, out_dir, r.syms_path is None)
    t0 = time.monotonic()
    gate = Gate(opts.hooks.budget, plan.cpus, opts.hooks.cancel) if opts.hooks.budget else None  # waits for a boot core
    # GDB loads the kernel's symbols while the guest is restored (a matrix cell
    # waiting at a gate starts it with its reproducer; one that measures
    # latencies starts it only once a hang is suspected: its load is host noise)
    early_gdb = repro.stall is None
    if early_gdb and gate is None:
        r.prepare_debugger()
    patterns = background.Pending(console.default_patterns)  # compiled while QEMU starts or restores
    # an image's disk changes as it boots, and a vhost-user device (the host's
    # root for a host command) cannot be migrated: their guests always boot cold,
    # as do those of an architecture whose machine QEMU does not restore whole (arches.toml)
    try:
        vm, snap, restored = start_guest(plan.vm, kernel.key, opts.guest.snapshot and disk is None and not
                                         plan.vm.host_fs and arches.get(plan.vm.arch).snapshot, echo)
    except BaseException:
        if gate:
            gate.close()
        r.close_debugger()
        raise
    saved: dict = {}
    held = False  # the guest outlives this function: verify stops it after the hold
    try:
        with contextlib.ExitStack() as stack:
            if gate:
                stack.callback(gate.close)
            nmi = NmiInjector(vm.qmp, repro.nmi_rate, plan.duration + 30)
            stack.callback(nmi.stop)
            stack.callback(r.close_debugger)

            def on_line(line: str) -> None:
                if line.startswith("# nmi-source: inject") and repro.nmi_rate:
                    nmi.start()
                    echo(f"no PMU in the guest: injecting {repro.nmi_rate:g} NMIs/s over QMP (they land on CPU0)")
                elif line.startswith("# nmi-source: stop"):
                    nmi.stop()  # the reproducer is done with them

            def save() -> None:
                try:
                    saved.update(snap.save(vm, {"kernel": kernel.canonical, "kernel_sha256": kernel.sha256,
                                                "hello": w.agent.hello, "shape": vm.shape()}))
                    echo(f"saved a snapshot at the agent's gate ({(saved['bytes'] + saved['ram_bytes']) / 1e6:.0f} MB "
                         f"in {saved['save_s']}s): later runs of this kernel restore it")
                    snapshot.prune()
                except snapshot.SnapshotError as e:
                    echo(f"could not save a snapshot ({e}): later runs boot cold")
            echo(f"{'restored' if restored else 'booting'} {kernel.canonical} ({plan.cpus} vCPUs, {c.accel.upper()}), "
                 f"{repro.name} {plan.until(repro.count_name)}{c.check.boot_note()}")
            def hook() -> None:
                r.host_wait = HostWait(vm.proc.pid if vm.proc else None)
                r.host_wait.start()
                stack.callback(r.host_wait.stop)
                calls.host_delay = r.host_wait.silence  # a silence the host made is no freeze
                if early_gdb:  # if not yet: GDB starts with the reproducer, ready when a hang comes
                    r.prepare_debugger()
                if opts.hooks.on_repro_start:
                    opts.hooks.on_repro_start(vm, number)
            calls = Calls(on_repro_start=hook, on_line=on_line, on_ready=save if snap and restored is None else None,
                          on_suspect=r.prepare_debugger, on_hung_task=lambda: r.read_wait_graph(vm, w))
            w = Watch(vm, plan.limits, patterns.result(BACKGROUND_BOUND_S), echo=echo, calls=calls, gate=gate,
                      cancel=opts.hooks.cancel, go=plan.go, restored=restored, want_syms=r.syms_path is None)
            outcome, raise_later = watch_until_decided(r, vm, w, nmi)
            r.keep_symbols(w)
            held = r.hand_over(vm, outcome, raise_later)
    finally:
        if not held:
            vm.stop()
    try:
        a = conclude(r, w, plan, outcome, t0, nmi.summary() if nmi.started_at else None)
    except BaseException:
        if held:
            vm.stop()
        raise
    a.interrupted, a.snapshot, a.vmcore = raise_later, snapshot_doc(snap, restored, saved), r.vmcore
    if held:
        a.held = hold.Held(vm, r.opts.debug.hold or 0, r.debugger())
    # the snapshot's fault: the next boots cold. A restored guest whose agent kept its
    # heartbeat but never answered the core request is one (a debian:6.1.176 s390x snapshot
    # did that on every restore; the same guest booted cold, and its new snapshot, answered)
    if restored is not None and (outcome.kind == OutcomeKind.BOOT_FAILURE or w.unanswered):
        if w.unanswered:
            echo(f"{w.unanswered}: removed the snapshot it was restored from, the next attempt boots cold")
        snap.discard()
        a.verdict.retry = Retry.SNAPSHOT
    return a


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


def detectors_wait(r: _Run, vm: VM, w: Watch, outcome: Outcome) -> float:
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


def seen_again(r: _Run, w: Watch, outcome: Outcome, host_share: float | None, looks: int) -> bool:
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


def watch_until_decided(r: _Run, vm: VM, w: Watch, nmi: NmiInjector) -> tuple[Outcome, BaseException | None]:
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
            if way is None:
                return where_it_booted(r, vm, outcome), None
            if way.reading != Reading.VCPUS:
                READERS[way.reading](r, vm, w, outcome)
                return outcome, None
            # a program run for its time goes on to its end whatever a silence was: its
            # hangs are the kernel detectors' to report (at most twice wider)
            allowed = false_alarms_allowed(share)
            settled = r.debug_hang(vm, w, outcome)
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


def where_it_booted(r: _Run, vm: VM, outcome: Outcome) -> Outcome:
    """A guest whose agent never spoke: where its vCPUs were, read over QMP
    before QEMU is stopped (firmware, the decompressor, the kernel and
    where in it), in the outcome and the run's sample-0.json. Twice a cold
    boot's console stayed empty for its 120 s, and nothing said where."""
    if outcome.kind != OutcomeKind.BOOT_FAILURE or not outcome.detail.startswith(NO_AGENT) or not vm.alive():
        return outcome
    a = arches.get(r.kernel.arch)
    try:
        vm.qmp.cmd("stop", timeout=10)
        doc = debug.sample_with_qmp(vm.qmp, r.out_dir, Kallsyms.load(r.syms_path) if r.syms_path else None, 0, a)
    except (QMPError, OSError) as e:
        return Outcome(outcome.kind, f"{outcome.detail}; its vCPUs could not be read ({e})", outcome.at)
    where = "; ".join(f"CPU{c['cpu']} at {c['frames'][0]['text'] if c['frames'] else c['regs'].get(a.pc, '?')}"
                      f"{' (user mode)' if a.in_user_mode({k: int(v, 16) for k, v in c['regs'].items()}) else ''}"
                      for c in doc["cpus"])
    return Outcome(outcome.kind, f"{outcome.detail}; its vCPUs then: {where or 'none answered'}", outcome.at)


def _read_threads(r: _Run, vm: VM, w: Watch, outcome: Outcome) -> None:
    r.dump_process(w, outcome)


def _read_vcpus_then_threads(r: _Run, vm: VM, w: Watch, outcome: Outcome) -> None:
    if not r.debug_hang(vm, w, outcome):
        r.dump_process(w, outcome)


def _read_tasks(r: _Run, vm: VM, w: Watch, outcome: Outcome) -> None:
    """The agent said which tasks sleep and where; the kernel's memory, who
    holds what they wait for."""
    r.hang = sleeping.SleepingHang.named(list(w.agent.sleeping), r.sigs)
    r.note_hang(w, outcome, "titled from the kernel stacks the agent read; reading who holds what they wait for")
    r.hang.graph = r.read_wait_graph(vm, w)


def _read_histograms(r: _Run, vm: VM, w: Watch, outcome: Outcome) -> None:
    """Decided by the reproducer's own measurement, after the stall ended: no
    stacks to read, but its final histograms."""
    r.echo(f"{outcome.detail}: ending the run to collect its histograms")
    w.finish()


def _read_report(r: _Run, vm: VM, w: Watch, outcome: Outcome) -> None:
    """The kernel's detector said it, with its stacks, on the console; for a
    hung task, the kernel's memory says who holds what it waits for."""
    r.note_hang(w, outcome, "the kernel's own report is the evidence")
    if any(rep.name == "hung-task" for rep in w.console.reports):
        r.read_wait_graph(vm, w)


# one reader per hang_kinds.Reading but VCPUS, which the watch loop drives (it may resume)
READERS: dict[Reading, Callable[[_Run, VM, Watch, Outcome], None]] = {
    Reading.REPORT: _read_report,
    Reading.THREADS: _read_threads,
    Reading.VCPUS_THEN_THREADS: _read_vcpus_then_threads,
    Reading.TASKS: _read_tasks,
    Reading.HISTOGRAMS: _read_histograms,
}


def conclude(r: _Run, w: Watch, plan: Plan, outcome: Outcome, t0: float,
             nmi: dict | None) -> Attempt:
    """The attempt's timings, its stall measurement (and chart), its verdict."""
    watch_doc = w.summary() | {"nmi": nmi, "silences": r.silences}
    r.timings.update({"boot_s": round(w.agent.hello_at - t0, 2) if w.agent.hello_at else None,
                      "gate_wait_s": watch_doc["gate_wait_s"],
                      "to_outcome_s": round(outcome.at - t0, 2),
                      "repro_s": round(outcome.at - w.agent.repro_started_at, 2) if w.agent.repro_started_at else None,
                      "total_s": round(time.monotonic() - t0, 2)})
    if (share := r.host_wait_share(w, outcome)) is not None:  # P(miss) reads it
        r.timings["vcpu_host_wait_share"] = share
    repro = r.repro
    stall = latency.evidence(repro.stall, w.agent.ktap.lines, w.agent.progress, r.host_wait_during(w, outcome)) \
        if repro.stall else None
    if stall:
        if outcome.kind.hang:
            stall["frozen_s"] = r.timings.get("hang_observed_s")
        if stall["data"]["paths"]:
            chart = latency.svg(stall["data"], stall["threshold_ms"], stall["titles"],
                                f"{r.kernel.canonical}: {stall['title']}")
            if chart:
                (r.out_dir / "latency.svg").write_text(chart)
    report_reason = next((rep.reason for rep in w.console.reports if rep.kind == OutcomeKind.INFRA), "")
    pm = pmiss.p_miss(r.case.calibration, w.agent.count, repro.count_name, r.case.pmiss_unknown,
                      r.timings.get("vcpu_host_wait_share"))
    reports = watch_doc["console_reports"] = with_inlines(r, [rep.to_json() for rep in w.console.reports])
    v = decide(Findings(outcome, repro, w.agent.ktap, w.agent.count, r.own_bug, pm, r.opts.run.pmiss_target,
                        r.opts.run.pmiss_given, r.classes, r.samples.errors if r.samples else [], report_reason,
                        stall, ProcessReading(r.process, r.process_error) if r.dumped else None, r.hang,
                        ended_by(repro, plan, w.agent.count), reports,
                        reached := program_reach(r, w), w.agent.leftovers,
                        starved := starvation.judge(w.agent.health, reached, cpus=plan.cpus), r.silences,
                        candidates=w.candidates.to_json()))
    return Attempt(v, outcome, watch_doc, r.classes, r.samples, r.timings, plan.vm.cmdline, plan.target,
                   process=r.process, process_error=r.process_error, go=plan.go, stalls=stall, hang=r.hang,
                   accel=plan.vm.accel, reach=reached.to_json() if reached else None, wait_graph=r.wait_graph,
                   health=({"agent": w.agent.health} | (starved.to_json() if starved else {}))
                   if w.agent.health else None)


def with_inlines(r: _Run, reports: list[dict]) -> list[dict]:
    """A syzkaller reproducer's titled reports with the functions the build
    inlined into their frames ("inlined"), when kstall has the kernel's debug
    info: syzbot names a hang after those too (harness/debug/inlines.py)."""
    titled = [rep for rep in reports if rep.get("kind") in console.TITLED_KINDS]
    vmlinux = debuginfo.cached_vmlinux(r.kernel) if titled and r.repro.syzbot else None
    if vmlinux is None or r.syms_path is None:
        return reports
    syms = Kallsyms.load(r.syms_path)
    for rep in titled:
        rep["inlined"] = inlines.inlined(inlines.addresses(rep.get("excerpt", []), syms), vmlinux)
    # a module's debug file is a stream of the whole -dbg package (a minute): only where it may matter
    unnamed = syzbot.unnamed(titles_of(r.repro.syzbot), titled)
    in_modules = [inlines.module_frames(rep.get("excerpt", [])) for rep in unnamed]
    kos = module_debug_files(r, {m for frames in in_modules for m in frames})
    for rep, frames in zip(unnamed, in_modules):
        rep["inlined"] += [f for m, at in frames.items() if m in kos for f in inlines.inlined_in_module(at, kos[m])]
    return reports


def module_debug_files(r: _Run, names: set[str]) -> dict[str, Path]:
    """The debug files of the modules a report's frames are in, fetched the
    first time (about a minute per kernel and set of modules); without them,
    those frames' inlined functions are unknown, and the run goes on."""
    try:
        return debuginfo.module_files(r.kernel, names, progress=r.echo)
    except SpecError as e:
        r.echo(f"the functions inlined into the report's module frames are unknown: {e}")
        return {}


def program_reach(r: _Run, w: Watch) -> reach.Reach | None:
    """What a guest environment's agent said the program reached and lacked (reach.py)."""
    if not r.repro.env or not w.agent.env_lines:
        return None
    numbers = None  # a program of another ABI (a 32-bit one): the tracer named its calls by the native table
    if r.repro.abi:
        compat = arches.compat_of(r.repro.abi)
        numbers = syscall_numbers.table(compat["cc"], tuple(compat.get("cflags", []))) if compat else {}
        if not numbers:
            return None
    aliases = module_tree.aliases(r.kernel)
    try:
        source = Path(r.repro.source).read_text(errors="replace") if r.repro.source else ""
    except OSError:
        source = ""
    return reach.analyse(w.agent.env_lines, reach.program_calls(source), guest_env.get(r.repro.env),
                         reach.Aliases(aliases.read_text(errors="replace")) if aliases else None, numbers,
                         frozenset(reach.setup_calls(source)), r.kernel.config_value if r.kernel.config else None,
                         reach.program_strings(source), reach.pseudo_calls(source))


def snapshot_doc(snap: snapshot.Snapshot | None, restored: dict | None, saved: dict) -> dict | None:
    """run.json's vm.snapshot: the snapshot restored from, or saved to."""
    if snap is None:
        return None
    return {"key": snap.key, "restored": restored is not None} | (
        {"saved_s": saved["save_s"], "bytes": saved["bytes"] + saved["ram_bytes"]} if saved else {})


def ended_by(repro: reproducers.Reproducer, plan: Plan, count: int) -> str:
    """For a program run again and again: which of its limits ended it."""
    if not repro.generic:
        return ""
    if plan.target and count >= plan.target:
        return f"its {plan.target} {repro.count_name} were done before its {plan.duration:g}s were up"
    return f"its {plan.duration:g}s were up" + (f" before its {plan.target} {repro.count_name}" if plan.target else "")


def start_guest(cfg: VMConfig, kernel: KernelKey, use_snapshot: bool,
                echo: Echo) -> tuple[VM, snapshot.Snapshot | None, dict | None]:
    """QEMU started: restored from the kernel's snapshot when there is one, or
    booting cold (and a snapshot to save at the gate); a snapshot that does not
    load is removed. Returns the VM, its snapshot and, when restored, the
    agent's hello recorded with it."""
    vm = VM(cfg)
    snap = snapshot.for_vm(vm, kernel) if use_snapshot else None
    meta = snap.meta() if snap else None
    if meta is not None:
        warm = VM(dataclasses.replace(cfg, restore_from=snap.state, restore_ram=snap.ram))
        snap.start_console_log(cfg.log_dir / "console.log")
        try:
            warm.start()
            snapshot.wait_restored(warm)
            vm.stop()  # never started: only its run directory goes
            return warm, snap, meta.get("hello") or {}
        except (VMError, snapshot.SnapshotError) as e:
            fault = warm.outside_fault()
            warm.stop()
            if fault:  # not the snapshot's fault: it stays
                vm.stop()
                raise (e if isinstance(e, VMError) else VMError(f"{fault} while it loaded the snapshot")) from None
            snap.discard()
            (cfg.log_dir / "console.log").unlink(missing_ok=True)
            echo(f"the snapshot {snap.state.name} did not load ({e}): removed it, booting cold")
        except BaseException:  # Ctrl-C while it loads
            warm.stop()
            vm.stop()
            raise
    vm.cfg.shared_ram = snap is not None  # saved at the gate: its RAM must be readable
    try:
        vm.start()
    except BaseException:
        vm.stop()
        raise
    return vm, snap, None


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
