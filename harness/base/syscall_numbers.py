# SPDX-License-Identifier: GPL-2.0
"""An ABI's system call numbers, read from the headers of the C compiler that
builds its programs. The kernel's tracer names each call it counts by the
native table (raw_syscalls' id with .syscalls), so a 32-bit program's calls
are named again by its own table: i386's 21 is mount, x86_64's is access."""
from __future__ import annotations

import functools
import re
import subprocess

_DEFINE = re.compile(r"^#define __NR_(\w+) (\d+)$", re.M)


@functools.lru_cache(maxsize=None)
def table(cc: str, cflags: tuple[str, ...] = ()) -> dict[int, str]:
    """number -> name, as cc's <sys/syscall.h> defines them ({} when cc cannot say)."""
    try:
        p = subprocess.run([cc, *cflags, "-dM", "-E", "-include", "sys/syscall.h", "-x", "c", "/dev/null"],
                           capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return {}
    names: dict[int, str] = {}
    for name, nr in _DEFINE.findall(p.stdout if p.returncode == 0 else ""):
        names.setdefault(int(nr), name)
    return names
