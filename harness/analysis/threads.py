# SPDX-License-Identifier: GPL-2.0
"""A user-space process's threads as kstall sees them: what the kernel says of
each (/proc/PID/task/TID, or the guest agent's `KSTALL thread` lines: state,
the syscall it waits in with its arguments, its kernel stack) and what GDB
read from its core (harness/debug/process.py): frames, syscall registers,
the lock words the threads wait on.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from harness.base import arch, procs
from harness.base.untrusted import hexnum, num



@dataclass
class ProcThread:
    """What /proc/PID/task/TID says of a thread."""
    tid: int
    comm: str = ""
    state: str = ""
    syscall: int | None = None  # None: running, or not readable
    args: tuple[int, ...] = ()
    kstack: list[str] = field(default_factory=list)
    arch: str = arch.DEFAULT  # the guest's: what its system call numbers mean

    @property
    def futex(self) -> int | None:
        return self.args[0] if self.syscall == arch.get(self.arch).syscall["futex"] and self.args else None

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
    arch: str = arch.DEFAULT

    def to_json(self) -> dict:
        return {"exe": self.exe, "core": self.core, "threads": self.threads, "errors": self.errors,
                "lock_words": {f"{a:#x}": w for a, w in self.lock_words.items()}, "gdb_starts": self.gdb_starts,
                "arch": self.arch}

    @classmethod
    def from_json(cls, doc: dict) -> "Dump":
        return cls(doc["exe"], doc["core"], doc["threads"], doc.get("errors", []),
                   {int(a, 16): w for a, w in doc.get("lock_words", {}).items()}, doc.get("gdb_starts", 0),
                   doc.get("arch") or arch.DEFAULT)


def futex_words(d: Dump, proc: dict[int, ProcThread]) -> dict[int, int]:
    """LWP -> the futex word it waits on: from /proc when there is one, else
    from the core (a thread in the futex syscall: its number and first argument)."""
    out = {}
    sc = arch.get(d.arch).syscall
    for t in d.threads:
        p = proc.get(t["lwp"])
        regs = t.get("regs") or {}
        word, nr = regs.get(sc["args"][0]), regs.get(sc["nr"])
        if p is not None and p.futex is not None:
            out[t["lwp"]] = p.futex
        elif nr is not None and nr & sc.get("nr_mask", -1) == sc["futex"] and word:
            out[t["lwp"]] = word
    return out
