# SPDX-License-Identifier: GPL-2.0
"""Any hang, not just kstall's: a user's own C file, executable, host
command and data file with its own signatures, on real Debian kernels; a
sleeping hang; a program's own failure; a bisection with a user's reproducer,
and one in which a step hangs another way."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from helpers import KSTALL as KSTALL_CMD, REPO, kstall, kstall_processes, verify_json

pytestmark = pytest.mark.e2e
PROGRAMS = REPO / "tests" / "programs"
HRTIMER_SIG = REPO / "harness" / "analysis" / "signatures" / "hrtimer_cancel_self_deadlock.toml"


@pytest.fixture(autouse=True)
def no_leftover_processes():
    yield
    assert kstall_processes() == [], "a qemu, gdb or virtiofsd outlived its run"


def roles(doc: dict) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for c in doc["cpus"]:
        out.setdefault(c["signature"], []).append(c["cpu"])
    return out


def test_a_c_file_in_another_shape_is_vulnerable_where_the_bug_is_and_clean_where_it_is_fixed(tmp_path):
    rc, doc, err = verify_json(tmp_path, "debian:6.16.12", str(PROGRAMS / "other_refresh.c"))
    assert rc == 1, err
    assert doc["verdict"] == "VULNERABLE" and doc["signature"] == "hrtimer_cancel_self_deadlock"
    named = roles(doc)
    assert named.get("hrtimer_cancel_self_deadlock") and named.get("csd_lock_wait_victim"), doc["line"]
    assert doc["reproducer"]["name"] == "other_refresh"
    rc, doc, err = verify_json(tmp_path, "debian:6.17.8", str(PROGRAMS / "other_refresh.c"))
    assert rc == 0, err
    assert doc["verdict"] == "NOT_REPRODUCED" and doc["evidence"]["count"] >= 1
    assert doc["evidence"]["count_name"] == "runs"


def test_a_c_file_that_does_not_build_is_a_usage_error_showing_the_compiler(tmp_path):
    bad = tmp_path / "bad.c"
    bad.write_text("int main(void) { return not_declared_anywhere; }\n")
    p = kstall("verify", "debian:7.3.4", str(bad), "--results", str(tmp_path))
    assert p.returncode == 2, p.stderr
    assert "not_declared_anywhere" in p.stderr and "does not build" in p.stderr


def test_a_program_that_fails_on_its_own_is_failed_with_its_output_never_a_hang(tmp_path):
    src = tmp_path / "fails.c"
    src.write_text('#include <stdio.h>\nint main(void) { puts("cannot find my config"); return 2; }\n')
    rc, doc, err = verify_json(tmp_path, "debian:7.3.4", str(src))
    assert rc == 5, err
    assert doc["verdict"] == "FAILED" and "cannot find my config" in doc["reason"] and "exited 2" in doc["reason"]


def test_a_program_run_as_it_is_runs_again_and_again_until_its_duration_or_repeat_ends_it(tmp_path):
    """--duration alone repeats a quick program until the time is up (it
    once ran it once); with --repeat, whichever comes first ends it, and the
    verdict says which."""
    src = tmp_path / "quick.c"
    src.write_text("#include <time.h>\nint main(void) { struct timespec t = {0, 20000000}; "
                   "nanosleep(&t, 0); return 0; }\n")
    rc, doc, err = verify_json(tmp_path, "debian:7.3.4", str(src), "--duration", "3")
    assert rc == 0, err
    runs = doc["evidence"]["count"]
    assert doc["verdict"] == "NOT_REPRODUCED" and runs > 5, doc["line"]  # 20 ms each: dozens in 3 s
    assert f"{runs} runs without a hang (its 3s were up)" in doc["reason"]
    rc, doc, err = verify_json(tmp_path, "debian:7.3.4", str(src), "--duration", "60", "--repeat", "4")
    assert rc == 0, err
    assert doc["evidence"]["count"] == 4 and "(its 4 runs were done before its 60s were up)" in doc["reason"]


def test_a_dynamic_host_program_run_as_a_host_command_reproduces_the_freeze_and_never_writes_the_host(tmp_path):
    exe = tmp_path / "other-refresh-dynamic"
    subprocess.run(["gcc", "-O2", "-pthread", "-o", str(exe), str(PROGRAMS / "other_refresh.c")], check=True)
    assert subprocess.run(["ldd", str(exe)], capture_output=True).returncode == 0  # dynamic
    marker = tmp_path / "written-by-the-guest"
    rc, doc, err = verify_json(tmp_path, "debian:6.16.12", f"run:touch {marker}; {exe} 3")
    assert rc == 1, err
    assert doc["verdict"] == "VULNERABLE" and doc["signature"] == "hrtimer_cancel_self_deadlock"
    assert not marker.exists(), "the guest wrote to the host's filesystem"
    assert doc["vm"]["snapshot"] is None or not doc["vm"]["snapshot"]["restored"]


def test_a_host_command_on_a_kernel_whose_virtiofs_is_a_module_runs_from_the_callers_directory(tmp_path):
    """bookworm's 6.1 has CONFIG_VIRTIO_FS=m and CONFIG_FUSE_FS=m: their modules
    come with the kernel and are loaded before the host's root is mounted."""
    (tmp_path / "marker.txt").write_text("from the host\n")
    p = subprocess.run([*KSTALL_CMD, "verify", "debian:6.1.192", "run:pwd; cat marker.txt; echo x > new.txt",
                        "--json", "--results", str(tmp_path / "r")], capture_output=True, text=True, timeout=600,
                       cwd=tmp_path)
    doc = json.loads(p.stdout)
    assert p.returncode == 0 and doc["verdict"] == "NOT_REPRODUCED", p.stderr[-2000:]
    assert "fuse, virtiofs" in p.stderr  # "modules to load first: ..., fuse, virtiofs"
    rundir = next(d for d in (tmp_path / "r").iterdir() if not d.name.startswith("."))
    out = [line for line in (rundir / "agent.log").read_text().splitlines() if not line.startswith("HB ")]
    assert [f"| {tmp_path}", "| from the host"] == out[out.index("1..1") + 1:][:2], out
    assert not (tmp_path / "new.txt").exists(), "the guest wrote to the host's filesystem"


# 7.3.4 alone: a kernel without the blocker field (6.1.170) titles its sleeping hangs
# from the stacks in test_console_reports.py and test_wait_graph.py
@pytest.mark.parametrize("version", ["7.3.4"])
def test_a_sleeping_hang_is_a_hung_task_titled_from_its_kernel_stack_within_30s(tmp_path, version):
    rc, doc, err = verify_json(tmp_path, f"debian:{version}", str(PROGRAMS / "pipe_sleeper.c"))
    assert rc == 1, err
    assert doc["verdict"] == "VULNERABLE" and doc["outcome"]["kind"] == "sleeping"
    assert doc["title"].startswith("INFO: task hung in ") and "pipe" in doc["title"], doc["title"]
    task = doc["hang"]["tasks"][0]
    assert task["kstack"] and any("pipe" in f for f in task["kstack"])
    assert doc["timings"]["repro_s"] < 30, doc["timings"]


def own_reproducer(root: Path) -> Path:
    """A user's reproducer kept outside the repository: its data file, its
    C file, and a signature of its own (the hrtimer spin under another name)."""
    d = root / "my-refresh"
    (d / "signatures").mkdir(parents=True)
    shutil.copy(PROGRAMS / "other_refresh.c", d / "my_refresh.c")
    sig = HRTIMER_SIG.read_text().replace('name = "hrtimer_cancel_self_deadlock"', 'name = "my_refresh_hang"')
    sig = sig.replace('title = "hrtimer_cancel self-deadlock"', 'title = "my REFRESH hang"')
    sig = "\n".join(line for line in sig.splitlines() if not line.startswith("bug ="))
    (d / "signatures" / "my_refresh_hang.toml").write_text(sig + "\n")
    (d / "my-refresh.toml").write_text(
        'name = "my-refresh"\nsummary = "REFRESH re-armed from its own loop"\nsource = "my_refresh.c"\n'
        'default_args = ["1"]\n[kernel]\noptions = ["PERF_EVENTS"]\n')
    return d


def test_a_users_own_reproducer_with_its_signatures_runs_in_a_matrix_and_a_bisection(tmp_path):
    d = own_reproducer(tmp_path)
    matrix = tmp_path / "matrix.toml"
    matrix.write_text('[[reproducer]]\nname = "my-refresh"\npath = "my-refresh"\n'
                      '[[kernel]]\nspec = "debian:6.12.107"\nexpect = { my-refresh = "not_reproduced" }\n'
                      '[[kernel]]\nspec = "debian:6.16.12"\nexpect = { my-refresh = "vulnerable" }\n')
    p = kstall("matrix", str(matrix), "--results", str(tmp_path / "m"), timeout=900)
    assert p.returncode == 0, p.stdout + p.stderr
    mdir = next((tmp_path / "m").glob("*matrix*"))
    doc = json.loads((mdir / "matrix.json").read_text())
    sigs = {c["kernel"]: c.get("signature") for c in doc["cells"]}
    assert sigs["debian:6.16.12"] == "my_refresh_hang", doc["cells"]
    p = kstall("bisect", "debian", "--old", "6.12.107", "--new", "6.16.12", str(d), "--results",
               str(tmp_path / "b"), timeout=1800)
    assert p.returncode == 0, p.stdout + p.stderr[-3000:]
    assert "first version with it: 6.16.12" in p.stdout, p.stdout


def test_a_bisection_step_that_hangs_another_way_is_skipped_with_the_reason(tmp_path):
    # one second a run (its default is 3): a clean step of a program with no calibration runs 4 times
    p = kstall("bisect", "debian", "--old", "6.12.107", "--new", "6.16.12", str(PROGRAMS / "refresh_or_sleep.c"),
               "--results", str(tmp_path), "--", "1", timeout=1800)
    bdir = next(d for d in tmp_path.iterdir() if "bisect-debian" in d.name and not d.name.startswith("."))
    doc = json.loads((bdir / "bisect.json").read_text())
    steps = {s["candidate"]: s for s in doc["steps"]}
    assert steps["6.16.12"]["state"] == "reproduces", steps
    other = steps["6.16.3"]
    assert other["state"] == "skip" and "different hang" in other["line"], other
    assert "INFO: task hung in" in other["line"]
    odd = {v: (s["state"], s["verdict"], s["line"], s["p_miss"]) for v, s in steps.items()
           if v not in ("6.16.12", "6.16.3") and s["state"] != "clean"}
    assert not odd, odd
    # the regression is found, with the step that hung another way left between its ends
    assert p.returncode == 0, p.stderr[-2000:]
    assert doc["direction"] == "regression" and doc["first_new"] == "6.16.12" and "6.16.3" in doc["skipped_between"], \
        doc


def test_a_user_program_stuck_in_user_space_is_dumped_and_its_deadlock_cycle_named(tmp_path):
    # deadlocked 0.2 s after it starts: 5 s of no progress say so as well as the default 30 s
    rc, doc, err = verify_json(tmp_path, "debian:7.3.4", str(PROGRAMS / "lock_inversion.c"), "--stuck-after", "5")
    assert rc == 1, err
    assert doc["verdict"] == "VULNERABLE" and doc["outcome"]["kind"] == "stuck"
    assert doc["title"] == "user-space deadlock: 2 threads, mutex -> mutex", doc["title"]
    assert "deadlock: LWP" in doc["summary"] and "<->" in doc["summary"]
    assert doc["hang"]["title"] == ""  # the vCPUs were read first: no kernel culprit


@pytest.mark.skipif(os.geteuid() != 0, reason="mounts a tmpfs (root)")
def test_a_host_command_runs_from_a_directory_on_another_file_system(tmp_path):
    """run:CMD from a directory on a tmpfs of its own (as /tmp or /home on its
    own partition are): the guest sees its files, and the host's stay as they were."""
    here = Path(tempfile.mkdtemp(prefix="kstall-hostfs-", dir="/tmp"))
    subprocess.run(["mount", "-t", "tmpfs", "kstall-test", str(here)], check=True)
    try:
        (here / "marker").write_text("on a tmpfs of its own\n")
        p = subprocess.run([*KSTALL_CMD, "verify", "debian:7.3.4", "run:cat marker && echo written > marker",
                            "--json", "--results", str(tmp_path)], cwd=here, capture_output=True, text=True,
                           timeout=600)
        doc = json.loads(p.stdout)
        assert doc["verdict"] == "NOT_REPRODUCED", doc["line"]
        log = (Path(doc["results_dir"]) / "agent.log").read_text()
        assert "on a tmpfs of its own" in log
        assert (here / "marker").read_text() == "on a tmpfs of its own\n"  # the guest wrote to its overlay only
    finally:
        subprocess.run(["umount", str(here)], check=False)
        here.rmdir()
