# SPDX-License-Identifier: GPL-2.0
"""Who holds what a hung task waits for, on real kernels: a deadlock among
sleeping tasks named a cycle (tests/programs/exec_ptrace_cycle.c), on a
kernel that reads it from the tasks' stacks (6.1.170) and on one whose tasks
say what they block on (7.3.4). console-trigger's chain and perf-sigtrap's
wait are in test_console_reports.py and test_family.py."""
from __future__ import annotations

import pytest

from helpers import REPO, kstall_processes, verify_json

pytestmark = pytest.mark.e2e
PROGRAM = REPO / "tests" / "programs" / "exec_ptrace_cycle.c"


@pytest.mark.parametrize("version", ["6.1.170", "7.3.4"])
def test_an_exec_and_its_tracer_waiting_on_each_other_are_named_a_deadlock(tmp_path, version):
    rc, doc, err = verify_json(tmp_path, f"debian:{version}", str(PROGRAM))
    assert rc == 1 and doc["verdict"] == "VULNERABLE" and doc["outcome"]["kind"] == "sleeping", err[-2000:]
    assert doc["title"] == "INFO: task hung in begin_new_exec"
    exec_pid = doc["hang"]["tasks"][0]["tid"]
    tasks = {t["pid"]: t for t in doc["waits"]["tasks"]}
    tracer = next(p for p, t in tasks.items() if p != int(exec_pid) and t["state"] & 1)  # asleep interruptibly
    zombie = next(p for p, t in tasks.items() if t["exit_state"])
    cycle = (f"deadlock: pid {exec_pid} (exec_ptrace_cyc) sleeps in begin_new_exec until its thread pid {zombie} "
             f"(exec_ptrace_cyc) is released, which is a zombie until its tracer pid {tracer} (exec_ptrace_cyc) "
             f"reaps it, which waits for the tracee's signal->cred_guard_mutex held by pid {exec_pid} "
             "(exec_ptrace_cyc), which is where the chain began")
    assert cycle in doc["summary"], doc["summary"]
    assert any(f.startswith("deadlock: ") and f"held by pid {exec_pid}" in f for f in doc["waits"]["findings"])
    kinds = {w["kind"] for w in doc["waits"]["waits"]}
    assert kinds == {"mutex", "threads", "reap"}, doc["waits"]["waits"]
    assert kstall_processes() == []


@pytest.mark.parametrize("version", ["6.1.170", "7.3.4"])
def test_a_mutex_inside_a_file_is_named_a_mutex_held_by_the_stalled_writer(tmp_path, version):
    """f_pos_lock, a mutex inside struct file: 6.1.170 named it an rwsem
    held by 34635136368768 readers, from words that pass an rwsem's checks."""
    rc, doc, err = verify_json(tmp_path, f"debian:{version}", str(REPO / "tests" / "programs" / "fpos_writers.c"))
    assert rc == 1 and doc["verdict"] == "VULNERABLE" and doc["outcome"]["kind"] == "sleeping", err[-2000:]
    waits = doc["waits"]
    writer = next(t["pid"] for t in waits["tasks"] if "handle_userfault" in t.get("kstack", []))
    finding = next(f for f in waits["findings"] if "fdget_pos" in f)
    assert "waits for a mutex (" in finding and f"held by pid {writer} (fpos_writers), blocked in " \
        "handle_userfault (userfaultfd)" in finding, waits["findings"]
    assert "reader" not in " ".join(waits["findings"]) and {w["kind"] for w in waits["waits"]} == {"mutex"}
