# SPDX-License-Identifier: GPL-2.0
"""A hung guest's memory and every vCPU's registers as a core file (verify --vmcore).

QEMU writes it (QMP dump-guest-memory) as an ELF core: one PT_LOAD per RAM
block and one PRSTATUS note per vCPU, so the spinning CPUs' stacks are in
it, and gdb, crash and drgn all open it as it is, with no unpacking step.

Most of a guest's RAM is pages it never touched, which the ELF holds as
zeros. So QEMU writes into a pipe, not a file, and kstall copies the stream
to RUN/vmcore skipping every all-zero block (a hole): the core takes on
disk only what the guest used, and nobody writes, or reads back, a GiB of
zeros. The stream lands corekernel.HEADROOM bytes in, and kstall writes the
headers in front of it that make the core whole for crash, drgn and gdb
(harness/debug/corekernel.py). Both ends are bounded in time. A full disk or any other failure
loses the core only, never the verdict: the rest of the stream is drained,
so QEMU finishes, and the partial file is removed.
"""
from __future__ import annotations

import contextlib
import os
import threading
import time
from pathlib import Path

from harness.base.arch import Arch
from harness.debug import corekernel
from harness.debug.vcpus import hmp_bytes
from harness.guest.qmp import QMPError
from harness.guest.vm import VM

NAME = "vmcore"
FORMAT = "elf"
DUMP_TIMEOUT_S = 300.0  # 1 GiB takes seconds; a stuck QEMU is given up on
BLOCK = 1 << 16
_ZERO = bytes(BLOCK)
_FD_NAME = "kstall-vmcore"
NOTE_BYTES = 4096  # VMCOREINFO_BYTES: the kernel's note fits one page


class _SparseCopy(threading.Thread):
    """The pipe's stream into dest from byte `at` on, seeking over all-zero blocks."""

    def __init__(self, read_fd: int, dest: Path, at: int) -> None:
        super().__init__(name="kstall-vmcore", daemon=True)
        self.fd, self.dest, self.at = read_fd, dest, at
        self.size = 0
        self.error = ""

    def run(self) -> None:
        try:
            out = os.open(self.dest, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        except OSError as e:
            self.error, out = f"cannot create {self.dest}: {e.strerror}", -1
        try:
            if out >= 0:
                os.lseek(out, self.at, os.SEEK_SET)
            with os.fdopen(self.fd, "rb", buffering=BLOCK * 4) as src:
                while block := src.read(BLOCK):
                    if out < 0:
                        continue  # drained: QEMU must not block on a pipe nobody reads
                    try:
                        if block == _ZERO[:len(block)]:
                            os.lseek(out, len(block), os.SEEK_CUR)
                        else:
                            os.write(out, block)
                    except OSError as e:
                        self.error = f"writing {self.dest}: {e.strerror}"
                        os.close(out)
                        out = -1
                    self.size += len(block)
            if out >= 0:
                os.ftruncate(out, self.at + self.size)  # a trailing hole still counts
        except OSError as e:
            self.error = self.error or f"writing {self.dest}: {e.strerror}"
        finally:
            if out >= 0:
                os.close(out)


def read_vmcoreinfo(vm: VM, address: int | None, cpus: int, a: Arch) -> bytes | None:
    """The kernel's VMCOREINFO note, read through a vCPU's MMU (the first
    whose page tables map the kernel) from the pointer at `vmcoreinfo_note`
    (the monitor prints words in its order, the guest's pointer is in its own)."""
    if address is None:
        return None
    for cpu in range(cpus):
        try:
            ptr = hmp_bytes(vm.qmp, cpu, address, 8, a.monitor_byteorder)
            if not ptr:
                continue
            note = hmp_bytes(vm.qmp, cpu, int.from_bytes(ptr, a.byteorder), NOTE_BYTES, a.monitor_byteorder)
        except (QMPError, OSError):
            continue
        if note:
            return note
    return None


def write(vm: VM, out_dir: Path, a: Arch, vmcoreinfo_at: int | None, cpus: int, layout: dict | None,
          format_: str = FORMAT) -> dict:
    """RUN/vmcore of a stopped guest, made whole for crash, drgn and gdb
    (harness/debug/corekernel.py); what run.json says of it."""
    dest = out_dir / NAME
    t0 = time.monotonic()
    note = read_vmcoreinfo(vm, vmcoreinfo_at, cpus, a)
    r, w = os.pipe2(os.O_CLOEXEC)
    copy = _SparseCopy(r, dest, corekernel.HEADROOM)  # the headers go in front (corekernel.complete)
    copy.start()
    error = ""
    handed = False  # QEMU holds the pipe's write end as _FD_NAME
    try:
        vm.qmp.send_fd(_FD_NAME, w)
        handed = True
        os.close(w)
        w = -1
        vm.qmp.cmd("dump-guest-memory", timeout=DUMP_TIMEOUT_S, paging=False, protocol=f"fd:{_FD_NAME}",
                   format=format_)
    except (QMPError, OSError) as e:
        error = f"QEMU could not write the core: {e}"
        if handed:  # a dump that did not start leaves QEMU its end: the copy would wait for QEMU's exit
            with contextlib.suppress(QMPError, OSError):
                vm.qmp.cmd("closefd", fdname=_FD_NAME)
    finally:
        if w >= 0:
            os.close(w)
    copy.join(DUMP_TIMEOUT_S if not error else 10)
    error = error or copy.error or ("the copy did not finish" if copy.is_alive() else "")
    seconds = round(time.monotonic() - t0, 2)
    if error:
        dest.unlink(missing_ok=True)
        return {"error": error, "seconds": seconds}
    dumped = time.monotonic()
    try:
        added = corekernel.complete(dest, a, note, layout, cpus)
    except (corekernel.CoreError, OSError) as e:
        dest.unlink(missing_ok=True)
        return {"error": f"the core QEMU wrote is unusable: {e}", "seconds": round(time.monotonic() - t0, 2)}
    st = dest.stat()
    return {"file": NAME, "format": FORMAT, "bytes": st.st_size, "disk_bytes": st.st_blocks * 512,
            "dump_s": seconds, "seconds": round(time.monotonic() - t0, 2),
            "complete_s": round(time.monotonic() - dumped, 2)} | added
