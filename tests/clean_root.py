# SPDX-License-Identifier: GPL-2.0
"""A clean bookworm root (debootstrap, minbase), kept in kstall's cache and
reused, for the checks that stand in for a fresh machine: check-install (the
package as a user gets it) and check-ci (the CI templates' jobs). Root only."""
from __future__ import annotations

import contextlib
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from harness.base import paths  # noqa: E402

ROOT = paths.cache_dir() / "check-install" / "bookworm"


def step(what: str, cmd: list[str], ok=(0,), timeout: float = 1800, **kw) -> subprocess.CompletedProcess:
    """Run one step, print its time; stop the check on an unexpected exit."""
    t0 = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)
    took = time.monotonic() - t0
    print(f"{'ok  ' if p.returncode in ok else 'FAIL'} {what}: exit {p.returncode}, {took:.1f}s", flush=True)
    if p.returncode not in ok:
        print(p.stdout[-3000:] + p.stderr[-3000:])
        raise SystemExit(1)
    return p


def in_root(script: str, user: str | None = None) -> list[str]:
    inner = ["su", "-", user, "-c", script] if user else ["bash", "-c", script]
    return ["chroot", str(ROOT), *inner]


def build_deb() -> Path:
    return Path(step("make deb", [sys.executable, str(REPO / "ci" / "build_deb.py")]).stdout.split()[-1])


@contextlib.contextmanager
def mounted() -> Iterator[Path]:
    """The root, made if missing, with /proc, /sys, /dev, this host's DNS and
    apt settings, and fresh package lists; everything mounted is let go after."""
    if not (ROOT / "usr" / "bin" / "apt-get").exists():
        shutil.rmtree(ROOT, ignore_errors=True)
        ROOT.mkdir(parents=True)
        step("debootstrap bookworm (minbase)", ["debootstrap", "--variant=minbase", "bookworm", str(ROOT),
                                                "http://deb.debian.org/debian"])
    mounts = [(ROOT / "proc", ["-t", "proc", "proc"]), (ROOT / "sys", ["--rbind", "/sys"]),
              (ROOT / "dev", ["--rbind", "/dev"])]
    done: list[Path] = []
    try:
        for where, how in mounts:
            subprocess.run(["mount", *how, str(where)], check=True)
            done.append(where)
        shutil.copy2("/etc/resolv.conf", ROOT / "etc" / "resolv.conf")
        # this machine's apt settings (a mirror that serves frozen suites needs its Check-Valid-Until)
        for conf in Path("/etc/apt/apt.conf.d").glob("*"):
            shutil.copy2(conf, ROOT / "etc" / "apt" / "apt.conf.d" / conf.name)
        step("apt-get update", in_root("apt-get update -q"))
        yield ROOT
    finally:
        for where in reversed(done):
            subprocess.run(["umount", "-R", "-l", str(where)], check=False)


@contextlib.contextmanager
def bound(host_dir: Path, inside: str) -> Iterator[Path]:
    """host_dir seen at `inside` in the root (a CI system's restored cache)."""
    target = ROOT / inside.lstrip("/")
    target.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "--bind", str(host_dir), str(target)], check=True)
    try:
        yield target
    finally:
        subprocess.run(["umount", "-l", str(target)], check=False)
