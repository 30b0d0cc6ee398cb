# SPDX-License-Identifier: GPL-2.0
"""Kernel stack walking through frame records (the "frame-records" unwinder
of harness/analysis/unwind.py), for kernels built with frame pointers, as
Debian builds arm64's: every function that calls another pushes a record
{caller's frame pointer, return address} and points the frame-pointer
register at it, so the chain from that register names every caller exactly.

Where the record sits beside the frame pointer is the table's `frame_record`
(arm64's at it, riscv's just below it). A return address may carry pointer-authentication bits above the virtual
address; they are stripped to the kernel's own top bits. An interrupt runs
on the IRQ stack and its first record points back to the interrupted task's
stack: the dumper reads each stack the chain enters (regions()), and the
walk follows the chain across them.
"""
from __future__ import annotations

from typing import Callable

from harness.analysis.kallsyms import Kallsyms
from harness.analysis.stackwalk import Frame, function_at, read_region
from harness.base.arch import Arch

CODE_BEFORE = 0  # a record's return address is the caller's own: no call to decode
# a kernel text address has every bit above the lowest 48 set (arm64's image
# sits at the bottom of the upper half whatever VA_BITS is): PAC bits are cleared ones there
TEXT_VA_BITS = 48
_TOP = ~((1 << TEXT_VA_BITS) - 1) & (2**64 - 1)
MAX_REGIONS = 4  # the IRQ stack, the task stack, an overflow or SDEI stack at most


def strip(addr: int) -> int:
    """A return address without pointer-authentication bits: a kernel one
    (bit 55 set) gets its top bits back."""
    return addr | _TOP if addr >> 55 & 1 else addr


def _word(regions: list[tuple[int, bytes]], at: int) -> int | None:
    for base, data in regions:
        if base <= at and at + 8 <= base + len(data):
            off = at - base
            return int.from_bytes(data[off:off + 8], "little")
    return None


def _interrupted(regions: list[tuple[int, bytes]], fp: int, a: Arch) -> tuple[int, int, int] | None:
    """(pc, lr, fp) of the context an exception interrupted, when the record
    at fp is the marker in its pt_regs (arches.toml `pt_regs_record`)."""
    m = a.table.get("pt_regs_record")
    if not m or _word(regions, fp) != 0 or _word(regions, fp + 8) != 0 or _word(regions, fp + 16) != m["type"]:
        return None
    base = fp - m["record"]
    got = [_word(regions, base + m[k]) for k in ("pc", "lr", "fp")]
    return None if None in got else (got[0] or 0, got[1] or 0, got[2] or 0)


def _record(a: Arch) -> tuple[int, int]:
    """Where a record's saved frame pointer and return address are, from the frame pointer."""
    r = a.table.get("frame_record", {})
    return r.get("fp", 0), r.get("ret", 8)


def _next(regions: list[tuple[int, bytes]], fp: int, a: Arch) -> int:
    """The frame pointer the record at fp links to, through an exception's registers."""
    hit = _interrupted(regions, fp, a)
    return hit[2] if hit else _word(regions, fp + _record(a)[0]) or 0


def _leaf(regions: list[tuple[int, bytes]], fp: int, a: Arch) -> int | None:
    """The caller's frame pointer when the pc's function is a leaf that saved
    only its frame pointer (riscv: at fp - 8, where a record keeps its return
    address): that word then points into the stack, not at code."""
    at = a.table.get("frame_record", {}).get("leaf_fp")
    if at is None:
        return None
    word = _word(regions, fp + at)
    return word if word is not None and fp < word <= fp + 0x4000 and word % 8 == 0 else None


def regions(read: Callable[[int, int], bytes | None], regs: dict[str, int], a: Arch, max_bytes: int,
            syms: Kallsyms | None) -> list[tuple[int, bytes]]:
    """The stack from sp, and every further stack the frame-record chain enters."""
    sp = regs[a.sp]
    data, _ = read_region(read, sp, max_bytes)
    out = [(sp, data)]
    fp, seen = regs.get(a.fp, 0), set[int]()
    low, high = min(_record(a)), max(_record(a))
    while fp and fp % 8 == 0 and fp not in seen and len(seen) < 256:
        seen.add(fp)
        if _word(out, fp + high) is None or _word(out, fp + low) is None:
            if len(out) >= MAX_REGIONS:
                break
            more, _ = read_region(read, fp + low, max_bytes)
            if len(more) < 16:
                break
            out.append((fp + low, more))
        fp = _next(out, fp, a)
    return out


def candidates(regions: list[tuple[int, bytes]], syms: Kallsyms) -> list[int]:
    """No code is read: a frame record's return address needs no checking."""
    return []


def frames(regs: dict[str, int], a: Arch, regions: list[tuple[int, bytes]], code: dict[int, bytes],
           syms: Kallsyms, max_frames: int = 48) -> list[Frame]:
    """Frames from the pc outwards along the frame-record chain. The link
    register comes second, unreliable, when its function is not the first
    record's: the pc may be in a leaf (or before its own record is pushed),
    whose caller only the link register names."""
    pc = regs[a.pc]
    out = [Frame(pc, syms.fmt(pc), function_at(syms, pc), True, 0)]
    fp, seen = regs.get(a.fp, 0), set[int]()
    at_fp, at_ret = _record(a)
    first = True
    leaf = _leaf(regions, fp, a) if fp else None
    if leaf is not None:  # the leaf's caller is in the link register, its frame at the saved fp
        lr = strip(regs.get(a.table["lr"], 0))
        if function_at(syms, lr):
            out.append(Frame(lr, syms.fmt(lr), function_at(syms, lr), True, 0))
        fp, first = leaf, False
    while fp and fp % 8 == 0 and fp not in seen and len(out) < max_frames:
        seen.add(fp)
        hit = _interrupted(regions, fp, a)
        if hit:  # the interrupted context: exactly where it was, then its link register
            pc_i, lr_i, fp = hit
            if function_at(syms, pc_i):
                out.append(Frame(pc_i, syms.fmt(pc_i), function_at(syms, pc_i), True, 0, interrupted=True))
            if function_at(syms, strip(lr_i)) not in ("", function_at(syms, pc_i)):
                out.append(Frame(strip(lr_i), syms.fmt(strip(lr_i)), function_at(syms, strip(lr_i)), False, 0))
            continue
        nxt, ret = _word(regions, fp + at_fp), _word(regions, fp + at_ret)
        if nxt is None or ret is None:
            break
        ret = strip(ret)
        fn = function_at(syms, ret)
        if first:
            lr = strip(regs.get(a.table["lr"], 0))
            lfn = function_at(syms, lr)
            if lfn and lr != ret and lfn not in (fn, out[0].function):
                out.append(Frame(lr, syms.fmt(lr), lfn, False, 0))
            first = False
        if not fn:
            break
        out.append(Frame(ret, syms.fmt(ret), fn, True, fp + at_ret))
        fp = nxt
    return out
