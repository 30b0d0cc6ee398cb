# SPDX-License-Identifier: GPL-2.0
"""Thread dump of a user-space process: GDB on its core, one thread at a time.

A core comes from the kernel (the guest agent pipes the stuck reproducer's
core to the host), from a user's own service, or from a live process through
GDB's `gcore`, which leaves the process as it was. GDB reads the core with the
program's ELF (symbols and unwind tables) and gdbscripts/kstall_threads.py.

One GDB session answers `kstall-threads`, then `kstall-thread N` for every
thread, each command with its own time limit. A command that crashes or hangs
GDB loses that thread's stack only: GDB is killed, started again, and the dump
goes on with the next thread.

Per thread, /proc adds what the kernel knows: its state, the syscall it waits
in with its arguments (a futex wait's first argument is the futex word) and
its kernel stack. The guest agent sends those as `KSTALL thread` lines; for a
live process on this machine harness/analysis/threads.py reads them.
"""
from __future__ import annotations

import json
import os
import re
import signal
from pathlib import Path
from typing import Callable

import pexpect

from harness.analysis.threads import Dump, ProcThread, futex_words
from harness.base import paths, procs
from harness.debug.gdb import DebugError, end_gdb, gdb_binary, spawn_gdb

SCRIPT = paths.REPO / "gdbscripts" / "kstall_threads.py"
PROMPT = "(kstall-gdb) "


class DumpError(RuntimeError):
    pass


# called just before each command is sent, with the command and the GDB child
# (tests use it to make GDB fail on one thread: a GDB killed after the send
# could already have answered)
CommandHook = Callable[[str, pexpect.spawn], None]


class _Gdb:
    def __init__(self, exe: Path, core: Path, log, timeout: float, gdb: str) -> None:
        try:
            self.child = spawn_gdb(["-iex", f"set prompt {PROMPT}", "-ex", f"source {SCRIPT}",
                                    str(exe), str(core)], log, timeout, gdb)
        except DebugError as e:
            raise DumpError(str(e)) from None
        self.timeout = timeout
        try:
            self._prompt()
        except DumpError:
            self.close()  # a GDB that never answered is not left behind
            raise

    def _prompt(self) -> str:
        try:
            self.child.expect_exact(PROMPT, timeout=self.timeout)
        except pexpect.TIMEOUT:
            raise DumpError(f"gdb did not answer within {self.timeout:g}s") from None
        except pexpect.EOF:
            raise DumpError(f"gdb died (exit status {self._status()})") from None
        return self.child.before

    def _status(self) -> str:
        end_gdb(self.child)
        st = self.child.exitstatus if self.child.exitstatus is not None else self.child.signalstatus
        return f"{'signal ' if self.child.exitstatus is None else ''}{st}"

    def json(self, command: str, hook: CommandHook | None) -> dict:
        if hook:
            hook(command, self.child)
        self.child.sendline(command)
        text = self._prompt()
        m = re.search(r"^KSTALL-JSON (.*)$", text, re.M)
        if not m:
            raise DumpError(f"`{command}` gave no result: {text.strip()[-200:]}")
        return json.loads(m.group(1))

    def close(self) -> None:
        end_gdb(self.child)


def dump_core(core: Path, exe: Path, log_path: Path, proc: dict[int, ProcThread] | None = None,
              timeout: float = 10.0, hook: CommandHook | None = None, gdb_name: str = "gdb") -> Dump:
    """Every thread of core, each with its own bounded GDB command; then the
    futex words the threads wait on (from proc or the core), read as locks.
    gdb_name: the debugger for the core's architecture."""
    d = Dump(str(exe), str(core))
    with open(log_path, "a") as log:
        gdb: _Gdb | None = None

        def session() -> _Gdb:
            nonlocal gdb
            if gdb is None:
                d.gdb_starts += 1
                gdb = _Gdb(exe, core, log, timeout, gdb_name)
            return gdb

        def ask(command: str) -> dict | None:
            nonlocal gdb
            try:
                return session().json(command, hook)
            except (DumpError, pexpect.ExceptionPexpect, OSError, ValueError) as e:
                d.errors.append(f"{command}: {e}")
                if gdb is not None:
                    gdb.close()
                gdb = None
                return None
        try:
            listing = ask("kstall-threads")
            if listing is None:
                raise DumpError(f"gdb could not list the threads of {core}: {d.errors[-1]}")
            for t in listing["threads"]:
                got = ask(f"kstall-thread {t['num']}")
                d.threads.append(got if got and "frames" in got else
                                 {**t, "frames": [], "error": d.errors[-1] if d.errors else "no frames"})
            d.arch = next((t["arch"] for t in d.threads if t.get("arch")), d.arch)  # what its registers mean
            for addr in sorted(set(futex_words(d, proc or {}).values())):
                w = ask(f"kstall-lock-word {addr:#x}")
                if w and "error" not in w:
                    d.lock_words[addr] = w
        finally:
            if gdb is not None:
                gdb.close()
    return d


def capture_live(pid: int, core: Path, timeout: float = 30.0) -> None:
    """A core of a running process through gdb's gcore: attach, dump, detach.
    The process is left as it was found: running (a deadlocked one stays
    deadlocked), or stopped. A gdb killed mid-attach (its time ran out) leaves
    a running one stopped, and gdb's detach resumes a stopped one: either is
    put back."""
    was = (procs.stat_fields(f"/proc/{pid}/stat") or ["?"])[0]
    core.unlink(missing_ok=True)  # a core left from before is not this one
    try:
        p = procs.run_bounded([gdb_binary(), "-nx", "-q", "-batch", "-p", str(pid), "-ex", f"gcore {core}"], timeout)
    except Exception as e:  # noqa: BLE001 - TimeoutExpired and OSError alike: say what failed
        raise DumpError(f"gcore of process {pid} failed: {e}") from None
    finally:  # gdb's detach resumes a process that was stopped, and one it was killed on stays stopped
        now = (procs.stat_fields(f"/proc/{pid}/stat") or ["?"])[0]
        if now != "?" and (was == "T") != (now == "T"):
            os.kill(pid, signal.SIGSTOP if was == "T" else signal.SIGCONT)
    if not core.exists():
        raise DumpError(f"gcore of process {pid} wrote no core: {(p.stderr or p.stdout).strip()[-300:]}")
