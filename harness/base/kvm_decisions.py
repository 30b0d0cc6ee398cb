# SPDX-License-Identifier: GPL-2.0
"""Whether KVM ran a guest on this host boot: the decisions harness/guest/accel.py
makes, kept in <cache>/kvm-probe.json under a lock, for everything that starts
a QEMU of its own (libguestfs) as well as for kstall's guests."""
from __future__ import annotations

import fcntl
import json
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from harness.base import paths

HOST = "host"  # the key of the host-wide decision, beside one key per kernel


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return "unknown"


def _state_file() -> Path:
    return paths.cache_dir() / "kvm-probe.json"


@contextmanager
def decisions() -> Iterator[dict]:
    """This host boot's decisions, locked against other kstall processes;
    what the block adds is written back."""
    path = _state_file()
    with open(path.with_name(path.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            known = json.loads(path.read_text())
        except (OSError, ValueError):
            known = {}
        mine = known.setdefault(_boot_id(), {})
        before = json.dumps(mine, sort_keys=True)
        yield mine
        if json.dumps(mine, sort_keys=True) != before:
            # only this boot's decisions are worth keeping
            paths.write_atomic(path, json.dumps({_boot_id(): mine}, indent=1) + "\n")


def _recorded() -> dict:
    try:
        return json.loads(_state_file().read_text()).get(_boot_id(), {})
    except (OSError, ValueError, AttributeError):
        return {}


def guest_ran_under_kvm() -> bool:
    """Whether a guest has run under KVM on this host boot: what libguestfs,
    which starts its own QEMU with KVM whenever /dev/kvm opens, must be told
    before it may use KVM."""
    return bool(_recorded().get(HOST, {}).get("works"))
