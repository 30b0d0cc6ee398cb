# SPDX-License-Identifier: GPL-2.0
"""The functions a kernel build inlined into a console report's frames,
read from its DWARF with addr2line.

syzbot symbolizes every report with its inlined frames, and names a hang
after them: "INFO: task hung in lock_rename" is, on Debian's 6.1.170, a task
whose stack shows only do_renameat2+0x47e, where the build inlined
lock_rename (and inode_lock_nested into it). With the kernel's debug info
(`kstall symbols KERNEL --debuginfo`), kstall compares syzbot's function
with those too (harness/analysis/syzbot.py).

A module's frame ("__get_metapage+0x46a/0x540 [jfs]", where the build
inlined lock_metapage) is read the same way from that module's own debug
file (images/kernels/debuginfo.py fetches it): a .ko is relocatable, so its
function's address is an offset into the section its symbol table names,
and addr2line is told that section.
"""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

from harness.analysis.kallsyms import Kallsyms

# a frame of the kernel's own text: "do_renameat2+0x47e/0x5f0" (a module's frame ends "[name]";
# a "? name+0x.." is a stale word on the stack, no frame)
FRAME = re.compile(r"(?<!\? )\b([A-Za-z_][\w.]*)\+0x([0-9a-f]+)/0x[0-9a-f]+(?![0-9a-f]|\s*\[)")
# a module's frame: "__get_metapage+0x46a/0x540 [jfs]"
MODULE_FRAME = re.compile(r"(?<!\? )\b([A-Za-z_][\w.]*)\+0x([0-9a-f]+)/0x[0-9a-f]+\s*\[(\w+)\]")
TIMEOUT_S = 60  # addr2line reads a distro vmlinux's DWARF in about a second


def addresses(lines: list[str], syms: Kallsyms) -> list[int]:
    """The call sites the frames of these lines return to (a return address's
    call is the byte before it), for the functions the symbols know."""
    found = []
    for line in lines:
        m = FRAME.search(line)
        if m and (base := syms.by_name.get(m.group(1))) is not None and int(m.group(2), 16):
            found.append(base + int(m.group(2), 16) - 1)
    return found


def inlined(addrs: list[int], vmlinux: Path, section: str = "") -> list[str]:
    """The functions inlined at these addresses, innermost first ([] when
    addr2line cannot say); in a relocatable object, offsets into section."""
    if not addrs:
        return []
    where = ["-j", section] if section else []
    try:
        p = subprocess.run(["addr2line", "-a", "-i", "-f", *where, "-e", str(vmlinux), *(f"{a:#x}" for a in addrs)],
                           capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return []
    names: list[str] = []
    for group in re.split(r"^0x[0-9a-f]+\n", p.stdout, flags=re.M)[1:]:
        funcs = group.splitlines()[0::2]   # function, file:line, function, file:line, ...
        names += [f for f in funcs[:-1] if f and f != "??"]  # the last is the function that holds them
    return names


def module_frames(lines: list[str]) -> dict[str, list[tuple[str, int]]]:
    """The frames of these lines in modules, by module: (function, offset)."""
    found: dict[str, list[tuple[str, int]]] = {}
    for line in lines:
        m = MODULE_FRAME.search(line)
        if m and int(m.group(2), 16):
            found.setdefault(m.group(3), []).append((m.group(1), int(m.group(2), 16)))
    return found


def module_symbols(ko: Path) -> dict[str, tuple[str, int]]:
    """A module's functions: name -> (the section it is in, its offset there)."""
    try:  # the section headers and the symbol table in one pass
        out = subprocess.run(["readelf", "-SsW", str(ko)], capture_output=True, text=True,
                             timeout=TIMEOUT_S, check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return {}
    names = dict(re.findall(r"^\s*\[\s*(\d+)\]\s+(\S+)", out, flags=re.M))
    found = {}
    for value, ndx, name in re.findall(r"^\s*\d+:\s+([0-9a-f]+)\s+\d+\s+FUNC\s+\S+\s+\S+\s+(\d+)\s+(\S+)$",
                                       out, flags=re.M):
        if ndx in names:
            found[name] = (names[ndx], int(value, 16))
    return found


def inlined_in_module(frames: list[tuple[str, int]], ko: Path) -> list[str]:
    """The functions inlined at a module's frames, from its debug file."""
    syms = module_symbols(ko)
    by_section: dict[str, list[int]] = {}
    for func, offset in frames:
        if func in syms:
            section, base = syms[func]
            by_section.setdefault(section, []).append(base + offset - 1)
    return [name for section, addrs in by_section.items() for name in inlined(addrs, ko, section)]
