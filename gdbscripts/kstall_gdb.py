# SPDX-License-Identifier: GPL-2.0
"""GDB commands that dump every vCPU of a QEMU guest (load with `source`).

    kstall-symbols KALLSYMS          text symbols captured from the guest
    kstall-layout LAYOUT.json        where the kernel keeps who waits for whom
                                     (harness/analysis/kernel_waits.py)
    kstall-bt [all]                  the selected vCPU's stack (every vCPU's) as
                                     kstall walks it, for a developer's gdb
                                     without DWARF (kstall attach)
    kstall-sample OUT.json [BYTES]   registers, stack bytes, code bytes around
                                     return addresses and a symbolized stack
                                     for every vCPU, and the kernel's records
                                     of who waits for whom, as JSON

Each vCPU is a GDB thread of QEMU's gdbstub ("CPU#n [state]"). Stacks are
walked by the guest architecture's unwinder (harness/analysis/unwind.py) from the raw bytes, which are kept in the
dump so the host can re-walk them; when GDB has a vmlinux with DWARF loaded
(`file vmlinux`), GDB's own unwinder adds the real frames, inlined ones
included (csd_lock_wait inside smp_call_function_many_cond).
"""
from __future__ import annotations

import json
import os
import re
import sys
import time

import gdb  # type: ignore[import-not-found]

# the stack walker and symbolizer are the host's too (harness/analysis/)
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from harness.analysis import kernel_waits, unwind  # noqa: E402
from harness.analysis.kallsyms import Kallsyms  # noqa: E402
from harness.base import arch  # noqa: E402

_state: dict = {"syms": None, "layout": {}}


def _u64(v: "gdb.Value") -> int:
    return int(v) & (2**64 - 1)


def _read(inf: "gdb.Inferior", addr: int, n: int) -> bytes | None:
    try:
        return bytes(inf.read_memory(addr, n))
    except (gdb.MemoryError, gdb.error):
        return None


def _thread_details(t: "gdb.InferiorThread") -> str:
    details = getattr(t, "details", None)
    if details:
        return details
    info = gdb.execute("info threads", to_string=True)
    m = re.search(rf"^\*?\s*{t.num}\s+Thread [^(]*\(([^)]*)\)", info, re.M)
    return m.group(1) if m else ""


def _dwarf_frames(limit: int = 64) -> list[dict]:
    frames = []
    try:
        f = gdb.newest_frame()
    except gdb.error:
        return frames
    while f is not None and len(frames) < limit:
        name = f.name() or ""
        sal = f.find_sal()
        where = f"{sal.symtab.filename}:{sal.line}" if sal and sal.symtab else ""
        inlined = f.type() == gdb.INLINE_FRAME
        syms = _state["syms"]
        text = name or f"{f.pc():#x}"
        if syms is not None and not inlined and syms.lookup(f.pc()):
            text = syms.fmt(f.pc())  # func+0x1c/0x80, as the kernel prints it
        frames.append({"addr": f"{f.pc():#x}", "text": text, "function": name,
                       "reliable": True, "slot": None, "inlined": inlined, "source": where})
        try:
            f = f.older()
        except gdb.error:
            break
    return frames


def _has_dwarf() -> bool:
    return any(o.filename and o.lookup_global_symbol("start_kernel") is not None for o in gdb.objfiles())


def dump_cpu(t: "gdb.InferiorThread", max_bytes: int, dwarf: bool = True) -> dict:
    t.switch()
    frame = gdb.selected_frame()
    inf = gdb.selected_inferior()
    a = arch.by_gdb(inf.architecture().name())
    regs = {r: _u64(frame.read_register(r)) for r in a.registers}
    details = _thread_details(t)
    m = re.search(r"CPU#(\d+)(?:\s*\[(\w+)\s*\])?", details)
    cpu = {"cpu": int(m.group(1)) if m else t.num - 1, "thread": t.num,
           "state": (m.group(2) if m and m.group(2) else "unknown"), "arch": a.name,
           "regs": {k: f"{v:#x}" for k, v in regs.items()}}
    cpu |= unwind.walk_cpu(lambda at, n: _read(inf, at, n), regs, a, _state["syms"], max_bytes)
    if dwarf and _has_dwarf() and not a.in_user_mode(regs):
        cpu["frames"] = _dwarf_frames()
        cpu["unwinder"] = "dwarf"
    return cpu


class SymbolsCommand(gdb.Command):
    """kstall-symbols KALLSYMS: load text symbols for kstall-sample."""

    def __init__(self) -> None:
        super().__init__("kstall-symbols", gdb.COMMAND_USER)

    def invoke(self, arg: str, from_tty: bool) -> None:
        _state["syms"] = Kallsyms.load(arg.strip())
        gdb.write(f"kstall: {len(_state['syms'])} text symbols\n")


class LayoutCommand(gdb.Command):
    """kstall-layout LAYOUT.json: where kstall-sample reads who waits for whom."""

    def __init__(self) -> None:
        super().__init__("kstall-layout", gdb.COMMAND_USER)

    def invoke(self, arg: str, from_tty: bool) -> None:
        with open(arg.strip()) as f:
            _state["layout"] = json.load(f)
        gdb.write(f"kstall: kernel layout: {', '.join(k for k in _state['layout'] if k != 'missing') or 'none'}\n")


class SampleCommand(gdb.Command):
    """kstall-sample OUT.json [STACK_BYTES]: dump every vCPU as JSON."""

    def __init__(self) -> None:
        super().__init__("kstall-sample", gdb.COMMAND_USER)

    def invoke(self, arg: str, from_tty: bool) -> None:
        argv = gdb.string_to_argv(arg)
        out = argv[0]
        max_bytes = int(argv[1]) if len(argv) > 1 else 16384
        t0 = time.monotonic()
        selected = gdb.selected_thread()
        threads = sorted(gdb.selected_inferior().threads(), key=lambda t: t.num)
        cpus = [dump_cpu(t, max_bytes) for t in threads]
        if selected is not None:
            selected.switch()
        inf = gdb.selected_inferior()
        try:
            waits = kernel_waits.read(lambda a, n: _read(inf, a, n), _state["layout"], len(cpus))
        except Exception as e:  # noqa: BLE001 - a fault in this extra must not lose the dump
            waits = {"error": f"{type(e).__name__}: {e}"}
        doc = {"host_time": time.time(), "dump_seconds": round(time.monotonic() - t0, 3), "cpus": cpus,
               "waits": waits}
        tmp = out + ".tmp"
        with open(tmp, "w") as f:
            json.dump(doc, f)
        os.replace(tmp, out)
        gdb.write(f"kstall: sampled {len(cpus)} cpus in {doc['dump_seconds']}s\n")


class BacktraceCommand(gdb.Command):
    """kstall-bt [all]: the selected vCPU's stack, or every vCPU's, as kstall walks it."""

    def __init__(self) -> None:
        super().__init__("kstall-bt", gdb.COMMAND_STACK)

    def invoke(self, arg: str, from_tty: bool) -> None:
        selected = gdb.selected_thread()
        threads = sorted(gdb.selected_inferior().threads(), key=lambda t: t.num) if arg.strip() == "all" \
            else [selected]
        for t in threads:
            cpu = dump_cpu(t, 16384, dwarf=False)  # kstall's walk: it crosses the IRQ entry DWARF stops at
            gdb.write(f"CPU {cpu['cpu']} [{cpu['state']}] (thread {t.num}, {cpu['unwinder']}):\n")
            for i, f in enumerate(cpu["frames"]):
                gdb.write(f"  #{i:<2} {f['text']}{'' if f.get('reliable', True) else ' ?'}\n")
        if selected is not None:
            selected.switch()


SymbolsCommand()
LayoutCommand()
SampleCommand()
BacktraceCommand()
