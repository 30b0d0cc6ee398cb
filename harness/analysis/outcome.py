# SPDX-License-Identifier: GPL-2.0
"""How a run ended: what the watch (harness/guest/watch.py) saw, or why there
was nothing to watch."""
from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class OutcomeKind(StrEnum):
    DONE = "done"                  # the agent reported the reproducer's exit and powered off
    FREEZE = "freeze"              # heartbeats stopped for `freeze_after` seconds
    STUCK = "stuck"                # heartbeats go on, the progress count does not: some CPUs are
                                   # wedged, or (a user-space reproducer) the process is
    STALL = "stall"                # the reproducer's own latency measurement passed its threshold
    SLEEPING = "sleeping"          # a task of the reproducer's slept in D state, in one kernel wait,
                                   # past its threshold while the kernel went on (a hung task)
    REPORTED = "kernel-report"     # the kernel's own detector reported a hang (a report a guest
                                   # environment says ends its run: a hung task, a soft lockup)
    PANIC = "panic"                # a kernel report on the console (after a grace period that
    OOPS = "oops"                  # lets the report finish)
    INFRA = "infra"                # an emulator fault: recognised on the console, or QEMU crashed (retryable)
    BOOT_FAILURE = "boot-failure"  # no agent within the boot timeout, or the kernel said it cannot boot
    AGENT_ERROR = "agent-error"    # the guest agent said why it cannot run (a module, no virtio port)
    QEMU_EXIT = "qemu-exit"        # QEMU went away before the agent said it was done
    QEMU_STOPPED = "qemu-stopped"  # QEMU itself was stopped (SIGSTOP/SIGTSTP from outside kstall)
    TIMEOUT = "timeout"            # the run took longer than its limit
    INTERRUPTED = "interrupted"    # Ctrl-C, SIGTERM, or the matrix run was stopped
    PREFLIGHT = "preflight"        # the kernel lacks what the reproducer needs: nothing booted
    ERROR = "error"                # kstall could not run it (bad input, QEMU would not start)

    @property
    def hang(self) -> bool:
        """A hang whose vCPUs (or threads) are read."""
        return self in (OutcomeKind.FREEZE, OutcomeKind.STUCK)

    @property
    def handed_over(self) -> bool:
        """A hang whose guest --hold keeps and --vmcore writes: a frozen or
        stuck one, and a task asleep for good (the agent's, or the kernel's
        own report of one), whose locks and holders the core has too."""
        return self.hang or self in (OutcomeKind.SLEEPING, OutcomeKind.REPORTED)


# a boot failure's detail when the guest's agent never spoke: the one boot
# failure that may be the host's (twice on a cold make test, the console
# empty), not the kernel's, and so booted once more (retry.py)
NO_AGENT = "no guest agent within"


@dataclass
class Outcome:
    kind: OutcomeKind
    detail: str
    at: float  # monotonic

    def __post_init__(self) -> None:
        self.kind = OutcomeKind(self.kind)  # a bare string is checked here, once
