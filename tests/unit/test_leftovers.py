# SPDX-License-Identifier: GPL-2.0
"""Leftovers of killed runs: removed when their owner is gone, never while it lives."""
import os
import subprocess
import sys

from harness import leftovers


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
    gone = leftovers.sweep(results)
    assert sorted(gone) == sorted([dead, half])
    assert live.exists() and unowned.exists() and not dead.exists() and not half.exists()
    os.utime(unowned, (0, 0))  # a day old and ownerless
    assert leftovers.sweep(results) == [unowned]
