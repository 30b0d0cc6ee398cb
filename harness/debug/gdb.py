# SPDX-License-Identifier: GPL-2.0
"""GDB under pexpect: started the same way for the vCPUs (QEMU's gdbstub) and
for a process's threads (its core)."""
from __future__ import annotations

import contextlib
import os
import signal
import time

import pexpect

from harness.base import procs



class DebugError(RuntimeError):
    pass


def gdb_binary(default: str = "gdb") -> str:
    """The debugger: the guest architecture's (default), or KSTALL_GDB."""
    return os.environ.get("KSTALL_GDB") or default


def spawn_gdb(args: list[str], log, timeout: float, gdb: str = "gdb") -> pexpect.spawn:
    """GDB (gdb: the architecture's debugger) under pexpect, quiet and
    unpaged, logging what it prints; it dies with kstall. The caller ends it
    (end_gdb)."""
    GDB = gdb_binary(gdb)
    base = ["-nx", "-q", "-ex", "set pagination off", "-ex", "set confirm off", "-ex", "set width 0",
            "-ex", "set style enabled off"]
    parent = os.getpid()
    try:
        child = pexpect.spawn(GDB, base + args, encoding="utf-8", timeout=timeout, echo=False,
                              env={**os.environ, "TERM": "dumb"}, preexec_fn=procs.die_with_parent)
    except pexpect.ExceptionPexpect as e:
        raise DebugError(f"cannot start {GDB}: {e}") from None
    finally:
        # the forked child before its exec: ptyprocess lets an error of its
        # terminal's setup out (EIO, when kstall was killed meanwhile and the
        # pty hung up), and this copy of kstall ran on, wrote a bisection's
        # record as its own and renamed its directory; it must end here
        if os.getpid() != parent:
            os._exit(1)
    child.logfile_read = log
    child.delaybeforesend = None  # pexpect's default 50 ms per command is for terminals that drop input
    child.ptyproc.delayafterclose = 0.01  # (0.1 s) GDB has said EOF by then; a live one is killed anyway
    return child


# how long a killed GDB may take to exit: one that held a large core or the
# kernel's symbols was still tearing its memory down 0.1 s after SIGKILL on a
# host that kept its CPUs 63% busy, and pexpect's close() (which waits just
# that 0.1 s) raised "Could not terminate the child" into the verdict
END_BOUND_S = 10.0


def end_gdb(child: pexpect.spawn) -> None:
    """Kill GDB and reap it within END_BOUND_S. It is killed rather than asked
    to quit: by then it holds nothing of kstall's. One that has not exited by
    the bound (stuck in the kernel) is left to the death signal kstall's exit
    sends; the verdict never waits on it longer."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(child.pid, signal.SIGKILL)
    deadline = time.monotonic() + END_BOUND_S
    while child.isalive() and time.monotonic() < deadline:  # isalive() reaps it
        time.sleep(0.001)
    child.ptyproc.delayafterclose = 0  # (that wait is for a child that may still be exiting: done above)
    with contextlib.suppress(pexpect.ExceptionPexpect, OSError):
        child.close(force=True)
