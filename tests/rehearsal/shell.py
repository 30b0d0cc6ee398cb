# SPDX-License-Identifier: GPL-2.0
"""What every CI system's jobs share here: a script run in the root as a
job's shell would run it, a new container's state, the project's files, the
jobs' order by their needs, and where a merge left its matrix.json."""
from __future__ import annotations

import os
import signal
import subprocess
import tempfile
from pathlib import Path

from clean_root import ROOT

INSIDE = "/ci"                    # the rehearsal's directory, as the root sees it
HOST = ROOT / INSIDE.lstrip("/")
BASE_ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root",
            "LANG": "C.UTF-8", "CI": "true"}
JOB_TIMEOUT = 3600


SHELL = ("bash", "--noprofile", "--norc", "-eo", "pipefail")


def run_script(script: str, cwd: str, env: dict, log: Path, shell=SHELL, interrupt_after: float | None = None) -> int:
    """One script in the root, in cwd (as the root sees it), with only env;
    its output appended to log. interrupt_after: seconds after which the
    step is cancelled as a runner cancels one whose job ran out of time
    (SIGINT to its processes, SIGKILL to what is left 30 s later)."""
    fd, path = tempfile.mkstemp(dir=HOST, suffix=".sh")
    with os.fdopen(fd, "w") as f:
        f.write(script + "\n")
    inside = f"{INSIDE}/{Path(path).name}"
    try:
        with log.open("a") as out:
            out.write(f"$ {script}\n")
            out.flush()
            p = subprocess.Popen(["chroot", str(ROOT), "env", "--ignore-environment", f"--chdir={cwd}",
                                  *[f"{k}={v}" for k, v in {**BASE_ENV, **env}.items()], *shell, inside],
                                 stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
            try:
                return p.wait(timeout=interrupt_after if interrupt_after is not None else JOB_TIMEOUT)
            except subprocess.TimeoutExpired:
                if interrupt_after is None:
                    _signal_group(p, signal.SIGKILL)
                    p.wait(timeout=30)
                    raise
                out.write(f"rehearsal: step cancelled after {interrupt_after:.0f}s (SIGINT)\n")
                out.flush()
                _signal_group(p, signal.SIGINT)
            try:
                return p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                _signal_group(p, signal.SIGKILL)
                return p.wait(timeout=30)
    finally:
        os.unlink(path)


def _signal_group(p: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(p.pid, sig)
    except ProcessLookupError:
        pass


# what a new job's container has not: kstall, and the other guest
# architecture's tools, which a shard installs for its matrix (kstall doctor --packages)
NOT_IN_A_NEW_CONTAINER = "kstall qemu-system-arm gdb-multiarch"


def fresh_container(log: Path) -> None:
    """A new job's container, as far as the jobs can tell."""
    run_script(f"dpkg --purge {NOT_IN_A_NEW_CONTAINER} >/dev/null 2>&1 || true", "/", {}, log)


def copy_project(dest: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        (dest / rel).write_text(text)


def in_needs_order(jobs: dict) -> list[str]:
    order: list[str] = []
    while len(order) < len(jobs):
        ready = [n for n, j in jobs.items() if n not in order and all(d in order for d in needs_of(j))]
        if not ready:
            raise SystemExit("rehearsal: the jobs' needs make a circle")
        order += ready
    return order


def needs_of(job: dict) -> list[str]:
    needs = job.get("needs", [])
    return [n if isinstance(n, str) else n["job"] for n in ([needs] if isinstance(needs, str) else needs)]



def merged_dir(parent: Path) -> Path:
    found = sorted(parent.glob("*/matrix.json"))
    if not found:
        raise SystemExit(f"rehearsal: no merged matrix.json under {parent}")
    return found[-1].parent
