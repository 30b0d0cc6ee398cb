# SPDX-License-Identifier: GPL-2.0
"""ppc64el, s390x and riscv64 guests, booted for real under TCG on this host,
one cell each (the full family per architecture is ci/family-<arch>.toml):
Debian's ppc64el 6.1.170 hangs the BPF timer pair with both CPUs in
hrtimer_cancel, read along ppc64's back chain; on s390x's 7.2.13 an exec and
its tracer deadlock, named from the big-endian kernel's memory and again from
its vmcore; riscv64's 6.12.117 runs the BPF timer pair to its target count,
its loader built from trixie's libbpf on this bookworm host."""
from __future__ import annotations

import fnmatch
import json

import pytest

from helpers import REPO, kstall, kstall_processes, verify_json

pytestmark = pytest.mark.e2e


@pytest.fixture(autouse=True)
def no_leftover_processes():
    yield
    assert kstall_processes() == [], "a qemu or gdb outlived its run"


def test_ppc64el_6_1_170_hangs_both_cpus_in_the_bpf_timer_cancel_wait(tmp_path):
    rc, doc, err = verify_json(tmp_path, "debian:6.1.170", "bpf-timer", "--arch", "ppc64el")
    assert rc == 1 and doc["verdict"] == "VULNERABLE", err[-2000:]
    assert doc["kernel"]["arch"] == doc["vm"]["arch"] == "ppc64le"
    culprits = [c for c in doc["cpus"] if c["role"] == "culprit"]
    assert sorted(c["cpu"] for c in culprits) == [0, 1], doc["cpus"]
    for c in culprits:  # the back chain runs from the cancel wait to the bottom of its task's stack:
        # the system call, or a kernel thread's start where the callback ran in a softirq on the
        # thread's stack (the RCU kthread's, as its interrupts came back on after a switch), or the
        # timer interrupt's entry when it cut into user space (CI, 2026-12-05: the chain's last frame
        # decrementer_common_virt, its saved pc no kernel code)
        names = [f.lstrip("? ").split("+")[0] for f in c["frames"]]
        assert "bpf_timer_cancel" in names and (
            any(n.startswith("system_call") or n == "ret_from_kernel_thread" for n in names)
            or fnmatch.fnmatchcase(names[-1], "*_common_virt")), c["frames"]


def test_s390x_7_2_13_names_a_deadlock_among_sleeping_tasks_read_big_endian(tmp_path):
    # the wait-for graph read from a big-endian kernel's memory (its BTF's byte
    # order, its low kernel addresses): an exec and its tracer wait on each other
    rc, doc, err = verify_json(tmp_path, "debian:7.2.13", str(REPO / "tests" / "programs" / "exec_ptrace_cycle.c"),
                               "--arch", "s390x", "--vmcore")
    assert rc == 1 and doc["verdict"] == "VULNERABLE" and doc["outcome"]["kind"] == "sleeping", err[-2000:]
    assert doc["kernel"]["arch"] == "s390x" and doc["title"] == "INFO: task hung in begin_new_exec"
    exec_pid = int(doc["hang"]["tasks"][0]["tid"])
    assert {w["kind"] for w in doc["waits"]["waits"]} == {"mutex", "threads", "reap"}, doc["waits"]
    assert any(f.startswith("deadlock: ") and f"held by pid {exec_pid}" in f for f in doc["waits"]["findings"])
    assert doc["waits"]["walked"] > 20  # init_task's list, followed through the identity map
    # its vmcore holds the same: the image mapped apart from RAM, where VMCOREINFO says
    p = kstall("analyze", doc["results_dir"], "--json")
    again = json.loads(p.stdout)[0]
    assert again["agrees"] and again["waits_in_vmcore"][0].startswith("deadlock: "), p.stdout[-2000:] + p.stderr


def test_riscv64_6_12_117_runs_the_bpf_timer_pair_through_with_its_loader_linked_by_the_shim(tmp_path):
    # trixie's libbpf with bookworm's cross glibc (repro/older_libc_shim.c): the
    # loader runs, the timers fire, and 6.12 has the fix
    rc, doc, err = verify_json(tmp_path, "debian:6.12.117", "bpf-timer", "--arch", "riscv64")
    assert rc == 0 and doc["verdict"] == "NOT_REPRODUCED", err[-2000:]
    assert doc["kernel"]["arch"] == "riscv64" and doc["evidence"]["count"] >= 5000, doc["evidence"]
