# SPDX-License-Identifier: GPL-2.0
"""What a killed kstall leaves behind, and its removal by a later run.

QEMU and GDB die with kstall whatever kills it (procs.die_with_parent), but a
SIGKILL leaves its socket directory (/tmp/kstall-*) and its half-assembled
results directory (results/.<id>.incomplete). Each of those carries an
.owner file (pid and process start time), written when kstall made it; a
later kstall removes the ones whose owner is gone. A directory without an
owner file is not provably kstall's (a user's own /tmp/kstall-notes): it is
never removed, however old. A killed bisection is the exception to removal:
its steps took long to run, so its directory is kept, marked "killed", for
`--resume`.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

from harness.base import paths, procs

OWNER = ".owner"


def _start_time(pid: int) -> str | None:
    fields = procs.stat_fields(f"/proc/{pid}/stat")
    return fields[19] if len(fields) > 19 else None


def mark(directory: Path) -> None:
    """Record this process as the directory's owner."""
    (directory / OWNER).write_text(f"{os.getpid()} {_start_time(os.getpid())}\n")


def _abandoned(directory: Path) -> bool:
    """Made by a kstall that is gone (no owner file: not provably kstall's)."""
    try:
        pid, start = (directory / OWNER).read_text().split()
    except (OSError, ValueError):
        return False
    return not pid.isdigit() or _start_time(int(pid)) != start


def candidates(results_root: Path | None) -> list[Path]:
    tmp = Path(tempfile.gettempdir())
    out = [p for p in tmp.glob("kstall-*") if p.is_dir() and not p.is_symlink() and p.stat().st_uid == os.getuid()]
    if results_root is not None and results_root.is_dir():
        out += [p for p in results_root.glob(".*.incomplete") if p.is_dir() and not p.is_symlink()]
    return out


def keep_bisection(directory: Path) -> Path | None:
    """A killed bisection's directory, made whole for --resume; None if it is
    not a bisection."""
    state = directory / "bisect.json"
    try:
        doc = json.loads(state.read_text())
    except (OSError, ValueError):
        return None
    doc["status"] = "killed"
    paths.write_atomic(state, json.dumps(doc, indent=2) + "\n")
    for step in (directory / "runs").glob(".*.incomplete"):  # the step it was killed in
        shutil.rmtree(step, ignore_errors=True)
    (directory / OWNER).unlink(missing_ok=True)
    final = directory.with_name(directory.name[1:-len(".incomplete")])
    os.replace(directory, final)
    return final


def sweep(results_root: Path | None) -> tuple[list[Path], list[Path]]:
    """Remove the leftovers of kstall processes that are gone, keeping killed
    bisections: (what was removed, the bisections kept)."""
    removed, kept = [], []
    for p in candidates(results_root):
        if not _abandoned(p):
            continue
        done = keep_bisection(p) if p.name.endswith(".incomplete") else None
        if done:
            kept.append(done)
        else:
            shutil.rmtree(p, ignore_errors=True)
            removed.append(p)
    return removed, kept
