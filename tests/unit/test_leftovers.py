# SPDX-License-Identifier: GPL-2.0
"""Leftovers of killed runs: removed when their owner is gone, never while it lives."""
import json
import os
import subprocess
import sys

from harness.base import leftovers


def test_only_dead_owners_leftovers_are_swept(tmp_path, monkeypatch):
    monkeypatch.setattr(leftovers.tempfile, "gettempdir", lambda: str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    results = tmp_path / "results"
    live = tmp_path / "tmp" / "kstall-live"
    dead = tmp_path / "tmp" / "kstall-dead"
    half = results / ".20261123-x.incomplete"
    unowned = tmp_path / "tmp" / "kstall-unowned"
    for d in (live, dead, half, unowned):
        d.mkdir(parents=True)
    leftovers.mark(live)
    # a process that has exited: its pid and start time name nobody now
    child = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    pid = int(child.stdout)
    (dead / leftovers.OWNER).write_text(f"{pid} 1\n")
    (half / leftovers.OWNER).write_text(f"{os.getpid()} 0\n")  # pid reused by someone else: start time differs
    gone, kept = leftovers.sweep(results)
    assert sorted(gone) == sorted([dead, half]) and kept == []
    assert live.exists() and unowned.exists() and not dead.exists() and not half.exists()
    os.utime(unowned, (0, 0))  # a day old and ownerless: a user's own, not provably kstall's
    assert leftovers.sweep(results) == ([], []) and unowned.exists()


def test_a_killed_bisection_is_kept_for_resume_not_swept(tmp_path):
    killed = tmp_path / ".20261123-bisect-debian-6.12.107-6.16.12-perf-refresh-ab12.incomplete"
    (killed / "runs" / ".20261123-6.16.3-perf-refresh-cd34.incomplete").mkdir(parents=True)
    (killed / "runs" / "20261123-6.12.107-perf-refresh-ef56").mkdir()
    (killed / "bisect.json").write_text(json.dumps({"status": "running", "steps": [{"candidate": "6.12.107"}]}))
    (killed / leftovers.OWNER).write_text("999999999 1\n")
    gone, kept = leftovers.sweep(tmp_path)
    final = tmp_path / "20261123-bisect-debian-6.12.107-6.16.12-perf-refresh-ab12"
    assert gone == [] and kept == [final] and not killed.exists()
    doc = json.loads((final / "bisect.json").read_text())
    assert doc["status"] == "killed" and doc["steps"] == [{"candidate": "6.12.107"}]
    assert [p.name for p in (final / "runs").iterdir()] == ["20261123-6.12.107-perf-refresh-ef56"]
    assert not (final / leftovers.OWNER).exists()


def test_run_directories_are_private_whatever_the_umask(tmp_path):
    from harness.base import rundir
    old = os.umask(0o022)
    try:
        run = rundir.RunDir("x", tmp_path)
        assert run.work.stat().st_mode & 0o777 == 0o700
        final = run.finalize()
        assert final.stat().st_mode & 0o777 == 0o700
    finally:
        os.umask(old)


def test_a_vm_waits_a_bounded_time_for_qemu_to_end_and_reaps_it(tmp_path):
    """A guest that powered off as kstall began to read it: QMP is closed but
    QEMU's process has not ended yet. kstall waits for it, within a bound."""
    from harness.guest.vm import VM, VMConfig
    with VM(VMConfig(kernel=tmp_path / "k", initrd=tmp_path / "i", cmdline="", log_dir=tmp_path)) as vm:
        vm.proc = subprocess.Popen(["sleep", "0.3"])
        assert vm.alive() and vm.ends_within(10) and vm.proc.returncode == 0 and not vm.alive()
        vm.proc = subprocess.Popen(["sleep", "60"])
        assert not vm.ends_within(0.2) and vm.alive()
        vm.proc.kill()
    assert vm.proc.returncode == -9 and not vm.run_dir.exists()  # stop() reaped it
