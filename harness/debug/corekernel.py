# SPDX-License-Identifier: GPL-2.0
"""A QEMU ELF core made readable by every kernel debugger (verify --vmcore).

QEMU's core (dump-guest-memory without paging) maps guest *physical*
memory, and has a VMCOREINFO note only when the guest's fw_cfg driver handed
its own to QEMU's vmcoreinfo device. crash and drgn then lack the kernel's
layout, and gdb, which reads a core by virtual address, reads no kernel
address at all. kstall adds what they need, leaving QEMU's bytes as they are:

  - the VMCOREINFO note the kernel keeps for kdump (its `vmcoreinfo_note`,
    read from the live guest before the dump), after QEMU's own notes;
  - one PT_LOAD per run of the kernel's own mappings (its page tables,
    walked in the core from VMCOREINFO's root: the architecture table's
    `pagetable` row), pointing at the same file bytes as the physical
    segment that holds them;
  - headers and notes in the architecture's byte order: QEMU 7.2 writes a
    ppc64le guest's as big-endian (it asks the hypervisor's interrupt
    endianness of a guest CPU), while its memory is little-endian, which
    gdb and crash would then read byte-swapped;
  - in each vCPU's register note (NT_PRSTATUS), the pid of the task that
    CPU runs, where QEMU writes the CPU's number plus one: kdump writes the
    pid, and drgn and crash unwind a running task from the note that bears
    its pid (read through kernel_waits' `running` layout, the same reads
    a live guest answers).

QEMU's stream is written HEADROOM bytes into the file (harness/debug/vmcore.py;
the gap is a hole, no disk), and the new ELF header, program headers and
notes go in front of it: crash reads a core's headers and notes only from
before its first memory byte, and its first program header must be the
notes'. User mappings are left out: a hang's story is the kernel's; so are
a page's many aliases (ALIASES), and mappings beyond the headroom's room.
"""
from __future__ import annotations

import bisect
import os
import struct
from dataclasses import dataclass
from pathlib import Path

from harness.analysis import kernel_waits
from harness.base.arch import Arch

PT_LOAD, PT_NOTE = 1, 4
_PHDR_FIELDS = "IIQQQQQQ"
_PHDR = struct.Struct("<" + _PHDR_FIELDS)  # (the size is the same in either order)
_NOTE_NAME = b"VMCOREINFO\0"
PAGE = 4096
_MAX_TABLES = 1 << 16  # a guest's kernel page tables: a few thousand at most
# a physical page mapped at more virtual addresses than this is kept at the
# first ones only: x86's espfix maps one page 65536 times, which would be more
# program headers than ELF counts, and tells a debugger nothing
ALIASES = 8
HEADROOM = 1 << 20  # room for about 18,000 program headers


class CoreError(RuntimeError):
    pass


@dataclass
class Segment:
    type: int
    flags: int
    offset: int
    vaddr: int
    paddr: int
    filesz: int
    memsz: int
    align: int

    def pack(self, order: str = "<") -> bytes:
        return struct.pack(order + _PHDR_FIELDS, self.type, self.flags, self.offset, self.vaddr, self.paddr,
                           self.filesz, self.memsz, self.align)


def order_of(a: Arch) -> str:
    """struct's byte-order prefix of an architecture's words."""
    return ">" if a.byteorder == "big" else "<"


def vmcoreinfo_note(text: bytes, order: str = "<") -> bytes:
    """An ELF note named VMCOREINFO holding text, as kdump writes one."""
    def pad(b: bytes) -> bytes:
        return b + bytes(-len(b) % 4)
    return struct.pack(order + "III", len(_NOTE_NAME), len(text), 0) + pad(_NOTE_NAME) + pad(text)


def note_text(raw: bytes, order: str = "<") -> bytes | None:
    """The VMCOREINFO text of the kernel's note as read from its memory."""
    if len(raw) < 24:
        return None
    namesz, descsz, _ = struct.unpack_from(order + "III", raw)
    start = 12 + ((namesz + 3) & ~3)
    if raw[12:12 + namesz].rstrip(b"\0") != b"VMCOREINFO" or start + descsz > len(raw):
        return None
    return raw[start:start + descsz]


def parse_vmcoreinfo(text: bytes) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.decode(errors="replace").splitlines() if "=" in line)


class Core:
    """An ELF64 core file's program headers and physical memory, in the byte order its header says."""

    def __init__(self, path: Path, at: int = 0, writable: bool = False) -> None:
        """The ELF file that starts `at` bytes into path (its offsets made the
        file's); read only unless kstall is completing a core it writes (a
        core from a CI artifact or a colleague's results may not be writable)."""
        self.path = path
        self.fd = os.open(path, (os.O_RDWR if writable else os.O_RDONLY) | os.O_CLOEXEC)
        head = os.pread(self.fd, 64, at)
        if head[:4] != b"\x7fELF" or head[4] != 2 or head[5] not in (1, 2):
            os.close(self.fd)
            raise CoreError(f"{path}: not an ELF64 file")
        self.order = "<" if head[5] == 1 else ">"
        self.header = bytearray(head)
        phoff, = struct.unpack_from(self.order + "Q", head, 0x20)
        phnum, = struct.unpack_from(self.order + "H", head, 0x38)
        table = os.pread(self.fd, phnum * _PHDR.size, at + phoff)
        self.segments = [Segment(*struct.unpack_from(self.order + _PHDR_FIELDS, table, i * _PHDR.size))
                         for i in range(phnum)]
        for seg in self.segments:
            seg.offset += at
        self.ram = sorted((s for s in self.segments if s.type == PT_LOAD), key=lambda s: s.paddr)
        self.virtual: list[Segment] = []
        self._starts: list[int] = []

    def close(self) -> None:
        os.close(self.fd)

    def offset_of(self, paddr: int) -> tuple[int, int] | None:
        """(file offset, bytes left in its segment) of a physical address."""
        for s in self.ram:
            if s.paddr <= paddr < s.paddr + s.filesz:
                return s.offset + paddr - s.paddr, s.paddr + s.filesz - paddr
        return None

    def read_phys(self, paddr: int, n: int) -> bytes | None:
        at = self.offset_of(paddr)
        if at is None or at[1] < n:
            return None
        return os.pread(self.fd, n, at[0])

    def notes(self) -> bytes:
        return b"".join(os.pread(self.fd, s.filesz, s.offset) for s in self.segments if s.type == PT_NOTE)

    def map_virtual(self, segments: list[Segment]) -> None:
        self.virtual = sorted(segments, key=lambda s: s.vaddr)
        self._starts = [s.vaddr for s in self.virtual]

    def read_virtual(self, addr: int, n: int) -> bytes | None:
        """n bytes at a kernel virtual address (map_virtual first), or None."""
        i = bisect.bisect_right(self._starts, addr) - 1
        if i < 0:
            return None
        s = self.virtual[i]
        if addr + n > s.vaddr + s.filesz:
            return None
        return os.pread(self.fd, n, s.offset + addr - s.vaddr)


NT_PRSTATUS, PR_PID_AT = 1, 32  # elf_prstatus: pr_info, pr_cursig, pr_sigpend, pr_sighold, then pr_pid
# An idle CPU runs its idle task, pid 0 on every CPU; gdb makes one thread of
# notes that share a pid, losing CPUs, so an idle CPU k is labelled IDLE_PID + k,
# above any pid the kernel gives (PID_MAX_LIMIT is 2**22)
IDLE_PID = 0x40000000


def cpu_notes(notes: bytes, order: str = "<") -> list[tuple[int, int]]:
    """(offset, size) of each vCPU's NT_PRSTATUS description in a core's notes:
    QEMU writes one per vCPU, in their order."""
    out, at = [], 0
    while at + 12 <= len(notes):
        namesz, descsz, kind = struct.unpack_from(order + "III", notes, at)
        desc = at + 12 + ((namesz + 3) & ~3)
        if kind == NT_PRSTATUS and notes[at + 12:at + 16] == b"CORE":
            out.append((desc, descsz))
        at = desc + ((descsz + 3) & ~3)
    return out


def label_cpus(notes: bytes, pids: dict[int, int], order: str = "<") -> bytes:
    """notes with CPU k's NT_PRSTATUS bearing the pid of the task CPU k runs."""
    out = bytearray(notes)
    for cpu, (desc, size) in enumerate(cpu_notes(notes, order)):
        if cpu in pids and size >= PR_PID_AT + 4:
            struct.pack_into(order + "I", out, desc + PR_PID_AT, pids[cpu] or IDLE_PID + cpu)
        elif size >= PR_PID_AT + 4:
            # QEMU's label (the CPU's number plus one), which its ppc64 notes lack and
            # its s390x ones carry in the host's byte order: written as the core's
            struct.pack_into(order + "I", out, desc + PR_PID_AT, cpu + 1)
    return bytes(out)


# elf_prstatus up to pr_reg: pr_info (3 ints), pr_cursig (a short, padded), pr_sigpend,
# pr_sighold, 4 pids, 4 timevals; pr_reg (longs) and pr_fpvalid (an int) follow
_PRSTATUS_HEAD = "iiiHxxQQIIIIQQQQQQQQ"


def reordered_notes(notes: bytes, src: str, dst: str) -> bytes:
    """The CPUs' NT_PRSTATUS notes and the VMCOREINFO note rewritten from
    byte order src into dst; other notes (floating-point and vector
    registers, whose layouts differ) are left out."""
    out, at = bytearray(), 0
    head = struct.calcsize("<" + _PRSTATUS_HEAD)
    while at + 12 <= len(notes):
        namesz, descsz, kind = struct.unpack_from(src + "III", notes, at)
        name_end = at + 12 + ((namesz + 3) & ~3)
        end = name_end + ((descsz + 3) & ~3)
        name, desc = notes[at + 12:name_end], notes[name_end:end]
        if kind == NT_PRSTATUS and name.startswith(b"CORE") and descsz >= head + 4:
            fields = struct.unpack_from(src + _PRSTATUS_HEAD, desc)
            longs = (descsz - head - 4) // 8
            regs = struct.unpack_from(f"{src}{longs}Q", desc, head)
            fpvalid, = struct.unpack_from(src + "i", desc, head + 8 * longs)
            body = struct.pack(dst + _PRSTATUS_HEAD, *fields) + struct.pack(f"{dst}{longs}Q", *regs) + \
                struct.pack(dst + "i", fpvalid)
            body += bytes(descsz - len(body))  # the struct's tail padding: debuggers check its size
            out += struct.pack(dst + "III", namesz, descsz, kind) + name + body + bytes(-len(body) % 4)
        elif name.startswith(b"VMCOREINFO"):
            out += struct.pack(dst + "III", namesz, descsz, kind) + name + desc
        at = end
    return bytes(out)


def va_bits_of(pt: dict, info: dict[str, str]) -> int:
    """The kernel's virtual address width, as VMCOREINFO says it runs."""
    if "t1sz_number" in pt and f"NUMBER({pt['t1sz_number']})" in info:
        return 64 - int(info[f"NUMBER({pt['t1sz_number']})"], 0)
    if info.get(f"NUMBER({pt.get('five_level_number')})", "0").strip() == "1":
        return 57
    return pt["va_bits"]


def _linear_mappings(core: Core, pt: dict, info: dict[str, str]) -> list[tuple[int, int, int]]:
    """The kernel's linear map of all RAM, where its stacks, tasks and text
    live, and its image where VMCOREINFO says it is mapped apart (s390x's from 6.10)."""
    linear = pt["linear"] + int(info.get(pt.get("linear_info", ""), "0"), 16)
    out = [(linear + s.paddr, s.paddr, s.filesz) for s in core.ram if s.filesz]
    img = pt.get("image", {})
    if img.get("virtual") in info and img.get("physical") in info:
        virt, phys = int(info[img["virtual"]], 16), int(info[img["physical"]], 16)
        out += [(virt + start - phys, start, s.paddr + s.filesz - start) for s in core.ram
                if s.filesz and s.paddr + s.filesz > (start := max(s.paddr, phys))]
    return out


def kernel_mappings(core: Core, a: Arch, info: dict[str, str]) -> list[tuple[int, int, int]]:
    """(virtual, physical, size) of every kernel mapping, runs merged."""
    pt = a.table["pagetable"]
    if "linear" in pt:
        return _linear_mappings(core, pt, info)
    root_sym, number = info.get(f"SYMBOL({pt['root']})"), info.get(f"NUMBER({pt['map_number']})")
    if root_sym is None or number is None:
        raise CoreError(f"VMCOREINFO has no SYMBOL({pt['root']}) or NUMBER({pt['map_number']})")
    root = int(root_sym, 16) - pt["kernel_map"] + pt["map_sign"] * int(number, 0)
    va_bits = va_bits_of(pt, info)
    levels = -(-(va_bits - 12) // 9)
    top = 1 << (va_bits - 12 - 9 * (levels - 1))  # the root's entries
    first = top // 2 if pt["kernel_half"] else 0
    mask, leaf_bit, leaf_when = pt["addr_mask"], pt["leaf_bit"], pt["leaf_when"]
    out: list[tuple[int, int, int]] = []
    tables = 0

    def walk(table: int, level: int, base: int) -> None:
        nonlocal tables
        tables += 1
        data = core.read_phys(table, PAGE) if tables < _MAX_TABLES else None
        if data is None:
            return
        shift = 12 + 9 * (levels - 1 - level)
        for i, e in enumerate(struct.unpack(order_of(a) + "512Q", data)):
            if not e & 1 or (level == 0 and not first <= i < top):
                continue
            va, pa = base | (i << shift), e & mask
            if level == levels - 1:
                out.append((va, pa, PAGE))
            elif (e >> leaf_bit) & 1 == leaf_when:
                if level > 0:  # (no architecture maps a whole root entry as one block)
                    out.append((va, pa & ~((1 << shift) - 1), 1 << shift))
            else:
                walk(pa, level + 1, va)
    walk(root, 0, (2**64 - 1) & ~((1 << va_bits) - 1))
    merged: list[tuple[int, int, int]] = []
    seen: dict[int, int] = {}
    for va, pa, size in sorted(out):
        seen[pa] = seen.get(pa, 0) + 1
        if seen[pa] > ALIASES:
            continue
        if merged and merged[-1][0] + merged[-1][2] == va and merged[-1][1] + merged[-1][2] == pa:
            merged[-1] = (merged[-1][0], merged[-1][1], merged[-1][2] + size)
        else:
            merged.append((va, pa, size))
    return merged


def _virtual_segments(core: Core, maps: list[tuple[int, int, int]]) -> list[Segment]:
    out = []
    for va, pa, size in maps:
        while size > 0:
            at = core.offset_of(pa)
            if at is None:  # device memory, or RAM the core does not hold: skip a page
                va, pa, size = va + PAGE, pa + PAGE, size - PAGE
                continue
            n = min(size, at[1])
            out.append(Segment(PT_LOAD, 7, at[0], va, pa, n, n, 0))
            va, pa, size = va + n, pa + n, size - n
    return out


def _running_pids(core: Core, virtual: list[Segment], layout: dict | None, cpus: int) -> dict[int, int]:
    """CPU number -> pid of the task it runs, read from the core."""
    if not virtual or not layout or "running" not in layout:
        return {}
    core.map_virtual(virtual)
    running = kernel_waits.read(core.read_virtual, layout, cpus).get("running") or {}
    return {int(cpu): t["pid"] for cpu, t in running.items()}


def complete(path: Path, a: Arch, raw_note: bytes | None, layout: dict | None = None, cpus: int = 0) -> dict:
    """Write the ELF header, program headers and notes in front of QEMU's core,
    which starts HEADROOM bytes into path, with VMCOREINFO and the kernel's
    mappings added when they can be; what was added, or what is missing."""
    core = Core(path, HEADROOM, writable=True)
    try:
        order = order_of(a)
        text = note_text(raw_note, order) if raw_note else None
        own = core.notes()
        if core.order != order:  # QEMU's headers and notes in the other order: made the architecture's
            own = reordered_notes(own, core.order, order)
            core.header[5] = 1 if order == "<" else 2
        has_own = b"VMCOREINFO" in own
        doc: dict = {"vmcoreinfo": "qemu" if has_own else ("kstall" if text else None)}
        virtual: list[Segment] = []
        linear = "linear" in a.table["pagetable"]  # its kernel mappings need no VMCOREINFO
        if text is None and not has_own:
            doc["missing"] = ("VMCOREINFO (the kernel's vmcoreinfo_note could not be read): crash and drgn "
                              "cannot find the kernel's layout" + (
                                  "" if linear else ", and gdb reads physical memory only") +
                              "; it still has every vCPU's registers")
            if linear:
                virtual = _virtual_segments(core, kernel_mappings(core, a, {}))
        else:
            info = parse_vmcoreinfo(text if text is not None else own[own.index(b"VMCOREINFO"):])
            try:
                virtual = _virtual_segments(core, kernel_mappings(core, a, info))
            except CoreError as e:
                doc["missing"] = f"the kernel's mappings ({e}): gdb reads physical memory only"
        pids = _running_pids(core, virtual, layout, cpus)
        if pids:
            doc["cpu_tasks"] = {str(k): v for k, v in sorted(pids.items())}
        notes = label_cpus(own, pids, order) + (vmcoreinfo_note(text, order) if text is not None and not has_own
                                                else b"")
        keep = [s for s in core.segments if s.type != PT_NOTE]
        first_data = min((s.offset for s in keep if s.filesz), default=HEADROOM)
        room = (first_data - 64 - len(notes)) // _PHDR.size - 1 - len(keep)
        if room < 0:
            raise CoreError("no room in front of the core for its headers")
        if len(virtual) > room:
            doc["kernel_mappings_left_out"] = len(virtual) - room
            virtual = virtual[:room]
        phdrs = keep + virtual
        note_at = 64 + _PHDR.size * (1 + len(phdrs))
        table = Segment(PT_NOTE, 0, note_at, 0, 0, len(notes), len(notes), 0).pack(order) + \
            b"".join(s.pack(order) for s in phdrs)
        if core.order != order:  # the rest of the ELF header too: e_type, e_machine, e_version ... e_phentsize
            fields = struct.unpack_from(core.order + "HHIQQQIHH", core.header, 0x10)
            struct.pack_into(order + "HHIQQQIHH", core.header, 0x10, *fields)
        struct.pack_into(order + "QQ", core.header, 0x20, 64, 0)  # e_phoff; e_shoff: no sections
        struct.pack_into(order + "HHHH", core.header, 0x38, 1 + len(phdrs), 0, 0, 0)  # e_phnum, e_shentsize/...
        os.pwrite(core.fd, bytes(core.header) + table + notes, 0)
        return doc | {"kernel_mappings": len(virtual),
                      "kernel_mapped_mb": round(sum(s.filesz for s in virtual) / 1e6, 1)}
    finally:
        core.close()
