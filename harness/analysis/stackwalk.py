# SPDX-License-Identifier: GPL-2.0
"""Heuristic x86-64 kernel stack walking (the "call-sites" unwinder of
harness/analysis/unwind.py) for kernels without frame pointers.

Distro kernels unwind with ORC and carry no frame pointers, and kstall has no
ORC tables on the host, so it reads the stack the way the kernel's own
"? func" lines do: every stack word that points into kernel text *and* sits
right after a call instruction is a return address. A frame is marked
reliable when its call instruction targets a function seen since the last
reliable frame (a direct call into the frame above); the rest are kept,
marked unreliable, because indirect calls (hrtimer callbacks, pmu->stop)
cannot be checked but are exactly the frames that matter here.

Input is raw data recorded by gdbscripts/kstall_gdb.py: the registers, stack
bytes (one or more regions: the IRQ stack, then the interrupted stack) and the
seven code bytes before every candidate address.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from harness.analysis.kallsyms import Kallsyms
from harness.base.arch import KERNEL_HALF, Arch

PAGE = 4096

CODE_BEFORE = 7  # longest call form checked: REX ff 9x disp32
_INDIRECT_TARGET_PREFIXES = ("__x86_indirect_thunk_", "__x86_indirect_call_thunk_",
                             "__x86_indirect_its_thunk_", "__SCT__", "__static_call")


@dataclass
class Frame:
    addr: int
    text: str          # "func+0x1c/0x80"
    function: str      # "func" ("" when unknown)
    reliable: bool
    slot: int          # stack address the return address was read from (0 for the pc)
    inlined: bool = False
    interrupted: bool = False  # the pc an interrupt/exception frame will return to

    def to_json(self) -> dict:
        return {"addr": f"{self.addr:#x}", "text": self.text, "function": self.function,
                "reliable": self.reliable, "slot": f"{self.slot:#x}" if self.slot else None,
                "inlined": self.inlined, "interrupted": self.interrupted}


def decode_call(code: bytes, ret: int) -> tuple[str, int | None] | None:
    """The call instruction that ends right before ret, from the 7 bytes
    before it: ("direct", target), ("indirect", None) or None."""
    if len(code) < CODE_BEFORE:
        return None
    c = code[-CODE_BEFORE:]
    # e8 rel32
    if c[2] == 0xE8:
        return "direct", (ret + int.from_bytes(c[3:7], "little", signed=True)) & (2**64 - 1)

    def ff2(at: int) -> int | None:
        """ModRM of an ff /2 (call near indirect) starting at c[at], else None."""
        if c[at] != 0xFF:
            return None
        modrm = c[at + 1]
        return modrm if (modrm >> 3) & 7 == 2 else None

    rex = lambda at: at >= 0 and 0x40 <= c[at] <= 0x4F  # noqa: E731
    for length in range(2, CODE_BEFORE + 1):
        at = CODE_BEFORE - length
        for prefixed in (False, True):
            start = at + 1 if prefixed else at
            if prefixed and not rex(at):
                continue
            if start + 1 >= CODE_BEFORE:
                continue
            modrm = ff2(start)
            if modrm is None:
                continue
            mod, rm = modrm >> 6, modrm & 7
            size = 2  # ff modrm
            if mod == 0 and rm == 5:
                size += 4  # rip-relative disp32
            elif mod != 3 and rm == 4:
                size += 1  # SIB
                if start + 2 >= CODE_BEFORE:
                    continue
                if mod == 0 and (c[start + 2] & 7) == 5:
                    size += 4
            size += {0: 0, 1: 1, 2: 4, 3: 0}[mod]
            if start + size == CODE_BEFORE:
                return "indirect", None
    return None


def function_at(syms: Kallsyms, addr: int) -> str:
    s = syms.lookup(addr)
    if s is None:
        return ""
    for pfx in ("__pfx_", "__cfi_"):  # call-depth thunks land in the padding
        if s.name.startswith(pfx):
            return s.name[len(pfx):]
    return s.name


KERNEL_CS = 0x10


def _iret_frame(data: bytes, off: int) -> bool:
    """Whether the words at off are a hardware interrupt frame from kernel
    mode: RIP, CS (kernel code segment), RFLAGS (bit 1 always set)."""
    if off + 24 > len(data):
        return False
    cs = int.from_bytes(data[off + 8:off + 16], "little")
    flags = int.from_bytes(data[off + 16:off + 24], "little")
    return cs == KERNEL_CS and flags & 0x2 and flags < (1 << 22)


def walk(pc: int, regions: list[tuple[int, bytes]], code: dict[int, bytes], syms: Kallsyms,
         max_frames: int = 48) -> list[Frame]:
    """Frames from pc outwards. regions: (base address, bytes) in walk order;
    code: return address -> the CODE_BEFORE bytes before it."""
    top = function_at(syms, pc)
    frames = [Frame(pc, syms.fmt(pc), top, True, 0)]
    since_reliable = {top} if top else set()
    for base, data in regions:
        for off in range(0, len(data) - 7, 8):
            word = int.from_bytes(data[off:off + 8], "little")
            fn = function_at(syms, word)
            if not fn:
                continue
            if _iret_frame(data, off):
                # the interrupted context: exactly where that code was running
                frames.append(Frame(word, syms.fmt(word), fn, True, base + off, interrupted=True))
                since_reliable = {fn}
                continue
            call = decode_call(code.get(word, b""), word)
            if call is None:
                continue
            kind, target = call
            tfn = function_at(syms, target) if target is not None else ""
            if tfn.startswith(_INDIRECT_TARGET_PREFIXES):
                kind, tfn = "indirect", ""
            reliable = kind == "direct" and tfn in since_reliable
            frames.append(Frame(word, syms.fmt(word), fn, reliable, base + off))
            if reliable:
                since_reliable = {fn}
            else:
                since_reliable.add(fn)
            if len(frames) >= max_frames:
                return frames
    return frames


def read_region(read: Callable[[int, int], bytes | None], start: int, max_bytes: int) -> tuple[bytes, bool]:
    """Bytes from start up to max_bytes or the first unreadable page (the
    guard page above a vmapped stack), a page at a time through read(addr, n)
    (None when unreadable); and whether that guard was hit."""
    out = bytearray()
    addr = start
    while len(out) < max_bytes:
        end = min((addr & ~(PAGE - 1)) + PAGE, start + max_bytes)
        chunk = read(addr, end - addr)
        if not chunk or len(chunk) < end - addr:
            return bytes(out + (chunk or b"")), True
        out += chunk
        addr = end
    return bytes(out), False


def stack_regions(read: Callable[[int, int], bytes | None], sp: int, max_bytes: int,
                  syms: Kallsyms | None) -> list[tuple[int, bytes]]:
    """The stack from sp, and when sp is on an IRQ stack, the interrupted
    stack too: x86-64 call_on_irqstack() leaves the interrupted stack pointer
    as the IRQ stack's topmost word, followed once."""
    data, hit_top = read_region(read, sp, max_bytes)
    regions = [(sp, data)]
    if hit_top and len(data) >= 8:
        prev = int.from_bytes(data[-8:], "little")
        inside = sp <= prev < sp + len(data)
        if prev >= KERNEL_HALF and prev % 8 == 0 and not inside and not (syms and syms.is_text(prev)):
            more, _ = read_region(read, prev, max_bytes)
            if more:
                regions.append((prev, more))
    return regions


def candidates(regions: list[tuple[int, bytes]], syms: Kallsyms) -> list[int]:
    """Stack words that point into text: the addresses whose preceding code
    bytes the dumper has to read."""
    out: set[int] = set()
    for _, data in regions:
        for off in range(0, len(data) - 7, 8):
            word = int.from_bytes(data[off:off + 8], "little")
            if syms.is_text(word):
                out.add(word)
    return sorted(out)


# the walker interface (harness/analysis/unwind.py): registers by the table's names

def regions(read: Callable[[int, int], bytes | None], regs: dict[str, int], a: Arch, max_bytes: int,
            syms: Kallsyms | None) -> list[tuple[int, bytes]]:
    return stack_regions(read, regs[a.sp], max_bytes, syms)


def frames(regs: dict[str, int], a: Arch, regions: list[tuple[int, bytes]], code: dict[int, bytes],
           syms: Kallsyms, max_frames: int = 48) -> list[Frame]:
    return walk(regs[a.pc], regions, code, syms, max_frames)
