# SPDX-License-Identifier: GPL-2.0
"""The retry policy, in one place: which verdicts another attempt may
overturn, and how many attempts each may have.

A verdict carries a Retry cause when what it rests on may be the emulator's,
the host's or kstall's own doing rather than the kernel's. verify runs
attempts until one carries none, within --attempts (and the extra tries
below); the files of every attempt are kept."""
from __future__ import annotations

from enum import StrEnum


class Retry(StrEnum):
    """Why a verdict may not be the kernel's."""
    EMULATOR_FAULT = "emulator fault"   # TCG's text-patching int3 (on the console or the CPUs), QEMU's crash
    HOST_DELAY = "host delay"           # a latency the host's own delay of a vCPU could explain
    CUT_SHORT = "cut short"             # a stall run ended before its counters had what a verdict needs
    SILENT = "silent"                   # the reproducer printed nothing: the agent's or the channel's doing
    SNAPSHOT = "snapshot"               # a guest restored from a snapshot did not come up: the snapshot's fault
    SILENT_BOOT = "silent boot"         # no agent within the boot timeout (where its vCPUs were is recorded)


# one try more than --attempts for a verdict that the host's delay decides:
# on a busy 2-core host a stall meets the delay again about 1 time in 30
EXTRA_TRIES = {Retry.HOST_DELAY: 1, Retry.CUT_SHORT: 1}


# how the next attempt's accelerator differs: TCG's text-patching race needs
# vCPUs on two host threads (a kernel patches code another vCPU is running), so
# the try after one runs every vCPU on one thread, about half as fast
NEXT_ACCEL = {(Retry.EMULATOR_FAULT, "tcg"): "tcg-single"}


# where a kernel can meet that race at all: multi-threaded TCG ("" is an
# attempt whose accelerator is not known, as in older records). Under
# tcg-single or KVM an int3 oops in the kernel's text, or a CPU stuck in
# text_poke's sync, is the kernel's own, never the emulator's
TEXT_PATCHING_RACE = frozenset({"tcg", ""})


def text_patching_race(accel: str) -> bool:
    """Whether an attempt under accel can meet TCG's text-patching race."""
    return accel in TEXT_PATCHING_RACE


def no_race_under(accel: str) -> str:
    """What a verdict says of an int3 oops where the race cannot be."""
    return f"under {accel}, where no emulator race patches its text"


def accel_after(cause: Retry | None, accel: str) -> str:
    """The accelerator of the attempt after one that ended with cause under accel."""
    return NEXT_ACCEL.get((cause, accel), accel) if cause is not None else accel


def another_attempt(cause: Retry | None, done: int, attempts: int) -> bool:
    """Whether attempt done+1 runs, after attempt done ended with cause
    (attempts: --attempts; 0 or 1 means no extra try beyond it)."""
    if cause is None:
        return False
    extra = EXTRA_TRIES.get(cause, 0) if attempts > 1 else 0
    return done < attempts + extra
