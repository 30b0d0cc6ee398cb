# SPDX-License-Identifier: GPL-2.0
"""`kstall threads`: the thread table, futex groups, lock owner and hang class
of a live process on this machine or of a core file."""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from harness.analysis import thread_hang, threads
from harness.base import arch, leftovers
from harness.debug import process


class Usage(ValueError):
    """The target was named wrongly (exit 2, not 4)."""


def examine(target: str, exe: Path | None, keep_core: Path | None,
            timeout: float) -> tuple[thread_hang.Analysis, threads.Dump, Path]:
    """target: a PID (dumped through gdb's gcore, the process left as it was)
    or core:FILE (with exe). The analysis, the dump and the program read.
    Raises Usage, or process.DumpError for anything that failed on the way."""
    work = Path(tempfile.mkdtemp(prefix="kstall-threads-"))  # private (0700)
    leftovers.mark(work)  # a killed kstall's is swept by the next
    try:
        if target.startswith("core:"):
            core, proc = Path(target[5:]), {}
            if not core.is_file():
                raise process.DumpError(f"no core file {core}")
            if exe is None:
                raise Usage("a core needs --exe BINARY (the program that dumped it, with its symbols)")
        elif target.isdigit():
            pid = int(target)
            try:
                exe = exe or Path(f"/proc/{pid}/exe").resolve(strict=True)
                proc = threads.read_proc(pid)
            except OSError as e:
                raise process.DumpError(f"process {pid}: {e.strerror or e}") from None
            core = keep_core or work / "core"
            process.capture_live(pid, core, timeout * 3)
        else:
            raise Usage(f"{target!r} is neither a PID nor core:FILE")
        # a core of another architecture (one copied from a guest) is read by its own gdb
        with open(core, "rb") as f:
            name = arch.of_elf(f.read(20))
        gdb = arch.get(name).gdb if name in arch.names() else "gdb"
        dump = process.dump_core(core, exe, work / "gdb.log", proc, timeout, gdb_name=gdb)
        return thread_hang.analyse(dump, proc), dump, exe
    finally:
        shutil.rmtree(work, ignore_errors=True)
