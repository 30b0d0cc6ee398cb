# SPDX-License-Identifier: GPL-2.0
"""The functions a kernel build inlined into a console report's frames,
read from its DWARF with addr2line.

syzbot symbolizes every report with its inlined frames, and names a hang
after them: "INFO: task hung in lock_rename" is, on Debian's 6.1.170, a task
whose stack shows only do_renameat2+0x47e, where the build inlined
lock_rename (and inode_lock_nested into it). With the kernel's debug info
(`kstall symbols KERNEL --debuginfo`), kstall compares syzbot's function
with those too (harness/analysis/syzbot.py).
"""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

from harness.analysis.kallsyms import Kallsyms

# a frame of the kernel's own text: "do_renameat2+0x47e/0x5f0" (a module's frame ends "[name]";
# a "? name+0x.." is a stale word on the stack, no frame)
FRAME = re.compile(r"(?<!\? )\b([A-Za-z_][\w.]*)\+0x([0-9a-f]+)/0x[0-9a-f]+(?![0-9a-f]|\s*\[)")
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


def inlined(addrs: list[int], vmlinux: Path) -> list[str]:
    """The functions inlined at these addresses, innermost first ([] when
    addr2line cannot say)."""
    if not addrs:
        return []
    try:
        p = subprocess.run(["addr2line", "-a", "-i", "-f", "-e", str(vmlinux), *(f"{a:#x}" for a in addrs)],
                           capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return []
    names: list[str] = []
    for group in re.split(r"^0x[0-9a-f]+\n", p.stdout, flags=re.M)[1:]:
        funcs = group.splitlines()[0::2]   # function, file:line, function, file:line, ...
        names += [f for f in funcs[:-1] if f and f != "??"]  # the last is the function that holds them
    return names
