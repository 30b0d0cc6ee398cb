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
live process on this machine they are read here.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pexpect

from harness import debug, paths, procs
from harness.debug import GDB
from harness.untrusted import hexnum, num

SCRIPT = paths.REPO / "gdbscripts" / "kstall_threads.py"
PROMPT = "(kstall-gdb) "
SYS_FUTEX = 202  # x86-64


class DumpError(RuntimeError):
    pass


@dataclass
class ProcThread:
    """What /proc/PID/task/TID says of a thread."""
    tid: int
    comm: str = ""
    state: str = ""
    syscall: int | None = None  # None: running, or not readable
    args: tuple[int, ...] = ()
    kstack: list[str] = field(default_factory=list)

    @property
    def futex(self) -> int | None:
        return self.args[0] if self.syscall == SYS_FUTEX and self.args else None

    def to_json(self) -> dict:
        return {"tid": self.tid, "comm": self.comm, "state": self.state, "syscall": self.syscall,
                "args": [f"{a:#x}" for a in self.args], "kstack": self.kstack}


def parse_syscall(text: str) -> tuple[int | None, tuple[int, ...]]:
    """/proc/.../syscall: 'NR arg0 .. arg5 sp pc', 'running' or '-1 sp pc'."""
    words = text.replace(",", " ").split()
    nr = num(words[0]) if words else None
    if nr is None or nr < 0:
        return None, ()
    args = tuple(hexnum(w) for w in words[1:7])
    return nr, (() if None in args else args)


def parse_kstack(text: str) -> list[str]:
    """/proc/.../stack lines '[<0>] futex_wait_queue+0x5f/0x90' (or a
    comma-joined list of the same) -> ['futex_wait_queue+0x5f/0x90', ...]"""
    out = []
    for part in re.split(r"[\n,]", text):
        part = re.sub(r"^\s*\[<[0-9a-fx]+>\]\s*", "", part).strip()
        if part:
            out.append(part)
    return out


def from_agent_line(line: str) -> ProcThread | None:
    """'KSTALL thread tid=N comm=C state=S syscall=202,0x4bf800,... kstack=a,b'"""
    if not line.startswith("KSTALL thread "):
        return None
    f = dict(re.findall(r"(\w{1,32})=(\S*)", line))  # bounded: guest text, no quadratic scans
    tid = num(f.get("tid"))
    if tid is None or tid < 0:
        return None
    nr, args = parse_syscall(f.get("syscall", ""))
    return ProcThread(tid, f.get("comm", ""), f.get("state", ""), nr, args,
                      parse_kstack(f.get("kstack", "")))


def read_proc(pid: int) -> dict[int, ProcThread]:
    """The threads of a live process on this machine (kernel stacks need root)."""
    out = {}
    for task in sorted(Path(f"/proc/{pid}/task").iterdir(), key=lambda p: int(p.name)):
        def read(name: str) -> str:
            try:
                return (task / name).read_text(errors="replace")
            except OSError:
                return ""
        state = (procs.stat_fields(task / "stat") or [""])[0]
        nr, args = parse_syscall(read("syscall"))
        out[int(task.name)] = ProcThread(int(task.name), read("comm").strip(), state, nr, args,
                                         parse_kstack(read("stack")))
    return out


@dataclass
class Dump:
    """GDB's view of every thread: frames (func, pc, sigtramp, signal, src)
    and the syscall registers of the innermost frame."""
    exe: str
    core: str
    threads: list[dict] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    lock_words: dict[int, dict] = field(default_factory=dict)
    gdb_starts: int = 0

    def to_json(self) -> dict:
        return {"exe": self.exe, "core": self.core, "threads": self.threads, "errors": self.errors,
                "lock_words": {f"{a:#x}": w for a, w in self.lock_words.items()}, "gdb_starts": self.gdb_starts}

    @classmethod
    def from_json(cls, doc: dict) -> "Dump":
        return cls(doc["exe"], doc["core"], doc["threads"], doc.get("errors", []),
                   {int(a, 16): w for a, w in doc.get("lock_words", {}).items()}, doc.get("gdb_starts", 0))


# called just before each command is sent, with the command and the GDB child
# (tests use it to make GDB fail on one thread: a GDB killed after the send
# could already have answered)
CommandHook = Callable[[str, pexpect.spawn], None]


class _Gdb:
    def __init__(self, exe: Path, core: Path, log, timeout: float) -> None:
        try:
            self.child = debug.spawn_gdb(["-iex", f"set prompt {PROMPT}", "-ex", f"source {SCRIPT}",
                                          str(exe), str(core)], log, timeout)
        except debug.DebugError as e:
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
        self.child.close(force=True)
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
        self.child.close(force=True)


def dump_core(core: Path, exe: Path, log_path: Path, proc: dict[int, ProcThread] | None = None,
              timeout: float = 10.0, hook: CommandHook | None = None) -> Dump:
    """Every thread of core, each with its own bounded GDB command; then the
    futex words the threads wait on (from proc or the core), read as locks."""
    d = Dump(str(exe), str(core))
    with open(log_path, "a") as log:
        gdb: _Gdb | None = None

        def session() -> _Gdb:
            nonlocal gdb
            if gdb is None:
                d.gdb_starts += 1
                gdb = _Gdb(exe, core, log, timeout)
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
            for addr in sorted(set(futex_words(d, proc or {}).values())):
                w = ask(f"kstall-lock-word {addr:#x}")
                if w and "error" not in w:
                    d.lock_words[addr] = w
        finally:
            if gdb is not None:
                gdb.close()
    return d


def futex_words(d: Dump, proc: dict[int, ProcThread]) -> dict[int, int]:
    """LWP -> the futex word it waits on: from /proc when there is one, else
    from the core (a thread in the futex syscall has orig_rax 202, rdi = word)."""
    out = {}
    for t in d.threads:
        p = proc.get(t["lwp"])
        regs = t.get("regs") or {}
        if p is not None and p.futex is not None:
            out[t["lwp"]] = p.futex
        elif regs.get("orig_rax") == SYS_FUTEX and regs.get("rdi"):
            out[t["lwp"]] = regs["rdi"]
    return out


def capture_live(pid: int, core: Path, timeout: float = 30.0) -> None:
    """A core of a running process through gdb's gcore: attach, dump, detach.
    The process goes on as it was (a deadlocked one stays deadlocked)."""
    try:
        p = procs.run_bounded([GDB, "-nx", "-q", "-batch", "-p", str(pid), "-ex", f"gcore {core}"], timeout)
    except Exception as e:  # noqa: BLE001 - TimeoutExpired and OSError alike: say what failed
        raise DumpError(f"gcore of process {pid} failed: {e}") from None
    if not core.exists():
        raise DumpError(f"gcore of process {pid} wrote no core: {(p.stderr or p.stdout).strip()[-300:]}")
