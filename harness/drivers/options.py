# SPDX-License-Identifier: GPL-2.0
"""How a verify run goes, one object per stage, as every driver (verify,
matrix, bisect, calibrate) hands it on: the kernel's resolution, the guest's
machine, the reproducer's run and its watch, the reading of a hang, and the
hooks of an in-process caller."""
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
DEFAULT_PMISS = 1e-6  # the P(miss) a NOT_REPRODUCED aims for where the reproducer is calibrated
DEFAULT_MEMORY_MB = 1024  # the guest's memory, unless the user or the reproducer's environment says


@dataclass
class KernelOptions:
    """How the kernel spec is resolved (harness/drivers/case.py)."""
    build: BuildOptions | None = None  # build: kernels: the user's config fragments, --debuginfo, jobs
    # image: kernels: boot the image's own initrd and userspace (images/guest/boot_image.py)
    boot_image: bool = False
    trust_backing: bool = False  # image: kernels: backing files outside the image's directory are the user's own
    arch: str | None = None  # --arch: the architecture the kernel must be (None: whatever it is)


@dataclass
class GuestOptions:
    """The machine the guest runs on (harness/guest/)."""
    cpus: int | None = None      # None: the reproducer's default
    memory_mb: int | None = None  # None: its guest environment's, else DEFAULT_MEMORY_MB
    accel: str = "auto"
    cmdline_extra: str = ""
    # restore the kernel's guest saved at its agent's gate (harness/guest/snapshot.py); False boots cold
    snapshot: bool = True


@dataclass
class RunOptions:
    """How long and how often the reproducer runs, and when it counts as hung (harness/guest/watch.py)."""
    duration: float | None = None
    count: int | None = None
    pmiss_target: float = DEFAULT_PMISS
    pmiss_given: bool = False  # --pmiss: the user's target, which an unknown P(miss) does not meet
    repro_args: list[str] = field(default_factory=list)
    attempts: int = 2
    freeze_after: float | None = None  # None: FREEZE_FLOOR adapted to the host, up to FREEZE_CEILING
    stuck_after: float | None = None
    boot_timeout: float = 120.0
    # a kernel detector's report is a hang once what it reports was stuck this long
    # (None: syzbot's detector's time, scaled for the accelerator: guest_env.confirm_for)
    hang_after: float | None = None


@dataclass
class DebugOptions:
    """How a hang is read (harness/debug/)."""
    samples: int = 3
    sample_interval: float = 0.05  # guest run between two samples: a CPU passing through moves on in it
    vmlinux: Path | None = None   # with DWARF: GDB shows inlined frames
    hold: float | None = None  # seconds a hung guest is kept stopped for the developer's debugger (--hold)
    vmcore: bool = False  # a hang's guest written as RUN/vmcore (--vmcore)


@dataclass
class Hooks:
    """What an in-process caller shares with a run or learns from it."""
    # called with (vm, attempt number) once the reproducer runs
    on_repro_start: Callable[[VM, int], None] | None = None
    # called before each GDB command of a process thread dump (harness/debug/process.py;
    # tests make GDB fail on one thread with it)
    on_thread_command: CommandHook | None = None
    budget: CoreBudget | None = None  # shared by guests running side by side (matrix): boot ahead, run in turn
    cancel: threading.Event | None = None  # set by another thread to end the run (reported as interrupted)


@dataclass
class Options:
    kernel: KernelOptions = field(default_factory=KernelOptions)
    guest: GuestOptions = field(default_factory=GuestOptions)
    run: RunOptions = field(default_factory=RunOptions)
    debug: DebugOptions = field(default_factory=DebugOptions)
    hooks: Hooks = field(default_factory=Hooks)
    results_root: Path | None = None
