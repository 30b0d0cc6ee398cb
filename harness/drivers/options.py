# SPDX-License-Identifier: GPL-2.0
"""How a verify run goes: the options every driver (verify, matrix, bisect,
calibrate) hands to it."""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from harness.debug.process import CommandHook
from harness.guest.cores import CoreBudget
from harness.guest.vm import VM
from images.kernels.build import BuildOptions


# heartbeat silence that is a freeze, unless --freeze-after fixes it: this
# floor (six heartbeats of 50 ms) plus what the host held the guest back by
# meanwhile (harness/guest/hostwait.py), at most the ceiling
FREEZE_FLOOR = 0.3
FREEZE_CEILING = 0.8


@dataclass
class Options:
    cpus: int | None = None
    memory_mb: int = 1024
    accel: str = "auto"
    duration: float | None = None
    count: int | None = None
    pmiss_target: float = 1e-6
    repro_args: list[str] = field(default_factory=list)
    samples: int = 3
    sample_interval: float = 0.1  # guest run between two samples: a CPU passing through moves on in it
    freeze_after: float | None = None  # None: FREEZE_FLOOR adapted to the host, up to FREEZE_CEILING
    stuck_after: float | None = None
    boot_timeout: float = 120.0
    attempts: int = 2
    vmlinux: Path | None = None
    results_root: Path | None = None
    cmdline_extra: str = ""
    # build: kernels: the user's config fragments, --debuginfo, jobs
    build: BuildOptions | None = None
    # in-process API: called with (vm, attempt number) once the reproducer runs
    on_repro_start: Callable[[VM, int], None] | None = None
    # shared by guests running side by side (matrix): boot ahead, run in turn
    budget: CoreBudget | None = None
    # set by another thread to end the run (reported as interrupted)
    cancel: threading.Event | None = None
    # image: kernels: boot the image's own initrd and userspace (images/guest/boot_image.py)
    boot_image: bool = False
    # image: kernels: backing files outside the image's directory are the user's own
    trust_backing: bool = False
    # in-process API: called before each GDB command of a process thread dump
    # (harness/debug/process.py; tests make GDB fail on one thread with it)
    on_thread_command: CommandHook | None = None
    # restore the kernel's guest saved at its agent's gate (harness/guest/snapshot.py); False boots cold
    snapshot: bool = True
