# SPDX-License-Identifier: GPL-2.0
"""Kernel stack walking along the ABI's back chain (the "back-chain" unwinder
of harness/analysis/unwind.py), for ppc64 and s390x: every frame's first word
(at the table's `back_chain.chain`) is its caller's stack pointer, and a
function saves the return address into its caller in the caller's frame (at
`back_chain.ret`). So from the stack pointer the chain names every caller,
with no code to decode; only the current function's own caller is uncertain
(a leaf has not saved its link register yet), and the link register names it.

An interrupt's frame holds the interrupted registers behind a marker word
(ppc64's "REGSHERE"); where the table gives it, the walk names the
interrupted pc. The chain runs on across the IRQ stack into the task's:
regions() reads each stack the chain enters.
"""
from __future__ import annotations

from typing import Callable, Literal

from harness.analysis.kallsyms import Kallsyms
from harness.analysis.stackwalk import Frame, function_at, read_region
from harness.base.arch import Arch

CODE_BEFORE = 0  # a saved return address needs no checking
MAX_REGIONS = 4  # an IRQ stack, the task's stack, an emergency stack
MAX_CHAIN = 256


def _word(regions: list[tuple[int, bytes]], at: int, order: Literal["little", "big"]) -> int | None:
    for base, data in regions:
        if base <= at and at + 8 <= base + len(data):
            off = at - base
            return int.from_bytes(data[off:off + 8], order)
    return None


def _layout(a: Arch) -> dict:
    return a.table["back_chain"]


def _interrupted(regions: list[tuple[int, bytes]], sp: int, a: Arch) -> tuple[int, int] | None:
    """(pc, link register) an interrupt saved in the frame at sp, when its marker is there."""
    bc = _layout(a)
    marker = bc.get("regs_marker")
    if marker is None:
        return None
    for at in bc["marker_at"]:
        if _word(regions, sp + at, a.byteorder) == marker:
            regs = sp + at + bc["regs_after_marker"]
            pc, lr = _word(regions, regs + bc["regs_pc"], a.byteorder), _word(regions, regs + bc["regs_lr"],
                                                                            a.byteorder)
            if pc is not None and lr is not None:
                return pc, lr
    return None


def _chain(regions: list[tuple[int, bytes]], sp: int, a: Arch) -> int:
    return _word(regions, sp + _layout(a)["chain"], a.byteorder) or 0


def _aligned(sp: int) -> bool:
    return sp != 0 and sp % 8 == 0


def regions(read: Callable[[int, int], bytes | None], regs: dict[str, int], a: Arch, max_bytes: int,
            syms: Kallsyms | None) -> list[tuple[int, bytes]]:
    """The stack from sp, and every further stack the back chain enters."""
    sp = regs[a.sp]
    data, _ = read_region(read, sp, max_bytes)
    out = [(sp, data)]
    bc, seen = _layout(a), set[int]()
    while _aligned(sp) and sp not in seen and len(seen) < MAX_CHAIN:
        seen.add(sp)
        if _word(out, sp + max(bc["chain"], bc["ret"]), a.byteorder) is None:
            if len(out) >= MAX_REGIONS:
                break
            more, _ = read_region(read, sp, max_bytes)
            if len(more) < 16:
                break
            out.append((sp, more))
        sp = _chain(out, sp, a)
    return out


def candidates(regions: list[tuple[int, bytes]], syms: Kallsyms) -> list[int]:
    """No code is read: a saved return address needs no checking."""
    return []


def frames(regs: dict[str, int], a: Arch, regions: list[tuple[int, bytes]], code: dict[int, bytes],
           syms: Kallsyms, max_frames: int = 48) -> list[Frame]:
    """Frames from the pc outwards along the back chain. The link register
    comes second, unreliable, when it names neither the pc's function nor the
    first saved return address's: the pc may be in a leaf, whose caller only
    the link register names."""
    pc = regs[a.pc]
    out = [Frame(pc, syms.fmt(pc), function_at(syms, pc), True, 0)]
    bc = _layout(a)
    sp, seen = _chain(regions, regs[a.sp], a), {regs[a.sp]}
    lr = regs.get(a.table["lr"], 0)
    first = True
    while _aligned(sp) and sp not in seen and len(out) < max_frames:
        seen.add(sp)
        ret = _word(regions, sp + bc["ret"], a.byteorder)
        if ret is None:
            break
        fn = function_at(syms, ret)
        if first:
            lfn = function_at(syms, lr)
            if lfn and lr != ret and lfn not in (fn, out[0].function):
                out.append(Frame(lr, syms.fmt(lr), lfn, False, 0))
            first = False
        # the chain holds past code kallsyms does not name (a BPF program's JIT image): kept as an address
        out.append(Frame(ret, syms.fmt(ret) if fn else f"{ret:#x}", fn, True, sp + bc["ret"]))
        hit = _interrupted(regions, sp, a)
        if hit:  # the frame an interrupt built: where it interrupted, then that code's link register
            pc_i, lr_i = hit
            if function_at(syms, pc_i):
                out.append(Frame(pc_i, syms.fmt(pc_i), function_at(syms, pc_i), True, 0, interrupted=True))
            if function_at(syms, lr_i) not in ("", function_at(syms, pc_i)):
                out.append(Frame(lr_i, syms.fmt(lr_i), function_at(syms, lr_i), False, 0))
        sp = _chain(regions, sp, a)
    while len(out) > 1 and not out[-1].function:  # the chain's end: the words above the first frame
        out.pop()
    return out
