# SPDX-License-Identifier: GPL-2.0
"""GDB commands that dump a user-space process's threads, one at a time (load
with `source`, with the program and its core loaded).

    kstall-threads            the thread list: GDB number, LWP, name
    kstall-thread N           thread N's frames (function, pc, signal frames)
                              and its syscall registers (the number's and the arguments')
    kstall-lock-word ADDR     the three ints at a futex word: a pthread_mutex_t
                              starts with __lock, __count, __owner

Each prints one line: "KSTALL-JSON " + JSON. The host sends one command per
thread, each with its own time limit, because a command that crashes or hangs
GDB (as `thread apply all bt` did in the case this was built for) must lose
only that thread.
"""
from __future__ import annotations

import json
import os
import sys

import gdb  # type: ignore[import-not-found]
import gdb.unwinder  # type: ignore[import-not-found]

# the architecture table is the host's (harness/base/arches.toml)
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from harness.base import arch  # noqa: E402

MAX_FRAMES = 64


def _arch() -> arch.Arch:
    return arch.by_gdb(gdb.selected_inferior().architecture().name())


def _emit(doc: dict) -> None:
    gdb.write("KSTALL-JSON " + json.dumps(doc) + "\n")


def _reg(frame: "gdb.Frame", name: str) -> int | None:
    try:
        return int(frame.read_register(name)) & (2**64 - 1)
    except (gdb.error, ValueError):
        return None


def _signal_of(frame: "gdb.Frame") -> int | None:
    """si_signo of the signal a SIGTRAMP frame delivered: at its stack
    pointer is the rest of the kernel's rt_sigframe (ucontext, then siginfo)."""
    a = _arch()
    sp = _reg(frame, a.sp)
    if sp is None:
        return None
    try:
        at = sp + a.syscall["sigframe_siginfo"]
        signo = int.from_bytes(bytes(gdb.selected_inferior().read_memory(at, 4)), a.byteorder)
    except (gdb.error, gdb.MemoryError):
        return None
    return signo if 0 < signo < 65 else None


def _is_sigreturn(a: arch.Arch, pc: int) -> bool:
    """pc is at the architecture's rt_sigreturn call that gdb unwinds no further (arches.toml `sigreturn`)."""
    insn = bytes.fromhex(a.table.get("sigreturn", {}).get("insn", ""))
    try:
        return bool(insn) and bytes(gdb.selected_inferior().read_memory(pc, len(insn))) == insn
    except (gdb.error, gdb.MemoryError):
        return False


class SigreturnUnwinder(gdb.unwinder.Unwinder):
    """The caller of a signal handler's return into rt_sigreturn, read from
    the kernel's rt_sigframe at the frame's stack pointer: what the signal
    interrupted (gdb's own unwinder follows the vdso's CFI to nowhere on s390x)."""

    def __init__(self) -> None:
        super().__init__("kstall-sigreturn")

    def __call__(self, pending: "gdb.PendingFrame"):  # noqa: ANN204 (gdb.UnwindInfo | None)
        try:  # every frame of every program comes here: one of an architecture kstall does not know is not its
            a = arch.by_gdb(pending.architecture().name())
        except KeyError:
            return None
        spec = a.table.get("sigreturn")
        if spec is None:
            return None
        pc_reg, sp_reg = pending.read_register(a.pc), pending.read_register(a.sp)
        pc, sp = int(pc_reg) & (2**64 - 1), int(sp_reg) & (2**64 - 1)
        if not _is_sigreturn(a, pc):
            return None
        try:
            mem = gdb.selected_inferior().read_memory
            word = lambda at: int.from_bytes(bytes(mem(sp + at, 8)), a.byteorder)  # noqa: E731
            regs = {r: word(spec["regs_at"] + 8 * i) for i, r in enumerate(spec["regs"])}
            regs |= {r: word(at) for r, at in spec.get("words", {}).items()}  # the pc among them
        except (gdb.error, gdb.MemoryError):
            return None
        info = pending.create_unwind_info(_FrameId(sp_reg + spec.get("cfa", 0), pc_reg))
        for r, v in regs.items():
            info.add_saved_register(r, gdb.Value(v).cast(pending.read_register(r).type))
        return info


class _FrameId:
    """A frame's identity as gdb takes it: its stack and code addresses, as gdb.Values."""

    def __init__(self, sp: "gdb.Value", pc: "gdb.Value") -> None:
        self.sp, self.pc = sp, pc


def _frames() -> list[dict]:
    out = []
    f = gdb.newest_frame()
    a = _arch()
    while f is not None and len(out) < MAX_FRAMES:
        d = {"func": f.name(), "pc": f.pc()}
        if f.type() == gdb.SIGTRAMP_FRAME or _is_sigreturn(a, f.pc()):
            d["sigtramp"] = True
            d["signal"] = _signal_of(f)
        sal = f.find_sal()
        if sal.symtab is not None and sal.line:
            d["src"] = f"{sal.symtab.filename}:{sal.line}"
        out.append(d)
        try:
            f = f.older()
        except gdb.error as e:
            out.append({"func": None, "pc": 0, "error": str(e)})
            break
    return out


class Threads(gdb.Command):
    def __init__(self) -> None:
        super().__init__("kstall-threads", gdb.COMMAND_USER)

    def invoke(self, arg: str, from_tty: bool) -> None:
        inf = gdb.selected_inferior()
        threads = [{"num": t.num, "lwp": t.ptid[1], "name": t.name} for t in inf.threads()]
        _emit({"pid": inf.pid, "threads": sorted(threads, key=lambda t: t["num"])})


class Thread(gdb.Command):
    def __init__(self) -> None:
        super().__init__("kstall-thread", gdb.COMMAND_USER)

    def invoke(self, arg: str, from_tty: bool) -> None:
        num = int(arg)
        t = next((t for t in gdb.selected_inferior().threads() if t.num == num), None)
        if t is None:
            _emit({"num": num, "error": "no such thread"})
            return
        t.switch()
        top = gdb.newest_frame()
        a = _arch()
        names = (a.syscall["nr"], *a.syscall["args"][:2], a.pc, a.sp)
        _emit({"num": num, "lwp": t.ptid[1], "name": t.name, "arch": a.name,
               "regs": {r: _reg(top, r) for r in names},
               "frames": _frames()})


class LockWord(gdb.Command):
    def __init__(self) -> None:
        super().__init__("kstall-lock-word", gdb.COMMAND_USER)

    def invoke(self, arg: str, from_tty: bool) -> None:
        addr = int(arg, 0)
        try:
            raw = bytes(gdb.selected_inferior().read_memory(addr, 12))
        except (gdb.error, gdb.MemoryError) as e:
            _emit({"addr": addr, "error": str(e)})
            return
        lock, count, owner = (int.from_bytes(raw[i:i + 4], _arch().byteorder, signed=True) for i in (0, 4, 8))
        _emit({"addr": addr, "lock": lock, "count": count, "owner": owner})


Threads()
Thread()
LockWord()
gdb.unwinder.register_unwinder(None, SigreturnUnwinder(), replace=True)
