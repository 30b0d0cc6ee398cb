# SPDX-License-Identifier: GPL-2.0
"""`kstall attach RUN`: the developer's gdb on a held guest (verify --hold).

gdb (the architecture's: gdb-multiarch for arm64) is started on the guest's
gdbstub socket with the kernel's symbols: the vmlinux with DWARF when kstall
has it (`kstall symbols KERNEL --debuginfo`), else an ELF symbol file made
from the captured kallsyms (harness/debug/symfile.py), so that `bt`, `x/i
$pc` and `print (long)jiffies` speak in names. kstall's gdb commands are
loaded too: `kstall-bt [all]` walks a vCPU's stack as kstall did for the
verdict, which works without DWARF on the CPUs that spin.

kstall execs gdb, handing it the guest's attach lock (harness/guest/hold.py):
the terminal, Ctrl-C and gdb's exit are gdb's own, and the lock lasts as
long as gdb does.
"""
from __future__ import annotations

import os
from pathlib import Path

from harness.base import arch as arches
from harness.base import paths, untrusted
from harness.debug.symfile import developer_gdb
from harness.guest import hold


def gdb_command(doc: dict, commands: list[str], batch: bool) -> list[str]:
    """gdb on the held guest held.json names (hold.read checked its socket
    and architecture). Its symbols and layout are taken only from kstall's
    own cache, since a symbol file is written beside them."""
    cache = paths.cache_dir()
    vmlinux = untrusted.plain_file(doc.get("vmlinux"))
    return developer_gdb(arches.get(doc["arch"]), vmlinux, untrusted.path_under(doc.get("symbols"), cache),
                         untrusted.path_under(doc.get("layout"), cache), f"target remote {doc['gdb_socket']}",
                         commands, batch)


def attach(run_dir: Path, commands: list[str], batch: bool, echo) -> int:
    """Exec gdb on the held guest (returns only on a refusal: 1)."""
    try:
        doc = hold.read(run_dir)
        with hold.attach_lock(doc) as fd:
            argv = gdb_command(doc, commands, batch)
            echo(f"attaching {argv[0]} to the held guest of {run_dir.name} "
                 f"({doc['vmlinux'] and 'DWARF from ' + doc['vmlinux'] or 'symbols from the captured kallsyms'}); "
                 "`kstall-bt all` walks every vCPU's stack as kstall did")
            os.set_inheritable(fd, True)
            try:
                os.execvp(argv[0], argv)
            except OSError as e:
                echo(f"error: cannot run {argv[0]}: {e.strerror}")
                return 1
    except hold.NotHeld as e:
        echo(f"error: {e}")
        return 1
    return 1
