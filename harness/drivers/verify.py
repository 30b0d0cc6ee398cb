# SPDX-License-Identifier: GPL-2.0
"""verify: one pass of the pipeline, kernel + reproducer -> verdict + run directory.

    kernel spec -> vmlinuz (+ cached symbols) -> QEMU -> watch -> (freeze or
    stuck: GDB samples -> classify) -> verdict -> results/<run-id>/

An emulator fault (the TCG int3 text-patching oops) is retried; every
attempt's files are kept.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import subprocess
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from harness.guest import accel, snapshot
from harness.analysis import classify, console, latency, pmiss, thread_hang
from harness.debug import process, vcpus as debug
from harness.base import paths, procs, reproducers, rundir as results
from harness.drivers import preflight
from images import symcache
from harness.guest.cores import Cancelled, CoreBudget, Gate
from harness.guest.nmi import NmiInjector
from harness.base.procs import Interrupted
from harness.analysis.verdict import Verdict, decide
from harness.guest.vm import VM, VMConfig, VMError
from harness.analysis.outcome import Outcome
from harness.guest.watch import Limits, Watch
from images import boot_image, initramfs
from images.build import BuildOptions
from images.kernel import Kernel, SpecError
from images.schemes import resolve

Echo = Callable[[str], None]


@dataclass
class Options:
    cpus: int | None = None
    memory_mb: int = 1024
    accel: str = "auto"
    duration: float | None = None
    count: int | None = None
    pmiss_target: float = 1e-6
    repro_args: list[str] = field(default_factory=list)
    samples: int = 3
    sample_interval: float = 0.2
    freeze_after: float = 0.8
    stuck_after: float | None = None
    boot_timeout: float = 120.0
    attempts: int = 2
    vmlinux: Path | None = None
    results_root: Path | None = None
    cmdline_extra: str = ""
    # build: kernels: the user's config fragments, --debuginfo, jobs
    build: BuildOptions | None = None
    # in-process API: called with (vm, attempt number) once the reproducer runs
    on_repro_start: Callable[[VM, int], None] | None = None
    # shared by guests running side by side (matrix): boot ahead, run in turn
    budget: CoreBudget | None = None
    # set by another thread to end the run (reported as interrupted)
    cancel: threading.Event | None = None
    # image: kernels: boot the image's own initrd and userspace (images/boot_image.py)
    boot_image: bool = False
    # in-process API: called before each GDB command of a process thread dump
    # (harness/debug/process.py; tests make GDB fail on one thread with it)
    on_thread_command: process.CommandHook | None = None
    # restore the kernel's guest saved at its agent's gate (harness/guest/snapshot.py); False boots cold
    snapshot: bool = True


@dataclass
class Result:
    verdict: Verdict
    run_dir: Path | None
    doc: dict


def ensure_guest(echo: Echo) -> None:
    """Build the guest binaries if they are missing or stale (cheap when not)."""
    p = subprocess.run(["make", "-q", "-C", str(paths.REPO), "guest"], capture_output=True)
    if p.returncode == 0:
        return
    echo("building guest binaries (make guest)")
    p = subprocess.run(["make", "-C", str(paths.REPO), "guest"], capture_output=True, text=True)
    if p.returncode != 0:
        raise SpecError(f"`make guest` failed:\n{p.stdout[-2000:]}{p.stderr[-2000:]}")


def kernel_cmdline(extra: str) -> str:
    """The same for every reproducer, so that one snapshot of a kernel serves
    them all: what to run comes with the GO at the agent's gate."""
    parts = ["console=ttyS0", "nokaslr", "quiet", "panic=-1", "tsc=reliable", "kstall.gate=1"]
    return " ".join(parts + ([extra] if extra else []))


def go_params(repro: reproducers.Reproducer, args: list[str], want_syms: bool) -> str:
    """The GO line's parameters (repro/agent.c): what to run, and a fresh RNG
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


def repro_arguments(repro: reproducers.Reproducer, opts: Options, target: int, duration: float) -> list[str]:
    """The reproducer's command line: stop conditions, its defaults, the stall
    threshold from its data file, then the user's arguments (which win)."""
    args = [repro.count_arg, str(target), repro.duration_arg, f"{duration:g}", *repro.default_args]
    for path in repro.stall.paths if repro.stall else ():
        args += [path.arg, f"{path.threshold_ms:g}"]
    return args + list(opts.repro_args)


class _Run:
    """The mutable parts of one attempt, so that its steps can be small."""

    def __init__(self, kernel: Kernel, repro: reproducers.Reproducer, opts: Options, out_dir: Path,
                 echo: Echo) -> None:
        self.kernel, self.repro, self.opts, self.out_dir, self.echo = kernel, repro, opts, out_dir, echo
        self.syms_path = symcache.cached(kernel.sha256)
        self.classes: list[classify.CpuClass] = []
        self.samples: debug.Samples | None = None
        self.timings: dict = {}
        self.process: thread_hang.Analysis | None = None
        self.process_error = ""
        self.prepared: debug.Prepared | None = None  # a GDB started while a hang is suspected

    def prepare_debugger(self) -> None:
        """A kernel hang may be coming: start GDB now, off the path to the verdict."""
        if self.prepared is None and self.repro.hang != "process" and self.syms_path is not None:
            self.prepared = debug.Prepared(self.out_dir / "gdb.log", self.syms_path,
                                           self.kernel.vmlinux or self.opts.vmlinux)

    def close_debugger(self) -> None:
        if self.prepared is not None:
            self.prepared.close()
            self.prepared = None

    def keep_symbols(self, w: Watch) -> None:
        if w.syms.data and self.syms_path is None:
            self.syms_path = symcache.store(self.kernel.sha256, w.syms.data)
            took = w.syms.done_at - w.hello_at if w.syms.done_at and w.hello_at else 0
            self.echo(f"symbols captured: {w.syms_info.get('lines', '?')} text symbols "
                      f"({int(w.syms_info.get('bytes', 0)) / 1e6:.1f} MB, guest export {w.syms_info.get('ms', '?')} ms, "
                      f"host receipt {took:.2f}s after hello)")

    def debug_hang(self, vm: VM, w: Watch, outcome: Outcome) -> bool:
        """GDB samples of every vCPU; whether they settle the run: a culprit
        (victims alone may be a stall that ends, which the reproducer's own
        measurement then reports), or no samples at all."""
        since = self.note_hang(w, outcome, "reading every vCPU with gdb")
        t = time.monotonic()
        prepared, self.prepared = self.prepared, None
        self.samples = debug.sample(vm.gdb_socket, vm.qmp, self.out_dir, self.syms_path,
                                    self.kernel.vmlinux or self.opts.vmlinux, self.opts.samples,
                                    self.opts.sample_interval, resume=True, prepared=prepared)
        self.timings["debug_s"] = round(time.monotonic() - t, 2)
        # a lower bound on the hang: from the last sign of life to the last sample
        self.timings["hang_observed_s"] = round(time.monotonic() - since, 2)
        self.classes = classify.classify_samples(self.samples.dumps, classify.load_signatures())
        return any(c.signature.role == "culprit" for c in self.classes) or not self.samples.dumps

    def note_hang(self, w: Watch, outcome: Outcome, next_step: str) -> float:
        """Detection timings of a freeze or stuck run; the last sign of life."""
        since = (w.last_hb_at if outcome.kind == "freeze" else w.count_changed_at) or outcome.at
        self.timings["detection_latency_s"] = round(outcome.at - since, 3)
        if w.repro_started_at:
            self.timings["hang_after_s"] = round(max(since - w.repro_started_at, 0), 3)
        self.echo(f"{outcome.kind}: {outcome.detail}; {next_step}")
        return since

    def dump_process(self, w: Watch, outcome: Outcome) -> None:
        """A stuck user-space reproducer with a healthy kernel: its threads,
        through the kernel's core of it and GDB, then the hang class."""
        self.note_hang(w, outcome, "dumping the reproducer's threads (core to the host, gdb)")
        t = time.monotonic()
        core = w.take_core()
        self.timings["core_s"] = round(time.monotonic() - t, 2)
        if core is None:
            self.process_error = f"no core of the reproducer arrived ({w.core_info.get('error', 'timed out')})"
            return
        core_path = self.out_dir / "core"
        core_path.write_bytes(core)
        exe = paths.guest_dir() / Path(w.core_info.get("exe") or self.repro.binary).name
        t = time.monotonic()
        try:
            dump = process.dump_core(core_path, exe, self.out_dir / "gdb-threads.log", w.proc_threads,
                                     hook=self.opts.on_thread_command)
        except process.DumpError as e:
            self.process_error = str(e)
            return
        self.timings["thread_dump_s"] = round(time.monotonic() - t, 2)
        (self.out_dir / "thread-dump.json").write_text(json.dumps(dump.to_json(), indent=1) + "\n")
        self.process = thread_hang.analyse(dump, w.proc_threads)
        doc = self.process.to_json() | {"core": core_path.name, "exe": str(exe), "core_bytes": len(core),
                                        "dump_errors": dump.errors, "gdb_starts": dump.gdb_starts}
        (self.out_dir / "threads.json").write_text(json.dumps(doc, indent=2) + "\n")
        (self.out_dir / "threads.txt").write_text(self.process.table())


def run_attempt(kernel: Kernel, repro: reproducers.Reproducer, opts: Options, accel_kind: str,
                initrd: Path, out_dir: Path, echo: Echo, number: int = 1,
                disk: boot_image.BootDisk | None = None) -> Attempt:
    cal = pmiss.load(repro.name)
    target = opts.count or max(repro.min_count, pmiss.count_for(cal, opts.pmiss_target))
    duration = opts.duration or repro.max_seconds
    r = _Run(kernel, repro, opts, out_dir, echo)
    extra = " ".join(a for a in (disk.cmdline if disk else "", opts.cmdline_extra) if a)
    cmdline = kernel_cmdline(extra)
    go = go_params(repro, repro_arguments(repro, opts, target, duration), r.syms_path is None)
    cpus = opts.cpus or repro.default_cpus
    cfg = VMConfig(kernel=kernel.boot_file(), initrd=initrd, cmdline=cmdline, log_dir=out_dir, cpus=cpus,
                   memory_mb=opts.memory_mb, accel=accel_kind, machine=kernel.machine(),
                   extra_args=disk.qemu_args() if disk else [])
    limits = Limits(boot_timeout=opts.boot_timeout, freeze_after=opts.freeze_after,
                    stuck_after=opts.stuck_after or repro.stuck_after_s, run_timeout=duration + 60,
                    stalls=repro.stall.min_stalls if repro.stall else 0,
                    stall_measure=repro.stall.measure if repro.stall else "")
    t0 = time.monotonic()
    raise_later: BaseException | None = None
    gate = Gate(opts.budget, cpus, opts.cancel) if opts.budget else None  # waits for a boot core
    # an image's disk changes as it boots: its guests always boot cold
    try:
        vm, snap, restored = start_guest(cfg, kernel.sha256, opts.snapshot and disk is None, echo)
    except BaseException:
        if gate:
            gate.close()
        raise
    with vm, contextlib.ExitStack() as stack:
        if gate:
            stack.callback(gate.close)
        nmi = NmiInjector(vm.qmp, repro.nmi_rate, duration + 30)
        stack.callback(nmi.stop)
        stack.callback(r.close_debugger)

        def on_line(line: str) -> None:
            if line.startswith("# nmi-source: inject") and repro.nmi_rate:
                nmi.start()
                echo(f"no PMU in the guest: injecting {repro.nmi_rate:g} NMIs/s over QMP (they land on CPU0)")
            elif line.startswith("# nmi-source: stop"):
                nmi.stop()  # the reproducer is done with them
        echo(f"{'restored' if restored else 'booting'} {kernel.canonical} ({cpus} vCPUs, {accel_kind.upper()}), "
             f"{repro.name} until {target} {repro.count_name} or {duration:.0f}s")
        hook = (lambda: opts.on_repro_start(vm, number)) if opts.on_repro_start else None
        saved: dict = {}

        def save() -> None:
            try:
                saved.update(snap.save(vm, {"kernel": kernel.canonical, "kernel_sha256": kernel.sha256,
                                            "hello": w.hello, "shape": vm.shape()}))
                echo(f"saved a snapshot at the agent's gate ({(saved['bytes'] + saved['ram_bytes']) / 1e6:.0f} MB "
                     f"in {saved['save_s']}s): "
                     f"later runs of this kernel restore it")
                snapshot.prune()
            except snapshot.SnapshotError as e:
                echo(f"could not save a snapshot ({e}): later runs boot cold")
        w = Watch(vm, limits, echo=echo, on_repro_start=hook, gate=gate, cancel=opts.cancel, on_line=on_line,
                  go=go, restored=restored, on_ready=save if snap and restored is None else None,
                  on_suspect=r.prepare_debugger)
        false_alarms = 0
        try:
            while True:
                outcome = w.watch()
                injecting = nmi.running
                nmi.stop()  # the run is decided, or about to be examined
                r.keep_symbols(w)
                if outcome.kind == "stuck" and repro.hang == "process":
                    r.dump_process(w, outcome)
                    break
                if outcome.kind == "stall":
                    # decided by the reproducer's own measurement, after the
                    # stall ended: no stacks to read, but its final histograms
                    echo(f"{outcome.detail}: ending the run to collect its histograms")
                    w.finish()
                    break
                if outcome.kind not in ("freeze", "stuck") or r.debug_hang(vm, w, outcome) or false_alarms >= 2:
                    if r.samples is not None and not r.samples.dumps:
                        outcome = qemu_at_fault(vm, w, outcome)
                    break
                false_alarms += 1
                for f in out_dir.glob("sample-*.json"):  # keep them: the next look reuses the names
                    f.rename(out_dir / f"false-alarm-{false_alarms}-{f.name}")
                echo(f"no culprit on any CPU ({classify.summarize(r.classes) or 'all idle/user'}): "
                     "resuming, thresholds doubled")
                w.rearm()
                if injecting:
                    nmi.start()
        except KeyboardInterrupt:
            outcome = Outcome("interrupted", "interrupted by the user (SIGINT)", time.monotonic())
            raise_later = KeyboardInterrupt()
        except Interrupted as e:
            outcome = Outcome("interrupted", f"interrupted ({e})", time.monotonic())
            raise_later = e
        r.keep_symbols(w)
    watch_doc = w.summary() | {"nmi": nmi.summary() if nmi.started_at else None}
    snap_doc = None
    if snap:
        snap_doc = {"key": snap.key, "restored": restored is not None} | (
            {"saved_s": saved["save_s"], "bytes": saved["bytes"] + saved["ram_bytes"]} if saved else {})
    r.timings.update({"boot_s": round(w.hello_at - t0, 2) if w.hello_at else None,
                      "gate_wait_s": watch_doc["gate_wait_s"],
                      "to_outcome_s": round(outcome.at - t0, 2),
                      "repro_s": round(outcome.at - w.repro_started_at, 2) if w.repro_started_at else None,
                      "total_s": round(time.monotonic() - t0, 2)})
    stall = latency.evidence(repro.stall, w.ktap.lines, w.progress) if repro.stall else None
    if stall:
        if outcome.kind in ("freeze", "stuck"):
            stall["frozen_s"] = r.timings.get("hang_observed_s")
        watch_doc["stalls"] = stall
        if stall["data"]["paths"]:
            chart = latency.svg(stall["data"], stall["threshold_ms"], stall["titles"],
                                f"{kernel.canonical}: {stall['title']}")
            if chart:
                (out_dir / "latency.svg").write_text(chart)
    report_reason = next((rep.reason for rep in w.reports if rep.kind == "infra"), "")
    pm = pmiss.p_miss(cal, w.count, repro.count_name)
    v = decide(outcome, w.ktap, w.count, repro, r.classes, r.samples.errors if r.samples else [], pm,
               report_reason, stall, (r.process, r.process_error) if repro.hang == "process" else None)
    if restored is not None and outcome.kind == "boot-failure":  # the snapshot's fault: the next attempt boots
        snap.discard()
        v.retryable = True
    return Attempt(v, outcome, watch_doc, r.classes, r.samples, r.timings, cmdline, target, raise_later,
                   r.process, r.process_error, go, snap_doc)


def start_guest(cfg: VMConfig, kernel_sha: str, use_snapshot: bool,
                echo: Echo) -> tuple[VM, snapshot.Snapshot | None, dict | None]:
    """QEMU started: restored from the kernel's snapshot when there is one, or
    booting cold (and a snapshot to save at the gate); a snapshot that does not
    load is removed. Returns the VM, its snapshot and, when restored, the
    agent's hello recorded with it."""
    vm = VM(cfg)
    snap = snapshot.for_vm(vm, kernel_sha) if use_snapshot else None
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


def qemu_at_fault(vm: VM, w: Watch, outcome: Outcome) -> Outcome:
    """A hang whose vCPUs could not be read: when QEMU died or was stopped
    meanwhile, that is the finding, not the hang; when the guest powered off
    after its reproducer ended, the hang was a false alarm and the run is done."""
    if vm.alive() and not vm.stopped():
        return outcome
    after = w.watch()  # the watch reads what QEMU left and names how the run ended
    if after.kind == "done":
        return after
    return Outcome(after.kind, f"{after.detail} (while kstall read its vCPUs, after a {outcome.kind})", outcome.at)


def _attempt_doc(a: Attempt, n: int) -> dict:
    return {"attempt": n, "verdict": a.verdict.verdict, "reason": a.verdict.reason,
            "outcome": {"kind": a.outcome.kind, "detail": a.outcome.detail}, "timings": a.timings}


def verify(spec: str, repro_name: str, opts: Options, echo: Echo) -> Result:
    repro = reproducers.load(repro_name)
    t_start = time.time()
    ensure_guest(echo)  # before resolve: a first --boot-image installs the guest binaries into the image's layer
    kernel = resolve(spec, progress=echo, build_options=dataclasses.replace(opts.build or BuildOptions(),
                                                                   reproducer=repro.name), boot_image=opts.boot_image)
    check = preflight.check(kernel, repro)
    if check.modules:
        echo(f"modules to load first: {', '.join(m.stem for m in check.modules)}")
    initrd = initramfs.build(modules=check.modules)
    accel_kind = "none" if check.missing else accel.choose(opts.accel, kernel.sha256, kernel.boot_file(), initrd, echo,
                                                                  kernel.machine())
    disk = None
    if opts.boot_image and not check.missing:
        disk = boot_image.prepare(kernel, echo)  # the image loads its own modules
        initrd = disk.initrd
    run = results.RunDir(f"{kernel.origin.get('label') or kernel.canonical}-{repro.name}", opts.results_root)
    attempts: list[tuple[int, Attempt]] = []
    interrupted: BaseException | None = None
    tb = ""

    def failed(kind: str, detail: str, verdict: str = "ERROR") -> None:
        attempts.append((len(attempts) + 1, Attempt(Verdict(verdict, detail), Outcome(kind, detail, time.monotonic()),
                                                    {}, [], None, {}, "", 0)))
    try:
        if check.missing:  # nothing to boot: the path cannot run on this kernel
            failed("preflight", check.reason(), "INCONCLUSIVE")
        n = 0
        while not check.missing and n < max(1, opts.attempts):
            n += 1
            adir = run.attempt(n)
            att = run_attempt(kernel, repro, opts, accel_kind, initrd, adir, echo, n, disk)
            attempts.append((n, att))
            interrupted = att.interrupted
            if interrupted or not (att.verdict.retryable and n < opts.attempts):
                break
            echo(f"attempt {n}: {att.verdict.reason}; retrying")
    except (VMError, SpecError) as e:
        failed("error", str(e))
    except (KeyboardInterrupt, Interrupted) as e:  # before the watch loop had a guest to report on
        interrupted = e
        failed("interrupted", f"interrupted ({type(e).__name__})")
    except Cancelled as e:
        failed("interrupted", f"interrupted ({e})")
    except Exception as e:  # noqa: BLE001 - a kstall bug still ends as a complete run directory
        if results.out_of_space(e):
            failed("error", f"no space left for the results: {e}")
        else:
            failed("error", f"internal error: {type(e).__name__}: {e}")
            tb = traceback.format_exc()
    finally:
        if disk:
            disk.remove()
    n, final = attempts[-1]
    adir = run.work / f"attempt-{n}"
    if adir.exists():
        run.promote(adir)
    doc = build_run_json(run, spec, kernel, repro, opts, accel_kind, final, attempts, t_start)
    with procs.signals_deferred():
        try:
            path = _write_run(run, final, doc, tb)
        except OSError as e:
            if not results.out_of_space(e):
                raise
            # a half-written run is worse than none: the verdict goes to stdout and stderr only
            run.abandon()
            path = None
    if path is None:
        v = Verdict("ERROR", f"no space left for the results in {run.root}: the run was not kept; "
                             f"it said {final.verdict.line()}")
        doc.update(verdict=v.verdict, exit_code=v.exit_code, line=v.line(), reason=v.reason, results_dir=None)
        echo(v.reason)
        if interrupted is not None:
            raise interrupted
        return Result(v, None, doc)
    doc["results_dir"] = str(path)
    if interrupted is not None:
        echo(f"interrupted; partial results kept in {path}")
        raise interrupted
    return Result(final.verdict, path, doc)


def _write_run(run: results.RunDir, final: Attempt, doc: dict, tb: str) -> Path:
    if tb:
        run.write_text("traceback.txt", tb)
    run.write_json("run.json", doc)
    if final.classes:
        run.write_json("cpus.json", {"cpus": [c.to_json() for c in final.classes],
                                     "samples": [f"sample-{i}.json" for i in range(len(final.samples.dumps))]
                                     if final.samples else []})
        run.write_text("backtraces.txt", results.backtraces_text(final.classes))
    return run.finalize()


def build_run_json(run: results.RunDir, spec: str, kernel: Kernel, repro: reproducers.Reproducer, opts: Options,
                   accel_kind: str, final: Attempt, attempts: list[tuple[int, Attempt]], t_start: float) -> dict:
    v = final.verdict
    return {
        "schema": results.SCHEMA,
        "id": run.id,
        "command": sys.argv,
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t_start)),
        "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "wall_s": round(time.time() - t_start, 2),
        "verdict": v.verdict,
        "exit_code": v.exit_code,
        "line": v.line(),
        "reason": v.reason,
        "summary": v.summary,
        "confidence": v.confidence,
        "signature": v.signature,
        "kernel": kernel.to_json() | {"spec": spec},
        "reproducer": {"name": repro.name, "args": opts.repro_args, "count_name": repro.count_name,
                       "min_count": repro.min_count, "count_target": final.count_target},
        "vm": {"cpus": opts.cpus or repro.default_cpus, "memory_mb": opts.memory_mb, "accel": accel_kind,
               "cmdline": final.cmdline, "go": final.go, "boot_image": opts.boot_image,
               "snapshot": final.snapshot},
        "outcome": {"kind": final.outcome.kind, "detail": final.outcome.detail},
        "evidence": {
            "count": final.watch.get("count"),
            "count_name": repro.count_name,
            "first_stall_count": (final.watch.get("stalls") or {}).get("data", {}).get("first_stall_count"),
            "stalls": {k: v for k, v in (final.watch.get("stalls") or {}).items() if k != "data"} or None,
            "latency": (final.watch.get("stalls") or {}).get("data"),
            "nmi_injection": final.watch.get("nmi"),
            "p_miss": v.p_miss or None,
            "heartbeats": final.watch.get("heartbeats"),
            "max_heartbeat_gap_s": final.watch.get("max_heartbeat_gap_s"),
            "console_reports": final.watch.get("console_reports", []),
            "console_titles": console.titles(final.watch.get("console_reports", [])),
            "console_reports_dropped": final.watch.get("console_reports_dropped", 0),
            "debug_method": final.samples.method if final.samples else None,
            "debug_errors": final.samples.errors if final.samples else [],
        },
        "cpus": [c.to_json() for c in final.classes],
        "process": ({k: v for k, v in final.process.to_json().items() if k != "threads"}
                    | {"threads": "threads.json"} if final.process else
                    {"error": final.process_error} if final.process_error else None),
        "guest": final.watch.get("hello", {}),
        "symbols": final.watch.get("syms") or {"cached": str(symcache.cached(kernel.sha256) or "")},
        "timings": final.timings,
        "attempts": [_attempt_doc(a, n) for n, a in attempts],
        "files": sorted(p.name for p in run.work.iterdir()),
    }


def dumps(doc: dict) -> str:
    return json.dumps(doc, indent=2, default=str)
