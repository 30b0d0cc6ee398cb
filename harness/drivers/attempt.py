# SPDX-License-Identifier: GPL-2.0
"""One attempt of a verify run, in its order: its plan (plan.py), the guest
booted or restored at its agent's gate, the reproducer started with the GO
and watched to an outcome (watching.py), what the outcome calls for read
(readings.py: every vCPU, a process's threads, the tasks asleep, the
kernel's report), the guest handed over or stopped, the verdict (conclude.py).
"""
from __future__ import annotations

import contextlib
import dataclasses
import time
from pathlib import Path

from harness.analysis import console
from harness.analysis.outcome import OutcomeKind
from harness.analysis.retry import Retry
from harness.base import arch as arches
from harness.base import background
from harness.base.kernel_cache import KernelKey
from harness.drivers.case import Case
from harness.drivers.conclude import conclude
from harness.drivers.plan import make_plan
from harness.drivers import readings
from harness.drivers.readings import hand_over
from harness.drivers.run_state import BACKGROUND_BOUND_S, Attempt, Echo, RunState
from harness.drivers.watching import watch_until_decided
from harness.drivers.options import Options
from harness.guest import hold, snapshot
from harness.guest.cores import Gate
from harness.guest.hostwait import HostWait
from harness.guest.nmi import NmiInjector
from harness.guest.vm import VM, VMConfig, VMError
from harness.guest.watch import Calls, Watch


def run_attempt(c: Case, opts: Options, out_dir: Path, echo: Echo, number: int = 1) -> Attempt:
    kernel, repro, disk = c.kernel, c.repro.spec, c.disk
    r = RunState(c, opts, out_dir, echo)
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
                          on_suspect=r.prepare_debugger,
                          on_hung_task=lambda: readings.take(readings.HUNG_TASK, r, vm, w))
            w = Watch(vm, plan.limits, patterns.result(BACKGROUND_BOUND_S), echo=echo, calls=calls, gate=gate,
                      cancel=opts.hooks.cancel, go=plan.go, restored=restored, want_syms=r.syms_path is None)
            outcome, raise_later = watch_until_decided(r, vm, w, nmi)
            r.keep_symbols(w)
            held = hand_over(r, vm, outcome, raise_later)
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


def snapshot_doc(snap: snapshot.Snapshot | None, restored: dict | None, saved: dict) -> dict | None:
    """run.json's vm.snapshot: the snapshot restored from, or saved to."""
    if snap is None:
        return None
    return {"key": snap.key, "restored": restored is not None} | (
        {"saved_s": saved["save_s"], "bytes": saved["bytes"] + saved["ram_bytes"]} if saved else {})


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
