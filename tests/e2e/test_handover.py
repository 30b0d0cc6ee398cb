# SPDX-License-Identifier: GPL-2.0
"""The hang handed over, on real kernels: a held guest that the developer's
gdb attaches to (kstall attach), one debugger at a time, gone with a
SIGKILLed kstall; a vmcore of a real hang that drgn and gdb open with
Debian's vmlinux and that kstall analyze reads again; and an arm64 guest's
vmcore that gdb walks with the symbols kstall captured."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from helpers import KSTALL, kstall, kstall_processes, verify_json, verify_past_the_other_arm64_perf_bug, wait_for

pytestmark = pytest.mark.e2e


@pytest.fixture(autouse=True)
def no_leftover_processes():
    yield
    assert kstall_processes() == [], "a qemu or gdb outlived its run"


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_a_held_guest_takes_one_debugger_and_goes_with_a_killed_kstall(tmp_path):
    out, err = open(tmp_path / "out", "w"), open(tmp_path / "err", "w")
    holder = subprocess.Popen([*KSTALL, "verify", "debian:6.16.12", "perf-refresh", "--hold", "60", "--json",
                               "--results", str(tmp_path / "results")], stdout=out, stderr=err)
    try:
        held = wait_for(lambda: next((tmp_path / "results").glob("*/held.json"), None), 180, 0.1)
        assert held, (tmp_path / "err").read_text()[-2000:]
        run = held.parent
        doc = json.loads(held.read_text())
        assert json.loads((run / "run.json").read_text())["verdict"] == "VULNERABLE"
        # the culprit's stack as kstall walks it, and a kernel variable read by name (no DWARF for 6.16.12)
        p = kstall("attach", str(run), "--ex", "kstall-bt all", "--ex", "p (long)jiffies", "--batch", timeout=120)
        assert p.returncode == 0, p.stderr[-2000:]
        assert "hrtimer_cancel" in p.stdout and "CPU 1" in p.stdout, p.stdout[-3000:]
        jiffies = [line for line in p.stdout.splitlines() if line.startswith("$1 = ")]
        assert jiffies and int(jiffies[0].split("=")[1]) > 0, p.stdout[-1000:]
        # a second debugger while one is attached is refused, naming why
        first = subprocess.Popen([*KSTALL, "attach", str(run), "--ex", "shell sleep 2", "--batch"],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            assert wait_for(lambda: "attaching" in (first.stderr.readline() if first.stderr else ""), 30, 0.05)
            time.sleep(0.5)  # past kstall's lock, into gdb
            second = kstall("attach", str(run), "--ex", "info threads", "--batch", timeout=60)
            assert second.returncode == 1 and "another debugger is attached" in second.stderr, second.stderr
        finally:
            first.wait(60)
        # kstall SIGKILLed while holding: its QEMU goes too (it dies with its parent)
        holder.send_signal(signal.SIGKILL)
        holder.wait(30)
        assert wait_for(lambda: not alive(doc["qemu_pid"]), 10, 0.05), "QEMU outlived the kstall holding it"
        p = kstall("attach", str(run), "--batch")
        assert p.returncode == 1 and ("not held" in p.stderr or "gone" in p.stderr), p.stderr
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait(30)
        out.close()
        err.close()


def cpus_walked_by_gdb(run: Path) -> tuple[list[str], str]:
    """Each CPU's stack as `kstall inspect --with gdb` walks it on the run's
    vmcore (a guest of 2 vCPUs), and all it printed."""
    p = kstall("inspect", str(run), "--with", "gdb", "--ex", "kstall-bt all", timeout=300)
    cpus = p.stdout.split("CPU ")[1:]
    assert len(cpus) == 2, p.stdout[-3000:] + p.stderr[-2000:]
    return cpus, p.stdout


def signatures_in_vmcore(run: Path) -> set[str]:
    """The CPUs' signatures `kstall analyze` reads again from the run's core,
    once it has read its samples as they were recorded."""
    p = kstall("analyze", str(run), "--json")
    (reading,) = json.loads(p.stdout)
    assert p.returncode == 0 and reading["agrees"], p.stdout
    return {c["signature"] for c in reading["cpus_in_vmcore"].values()}


def test_a_vmcore_of_the_6_1_bpf_timer_hang_opens_in_drgn_and_gdb_and_reads_again(tmp_path):
    got = kstall("symbols", "debian:6.1.170", "--debuginfo", timeout=1800)  # once per machine, then cached
    assert got.returncode == 0, got.stderr[-2000:]
    t0 = time.monotonic()
    rc, doc, err = verify_json(tmp_path, "debian:6.1.170", "bpf-timer", "--vmcore", "--hold", "1")
    assert rc == 1 and doc["verdict"] == "VULNERABLE", err[-2000:]
    assert time.monotonic() - t0 < 170  # the hold ended by itself, and the guest with it
    run = Path(doc["results_dir"])
    core = doc["vm"]["vmcore"]
    assert (run / "vmcore").is_file() and not (run / "held.json").exists(), core
    assert core["vmcoreinfo"] == "kstall" and core["kernel_mappings"] > 0, core
    assert core["disk_bytes"] <= (doc["vm"]["memory_mb"] << 20) // 4, core
    pids = core["cpu_tasks"]
    assert len(pids) == 2 and all(p > 0 for p in pids.values()), core
    # drgn unwinds each CPU's running task from the core's register notes
    code = ("from drgn.helpers.linux.pid import find_task",
            f"for p in {sorted(pids.values())}: print('TASK', p, prog.stack_trace(find_task(prog, p)))")
    p = kstall("inspect", str(run), "--with", "drgn", *[a for c in code for a in ("--ex", c)], timeout=300)
    traces = p.stdout.split("TASK ")[1:]
    assert len(traces) == 2 and all("hrtimer_cancel" in t for t in traces), p.stdout[-3000:] + p.stderr[-2000:]
    # gdb on the same core, with Debian's DWARF: both CPUs as kstall walks them
    cpus, _ = cpus_walked_by_gdb(run)
    assert all("hrtimer_cancel" in c for c in cpus), cpus
    # read again offline from the samples and the core: the recorded verdict
    assert signatures_in_vmcore(run) == {"bpf_timer_cancel_each_other"}


def test_an_arm64_vmcore_opens_in_gdb_with_the_captured_symbols_and_reads_again(tmp_path):
    """The hand-over on the second architecture: no DWARF fetched (the dbg
    package is a download CI should not pay for), so gdb with the symbols
    kstall captured from the guest walks each CPU by its frame records."""
    rc, doc, err = verify_past_the_other_arm64_perf_bug(tmp_path, "VULNERABLE", "debian:6.16.12", "perf-refresh",
                                                         "--arch", "arm64", "--vmcore")
    assert rc == 1 and doc["verdict"] == "VULNERABLE" and doc["kernel"]["arch"] == "aarch64", err[-2000:]
    run = Path(doc["results_dir"])
    core = doc["vm"]["vmcore"]
    assert (run / "vmcore").is_file() and core["vmcoreinfo"] == "kstall" and core["kernel_mappings"] > 0, core
    assert len(core["cpu_tasks"]) == 2, core
    cpus, out = cpus_walked_by_gdb(run)
    assert any("hrtimer_cancel" in c for c in cpus), out[-3000:]
    # walked down to user space's exception entry: a system call's, or the timer's interrupt
    # taken in user space (the hrtimer fires wherever the task is; a busy host's run met the second)
    assert "el0t_64_sync" in out or "el0t_64_irq" in out, out[-3000:]
    assert "hrtimer_cancel_self_deadlock" in signatures_in_vmcore(run)


def test_a_core_qemu_refuses_to_write_leaves_no_copy_waiting(tmp_path):
    """QEMU given the pipe (getfd) and then refusing the dump: kstall takes
    its end back (closefd), so the copy ends at once instead of waiting for
    QEMU's exit (600 s under --hold). A paused 6.1.170 guest; a format QEMU does not know."""
    import threading
    from harness.base import arch, paths
    from harness.debug import vmcore
    from harness.guest import machine
    from harness.guest.vm import VM, VMConfig
    from images.guest import initramfs
    from images.kernels.schemes import resolve
    k = resolve("debian:6.1.170")
    m = machine.for_kernel(k)
    cfg = VMConfig(kernel=m.boot_file(k), initrd=initramfs.build(paths.guest_dir(k.arch)), cmdline="",
                   log_dir=tmp_path, machine=m.name, arch=k.arch)
    with VM(cfg) as vm:
        vm.start()
        vm.qmp.cmd("stop")
        t = time.monotonic()
        doc = vmcore.write(vm, tmp_path, arch.get(k.arch), None, 2, None, format_="kstall-no-such-format")
        assert "error" in doc and time.monotonic() - t < 5, doc
        assert not any(th.name == "kstall-vmcore" and th.is_alive() for th in threading.enumerate())
        assert not (tmp_path / vmcore.NAME).exists()


def test_a_sleeping_hangs_vmcore_holds_what_its_task_waits_for(tmp_path):
    """A task asleep for good (perf-sigtrap on 6.1.170, in _free_event) is a
    hang --vmcore writes; analyze reads the same wait from the core, and
    inspect says it before it opens the debugger."""
    rc, doc, err = verify_json(tmp_path, "debian:6.1.170", "perf-sigtrap", "--vmcore")
    assert rc == 1 and doc["outcome"]["kind"] == "sleeping", err[-2000:]
    assert doc["vm"]["vmcore"] and "error" not in doc["vm"]["vmcore"], doc["vm"]["vmcore"]
    run = Path(doc["results_dir"])
    p = kstall("analyze", str(run), "--json")
    (reading,) = json.loads(p.stdout)
    assert p.returncode == 0 and reading["agrees"], p.stdout
    pid = doc["hang"]["tasks"][0]["tid"]
    assert any(w.startswith(f"pid {pid} (perf-sigtrap) sleeps in _free_event on no lock")
               for w in reading["waits_in_vmcore"]), reading
    p = kstall("inspect", str(run), "--print", timeout=120)
    assert f"who holds what the sleeping tasks wait for: pid {pid} (perf-sigtrap) sleeps in _free_event" in \
        p.stdout + p.stderr
    assert kstall_processes() == []
