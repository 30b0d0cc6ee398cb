# SPDX-License-Identifier: GPL-2.0
"""What a watch is given: its limits (every wait bounded) and the calls it
makes back at each moment (harness/guest/watch.py)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from harness.base.guest_env import ConfirmRule


@dataclass
class Limits:
    boot_timeout: float = 120.0
    # heartbeat silence that is a freeze; with freeze_floor, the most it takes:
    # a silence of freeze_floor is a freeze once the host's own delay of the
    # vCPUs and of QEMU's main loop over it (Calls.host_delay) is added to it
    freeze_after: float = 0.8
    freeze_floor: float | None = None
    stuck_after: float = 1.0
    run_timeout: float = 180.0
    report_grace: float = 1.5
    gate_timeout: float = 3600.0  # at the agent's gate, waiting for free host cores (a matrix)
    stalls: int = 0  # > 0: end with "stall" once the progress line's over= reaches this
    stall_measure: str = "measurement"  # what the reproducer times (its data file's [stall] measure)
    # console-patterns.toml names of the kernel's reports that end the run as a hang
    # (a guest environment's: its kernel detectors are the judges), once confirmed
    report_ends: tuple[str, ...] = ()
    # when one of those is a hang (harness/analysis/candidates.py); one without a rule is at once
    confirm: tuple[ConfirmRule, ...] = ()
    # a candidate first reported this long after the program started holds the time-up kill; a later one
    # (the program went on while held) does not, so that held runs end within run_timeout
    hold_for: float = float("inf")


@dataclass
class Calls:
    """What the watch calls back, each at its moment; every one is optional."""
    on_repro_start: Callable[[], None] | None = None  # the reproducer started (the agent said so)
    on_line: Callable[[str], None] | None = None      # each line the reproducer prints
    on_ready: Callable[[], None] | None = None        # once: the guest waits at its gate (a snapshot is saved)
    # once per arming, when heartbeats or the progress count have been still
    # for SUSPECT_AT of their limit: time to get a debugger ready
    on_suspect: Callable[[], None] | None = None
    # (t0, t1) -> ms the host held the guest back then (hostwait.HostWait.silence), or None
    host_delay: Callable[[float, float], float | None] | None = None
    # once: the kernel reported a hung task while the guest lives on (who holds what it waits for)
    on_hung_task: Callable[[], object] | None = None
