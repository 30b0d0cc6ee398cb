# SPDX-License-Identifier: GPL-2.0
"""Child-process hygiene: children die with kstall and are always reaped."""
from __future__ import annotations

import ctypes
import gc
import io
import os
import signal
import subprocess
import sys
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Iterator, NoReturn

_PR_SET_PDEATHSIG = 1
_libc = ctypes.CDLL(None, use_errno=True)
_me = os.getpid()
_forked_by = _me  # in a forked child: the pid of the process that forked it


def signal_name(sig: int) -> str:
    """SIGSEGV for 11; a number no name is known for, as such."""
    try:
        return signal.Signals(sig).name
    except ValueError:
        return f"signal {sig}"


def _after_fork_in_child() -> None:
    """Runs in the new child only. A hook that ran in kstall before each fork
    lost signals: a SIGTERM's Interrupted raised inside a fork hook is
    printed and dropped by Python, and the run went on to its verdict."""
    global _me, _forked_by
    _forked_by, _me = _me, os.getpid()


os.register_at_fork(after_in_child=_after_fork_in_child)


def stat_fields(stat_file: str | Path) -> list[str]:
    """The fields of a /proc/<pid>[/task/<tid>]/stat after the command name
    (which may hold spaces and parentheses): [0] state, [1] ppid, [19]
    start time. [] when the process is gone."""
    try:
        text = Path(stat_file).read_text(errors="replace")
    except OSError:
        return []
    return text.rsplit(")", 1)[1].split() if ")" in text else []


def die_with_parent() -> None:
    """preexec_fn: the child gets SIGKILL if kstall dies, even by SIGKILL.
    (Linux ties this to the forking thread, so fork from long-lived threads.)"""
    _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    # kstall may have died between the fork and the prctl (a signal while
    # Popen waits for the exec): then no death signal would ever come
    if os.getppid() != _forked_by:
        os._exit(1)


def dying_with_parent(cmd: list[str]) -> list[str]:
    """cmd made to get SIGKILL if kstall dies, as die_with_parent does, with
    no Python run between the fork and the exec: a preexec_fn forks the whole
    interpreter, which took 15-60 ms of QEMU's start where a plain spawn takes
    1 ms. setpriv sets the death signal; the shell it runs ends at once if
    kstall died before that (no signal would ever come), else becomes cmd.
    (Linux ties the signal to the forking thread, as for die_with_parent.)"""
    return ["setpriv", "--pdeathsig", "KILL", "--", "/bin/sh", "-c", 'test "$PPID" = "$0" && exec "$@"',
            str(os.getpid()), *cmd]


def reap(proc: subprocess.Popen, grace: float = 3.0) -> int | None:
    """Terminate, then kill, and always wait: no zombies, no orphans."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            proc.kill()
    try:
        return proc.wait(grace)
    except subprocess.TimeoutExpired:
        return None


def background_priority() -> None:
    """Lowest CPU priority for the calling thread and what it starts (a thread
    pool initializer): downloads and package extraction must not steal CPU
    from a running guest, whose stall measurements would pick it up as noise."""
    os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)


class Interrupted(Exception):
    """SIGTERM/SIGHUP turned into an exception so cleanup code runs."""


_terminated = ""  # the Ctrl-C, SIGTERM or SIGHUP received, if any


def _interrupt(name: str) -> BaseException:
    return KeyboardInterrupt() if name == "SIGINT" else Interrupted(name)


def raise_on_termination() -> None:
    def handler(signum, frame):  # noqa: ARG001
        global _terminated
        _terminated = signal.Signals(signum).name
        raise _interrupt(_terminated)

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, handler)


def check_terminated() -> None:
    """Raise again a Ctrl-C, SIGTERM or SIGHUP whose exception Python
    dropped: raised while a finalizer or a fork hook ran (a Popen's __del__,
    logging's lock release around a fork), it is printed as "Exception
    ignored" and the run goes on (a fresh clone's SIGTERMed bisection ran its
    last three steps and exited 0). Called where new work starts: a child
    process started, the watch loop, a bisection step, the matrix's wait.
    Only the main thread, which Python runs signal handlers in, acts: a
    matrix's cells end through its cancel event, as they always did."""
    if _terminated and threading.current_thread() is threading.main_thread():
        raise _interrupt(_terminated)


@contextmanager
def signals_deferred() -> Iterator[None]:
    """Ctrl-C, SIGTERM and SIGHUP wait for the end of the block, then act: a
    results directory takes milliseconds to write and must be written whole.
    (Python runs signal handlers in the main thread only; elsewhere this does nothing.)"""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    sigs = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    old = {s: signal.signal(s, lambda signum, frame: caught.append(signum)) for s in sigs}
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
        if caught:
            signal.raise_signal(caught[0])


def run_bounded(cmd: list[str], timeout: float, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run cmd in its own process group with stdout/stderr captured; on timeout,
    Ctrl-C or any error the whole group is killed and reaped (libguestfs's
    child starts a QEMU of its own). TimeoutExpired propagates."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True, preexec_fn=die_with_parent)
    try:
        check_terminated()  # a signal that came during the fork
        out, err = proc.communicate(timeout=timeout)
    except BaseException:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.communicate()
        raise
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def exit_now(code: int) -> NoReturn:
    """End kstall without the interpreter's teardown: a last garbage
    collection and every module freed one by one took 80 ms of a 1.5 s
    verify. kstall reaps its children and closes its files itself; a file
    object something left open is flushed first, so no output is lost."""
    files: list[io.IOBase | IO] = [o for o in gc.get_objects() if isinstance(o, io.IOBase)]
    for obj in [*files, sys.stdout, sys.stderr]:
        try:
            if not obj.closed and obj.writable():
                obj.flush()
        except (OSError, ValueError):  # a closed pipe, a detached buffer: nothing more to lose
            pass
    os._exit(code)
