# SPDX-License-Identifier: GPL-2.0
"""An ELF symbol file out of the symbols captured from a guest, for the
developer's own gdb when there is no vmlinux with DWARF.

gdb reads a kernel's names from an ELF's symbol table. The captured
kallsyms (text) and data symbols are that table without the file: this
writes an ELF whose sections hold no bytes (SHT_NOBITS) at the kernel's
addresses and whose symbols are the captured ones, sized up to the next
symbol. With it, `bt` and `x/i $pc` name functions and `print
(long)jiffies` reads a variable by name. Per-CPU variables are offsets into
the per-CPU area, not addresses: they are absolute symbols.
"""
from __future__ import annotations

import struct
from pathlib import Path

from harness.base import paths
from harness.base.arch import Arch
from harness.analysis.kallsyms import DATA_TYPES, TEXT_TYPES
from harness.debug.gdb import gdb_binary
from harness.debug.vcpus import GDB_SCRIPT
from images.kernels import symcache

_SHT_NULL, _SHT_SYMTAB, _SHT_STRTAB, _SHT_NOBITS = 0, 2, 3, 8
_SHF_WRITE, _SHF_ALLOC, _SHF_EXEC = 1, 2, 4
_SHN_ABS = 0xfff1
_STB_GLOBAL, _STT_OBJECT, _STT_FUNC = 1, 1, 2
FORMAT = 4  # bump when the file's layout changes: cached ones are written again


def _read(path: Path, types: frozenset[str]) -> list[tuple[int, str]]:
    out = []
    for line in path.read_text(errors="replace").splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[1] in types and len(parts) == 3:  # a module's ([name]) are not the kernel's
            try:
                out.append((int(parts[0], 16), parts[2]))
            except ValueError:
                continue
    return sorted(set(out))


def _sized(symbols: list[tuple[int, str]], end: int) -> list[tuple[int, int, str]]:
    """(address, size up to the next symbol, name)"""
    out = []
    nxt = end
    for addr, name in reversed(symbols):  # sorted: the next higher address is the last one seen above it
        out.append((addr, max(nxt - addr, 0), name))
        if addr < nxt:
            nxt = addr
    return out[::-1]


def build(text_path: Path, data_path: Path | None, a: Arch) -> bytes:
    text = [s for s in _read(text_path, TEXT_TYPES) if s[0]]
    data = _read(data_path, DATA_TYPES) if data_path and data_path.is_file() else []
    if not text:
        raise ValueError(f"{text_path}: no text symbols")
    lo = text[0][0]
    high = [s for s in data if s[0] >= lo]
    # text or data by where a symbol is, not by its kallsyms letter: some
    # kernels call variables the linker script defines text (6.16: T jiffies)
    marks = {name: addr for addr, name in text if name in ("_stext", "_etext", "_sinittext", "_einittext")}
    spans = [(marks[a], marks[b]) for a, b in (("_stext", "_etext"), ("_sinittext", "_einittext"))
             if a in marks and b in marks]

    def kind_of(addr: int, letter_kind: int) -> int:
        if not spans:
            return letter_kind
        return _STT_FUNC if any(a <= addr < b for a, b in spans) else _STT_OBJECT
    every = sorted([(addr, name, kind_of(addr, _STT_FUNC)) for addr, name in text] +
                   [(addr, name, kind_of(addr, _STT_OBJECT)) for addr, name in high])
    hi = every[-1][0] + 16
    # a section per run of text or of data symbols: gdb calls a symbol text
    # or data by its section's flags, and the kernel interleaves the two
    # (init text lies beyond .data)
    runs: list[tuple[int, int, int]] = []  # (kind, first, end) in every
    for i, (_, _, kind) in enumerate(every):
        if runs and runs[-1][0] == kind:
            runs[-1] = (kind, runs[-1][1], i + 1)
        else:
            runs.append((kind, i, i + 1))
    shstr = b"\0.text\0.data\0.symtab\0.strtab\0.shstrtab\0"

    def off(name: bytes) -> int:
        return shstr.index(name + b"\0")
    strtab = bytearray(b"\0")
    syms = [struct.pack("<IBBHQQ", 0, 0, 0, 0, 0, 0)]
    sized = _sized([(addr, name) for addr, name, _ in every], hi)
    sections_at = []
    for n, (kind, first, end) in enumerate(runs, start=1):
        start, stop = every[first][0], every[end][0] if end < len(every) else hi
        sections_at.append((kind, start, stop))
        for addr, size, name in sized[first:end]:
            syms.append(struct.pack("<IBBHQQ", len(strtab), (_STB_GLOBAL << 4) | kind, 0, n, addr, size))
            strtab += name.encode() + b"\0"
    for addr, name in data:
        if addr < lo:
            syms.append(struct.pack("<IBBHQQ", len(strtab), (_STB_GLOBAL << 4) | _STT_OBJECT, 0, _SHN_ABS, addr, 0))
            strtab += name.encode() + b"\0"
    symtab = b"".join(syms)
    sym_at = 64
    str_at = sym_at + len(symtab)
    shstr_at = str_at + len(strtab)
    sh_at = (shstr_at + len(shstr) + 7) & ~7
    sections = [(0, _SHT_NULL, 0, 0, 0, 0, 0, 0, 0, 0)]
    for kind, start, stop in sections_at:
        section, flags = (b".text", _SHF_ALLOC | _SHF_EXEC) if kind == _STT_FUNC else \
            (b".data", _SHF_ALLOC | _SHF_WRITE)
        sections.append((off(section), _SHT_NOBITS, flags, start, sym_at, stop - start, 0, 0, 1, 0))
    sym_index = len(sections)
    sections += [
        (off(b".symtab"), _SHT_SYMTAB, 0, 0, sym_at, len(symtab), sym_index + 1, 1, 8, 24),
        (off(b".strtab"), _SHT_STRTAB, 0, 0, str_at, len(strtab), 0, 0, 1, 0),
        (off(b".shstrtab"), _SHT_STRTAB, 0, 0, shstr_at, len(shstr), 0, 0, 1, 0),
    ]
    header = b"\x7fELF" + bytes([2, 1, 1, 0]) + bytes(8) + struct.pack(
        "<HHIQQQIHHHHHH", 2, a.table["elf_machine"], 1, lo, 0, sh_at, 0, 64, 0, 0, 64, len(sections), len(sections) - 1)
    body = header + symtab + bytes(strtab) + shstr
    body += bytes(sh_at - len(body))
    return body + b"".join(struct.pack("<IIQQQQIIQQ", *s) for s in sections)


def for_capture(kallsyms: Path, a: Arch) -> Path:
    """The symbol file of a capture (images/kernels/symcache.py), written beside it once."""
    out = symcache.beside(kallsyms, f"v{FORMAT}.elf")
    if not out.is_file() or out.stat().st_mtime < kallsyms.stat().st_mtime:
        paths.write_atomic(out, build(kallsyms, symcache.beside(kallsyms, "datasyms"), a))
    return out


def developer_gdb(a: Arch, vmlinux: Path | None, symbols: Path | None, layout: Path | None, target: str,
                  commands: list[str], batch: bool) -> list[str]:
    """The developer's gdb on a guest or a core (target: `target remote SOCKET`
    or `core-file VMCORE`): DWARF when there is a vmlinux, else this module's
    symbol file, and kstall's gdb commands (kstall-bt) loaded."""
    args = [gdb_binary(a.gdb), "-q", "-ex", f"set architecture {a.gdb_arch}"]
    names = vmlinux or (for_capture(symbols, a) if symbols else None)
    if names:
        args += ["-ex", f"symbol-file {names}"]  # no exec file: gdb would compare its age with a core's
    args += ["-ex", target, "-ex", f"source {GDB_SCRIPT}"]
    if symbols:
        args += ["-ex", f"kstall-symbols {symbols}"]
    if layout:
        args += ["-ex", f"kstall-layout {layout}"]
    for c in commands:
        args += ["-ex", c]
    return args + (["-batch"] if batch else [])
