# SPDX-License-Identifier: GPL-2.0
"""The readings of a guest once the watch has stopped: every vCPU, a
process's threads, the tasks asleep and who holds what they wait for, the
kernel's own report, a stall's histograms, where a silent boot's vCPUs
were. Each is a row of READINGS (when it is taken, what it reads, how); a
new reading is one row and one function."""
from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from harness.analysis import classify, cpu_state, kernel_waits, sleeping, task_waits, thread_hang, wait_graph
from harness.analysis.classify import Role
from harness.analysis.hang_kinds import Reading
from harness.analysis.outcome import NO_AGENT, Outcome, OutcomeKind
from harness.base import arch as arches
from harness.base import paths
from harness.analysis.kallsyms import Kallsyms
from harness.debug import process, vcpus as debug, vmcore
from harness.drivers.run_state import SYMBOLS_BOUND_S, RunState
from harness.guest.qmp import QMPError
from harness.guest.vm import VM
from harness.guest.watch import Watch
from images.kernels import symcache


def read_vcpus(r: RunState, vm: VM, w: Watch, outcome: Outcome) -> bool:
    """GDB samples of every vCPU; whether they settle the run: a culprit
    (victims alone may be a stall that ends, which the reproducer's own
    measurement then reports), or no samples at all. For a reproducer
    with no signatures of its own, a culprit the CPUs' states name
    (cpu_state.py) settles it too."""
    since = r.note_hang(w, outcome, "reading every vCPU with gdb")
    t = time.monotonic()
    prepared, r.prepared = r.prepared, None
    r.samples = debug.sample(vm.gdb_socket, vm.qmp, r.out_dir, r.debug_target(), r.opts.debug.samples,
                                r.opts.debug.sample_interval, resume=True, prepared=prepared,
                                console=vm.console_log, qemu_gone=vm.gone,
                                host_delay=r.host_wait.silence if r.host_wait else None)
    r.timings["debug_s"] = round(time.monotonic() - t, 2)
    # a lower bound on the hang: from the last sign of life to the last sample
    r.timings["hang_observed_s"] = round(time.monotonic() - since, 2)
    r.classes = classify.classify_samples(r.samples.dumps, r.sigs)
    if not r.samples.dumps:
        return True
    hang = cpu_state.analyze(r.samples.dumps, r.classes, variables=r.variables())
    cpu_state.note_waits(r.classes, hang)
    if any(c.signature.role == Role.CULPRIT for c in r.classes):
        return True
    r.hang = hang
    return bool(r.hang.culprits) and not r.own_bug


def hand_over(r: RunState, vm: VM, outcome: Outcome, interrupted: BaseException | None) -> bool:
    """A hang's guest, once read: stopped, written as a core (--vmcore);
    whether it is to be held for the developer's debugger (--hold)."""
    d = r.opts.debug
    if not outcome.kind.handed_over or interrupted is not None or not vm.alive() or \
            (not d.vmcore and d.hold is None):
        return False
    try:
        vm.qmp.cmd("stop")
    except (QMPError, OSError) as e:
        r.echo(f"could not stop the guest to hand it over ({e})")
        return False
    if d.vmcore:
        r.echo("writing the guest's memory and registers to vmcore")
        v = r.variables()
        try:
            lay = r.layout()
            r.vmcore = vmcore.write(vm, r.out_dir, arches.get(r.kernel.arch),
                                       v.symbols.by_name.get("vmcoreinfo_note") if v else None, vm.cfg.cpus,
                                       json.loads(lay.read_text()) if lay else None)
        except Exception as e:  # noqa: BLE001 - the core is an extra: the verdict stands without it
            r.vmcore = {"error": f"internal error: {type(e).__name__}: {e}"}
        r.echo(f"vmcore: {r.vmcore['error']}" if "error" in r.vmcore else
                  f"vmcore: {r.vmcore['disk_bytes'] / 1e6:.0f} MB on disk "
                  f"({r.vmcore['bytes'] / 1e6:.0f} MB ELF) in {r.vmcore['seconds']}s"
                  + (f"; {r.vmcore['missing']}" if r.vmcore.get("missing") else ""))
    return d.hold is not None


def read_wait_graph(r: RunState, vm: VM, w: Watch) -> dict:
    """Who holds what the guest's sleeping tasks wait for (task_waits.py),
    once per run: its tasks and locks read with the guest stopped, then
    the agent's stacks of the tasks that graph names."""
    if r.wait_graph is not None:
        return r.wait_graph
    if r.syms_path is None and w.want_syms:  # a kernel's first run: its symbols may be on their way
        r.echo(f"waiting up to {SYMBOLS_BOUND_S:g}s for the kernel's symbols and BTF (its first run here), "
                  "to read who holds what the sleeping tasks wait for")
        w.wait_for_blob(symcache.LAST_BLOB, SYMBOLS_BOUND_S)
        r.keep_symbols(w)
    lay = r.layout()
    if lay is None:
        r.wait_graph = {"error": "the kernel's symbols and BTF were not captured"}
        return r.wait_graph
    t = time.monotonic()
    try:
        vm.qmp.cmd("stop")
        try:
            order = arches.get(r.kernel.arch).monitor_byteorder
            doc = task_waits.read(lambda a, k: debug.hmp_bytes(vm.qmp, 0, a, k, order),
                                  json.loads(lay.read_text()), vm.cfg.cpus,
                                  Kallsyms.load(r.syms_path) if r.syms_path else None)
        finally:
            vm.qmp.cmd("cont")
    except (QMPError, OSError) as e:
        doc = {"error": f"QEMU did not answer while the tasks were read ({e})"}
    read_s = round(time.monotonic() - t, 2)
    if doc.get("tasks"):
        task_waits.with_stacks(doc, w.ask_tasks([task["pid"] for task in doc["tasks"]]))
        names = kernel_waits.LockNames(v, []) if (v := r.variables()) else None
        for wait in doc["waits"]:
            if names and "lock" in wait and (name := names.name(int(wait["lock"], 16))):
                wait["name"] = name
    doc["read_s"], doc["total_s"] = read_s, round(time.monotonic() - t, 2)
    r.timings["wait_graph_s"] = doc["total_s"]
    graph = wait_graph.Graph(doc)
    findings = graph.roots() + [graph.cpus_text(), doc.get("walk_stopped", "")] if "error" not in doc else []
    doc["findings"] = [f for f in findings if f]
    r.wait_graph = doc
    r.echo(f"who holds what the sleeping tasks wait for ({doc['total_s']}s): "
              + ("; ".join(doc["findings"]) or doc.get("error") or
                 f"no task in D state waits on a lock ({len(doc.get('tasks', []))} in D state)"))
    return doc


def dump_process(r: RunState, w: Watch, outcome: Outcome) -> None:
    """A stuck user-space reproducer with a healthy kernel: its threads,
    through the kernel's core of it and GDB, then the hang class."""
    r.dumped = True
    r.note_hang(w, outcome, "dumping the reproducer's threads (core to the host, gdb)")
    t = time.monotonic()
    core = w.take_core()
    r.timings["core_s"] = round(time.monotonic() - t, 2)
    if core is None:
        why = w.unanswered or w.agent.core_info.get('error', 'timed out')
        r.process_error = f"no core of the reproducer arrived ({why})"
        return
    core_path = r.out_dir / "core"
    core_path.write_bytes(core)
    exe = Path(r.repro.program) if r.repro.program else \
        paths.guest_dir(r.kernel.arch) / Path(w.agent.core_info.get("exe") or r.repro.binary).name
    t = time.monotonic()
    try:
        dump = process.dump_core(core_path, exe, r.out_dir / "gdb-threads.log", w.agent.proc_threads,
                                 hook=r.opts.hooks.on_thread_command, gdb_name=arches.get(r.kernel.arch).gdb)
    except process.DumpError as e:
        r.process_error = str(e)
        return
    r.timings["thread_dump_s"] = round(time.monotonic() - t, 2)
    (r.out_dir / "thread-dump.json").write_text(json.dumps(dump.to_json(), indent=1) + "\n")
    r.process = thread_hang.analyse(dump, w.agent.proc_threads)
    doc = r.process.to_json() | {"core": core_path.name, "exe": str(exe), "core_bytes": len(core),
                                    "dump_errors": dump.errors, "gdb_starts": dump.gdb_starts}
    (r.out_dir / "threads.json").write_text(json.dumps(doc, indent=2) + "\n")
    (r.out_dir / "threads.txt").write_text(r.process.table())


def where_it_booted(r: RunState, vm: VM, w: Watch, outcome: Outcome) -> Outcome:
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


def _read_threads(r: RunState, vm: VM, w: Watch, outcome: Outcome) -> None:
    dump_process(r, w, outcome)


def _read_vcpus_then_threads(r: RunState, vm: VM, w: Watch, outcome: Outcome) -> None:
    if not read_vcpus(r, vm, w, outcome):
        dump_process(r, w, outcome)


def _read_tasks(r: RunState, vm: VM, w: Watch, outcome: Outcome) -> None:
    """The agent said which tasks sleep and where; the kernel's memory, who
    holds what they wait for."""
    r.hang = sleeping.SleepingHang.named(list(w.agent.sleeping), r.sigs)
    r.note_hang(w, outcome, "titled from the kernel stacks the agent read; reading who holds what they wait for")
    r.hang.graph = read_wait_graph(r, vm, w)


def _read_histograms(r: RunState, vm: VM, w: Watch, outcome: Outcome) -> None:
    """Decided by the reproducer's own measurement, after the stall ended: no
    stacks to read, but its final histograms."""
    r.echo(f"{outcome.detail}: ending the run to collect its histograms")
    w.finish()


def _read_report(r: RunState, vm: VM, w: Watch, outcome: Outcome) -> None:
    """The kernel's detector said it, with its stacks, on the console; for a
    hung task, the kernel's memory says who holds what it waits for."""
    r.note_hang(w, outcome, "the kernel's own report is the evidence")
    if any(rep.name == "hung-task" for rep in w.console.reports):
        read_wait_graph(r, vm, w)


def _hung_task_told(r: RunState, vm: VM, w: Watch, outcome: Outcome | None) -> None:
    read_wait_graph(r, vm, w)


# the watch's moment the kernel reported a hung task, the guest living on
HUNG_TASK = "hung-task report"


@dataclass(frozen=True)
class Look:
    """A reading of the guest: when it is taken (a hang kind's reading, an
    outcome with no hang, or a moment of the watch), what it reads, how;
    how may restate the outcome (what it found, said with it)."""
    when: Reading | OutcomeKind | str
    what: str
    # (run, vm, watch, outcome) -> the outcome restated, or None; the outcome is None at a moment of the watch
    how: Callable[..., Outcome | None]


# Every reading but every vCPU's (Reading.VCPUS), which the watch loop drives,
# since it may resume the guest (watching.py); those of one moment in order.
READINGS = (
    Look(Reading.REPORT, "the kernel's own report; for a hung task, who holds what it waits for", _read_report),
    Look(Reading.THREADS, "the stuck process's threads, from its core", _read_threads),
    Look(Reading.VCPUS_THEN_THREADS, "every vCPU, then the process's threads if no CPU is a culprit",
         _read_vcpus_then_threads),
    Look(Reading.TASKS, "the tasks asleep in D state, and who holds what they wait for", _read_tasks),
    Look(Reading.HISTOGRAMS, "the stall's final histograms", _read_histograms),
    Look(OutcomeKind.BOOT_FAILURE, "where each vCPU was when the agent never spoke", where_it_booted),
    Look(HUNG_TASK, "who holds what the reported task waits for, the guest living on", _hung_task_told),
)


def take(when: Reading | OutcomeKind | str, r: RunState, vm: VM, w: Watch,
         outcome: Outcome | None = None) -> Outcome | None:
    """The readings of this moment, in READINGS' order: the outcome as they restate it."""
    for look in READINGS:
        if look.when == when:
            outcome = look.how(r, vm, w, outcome) or outcome
    return outcome
