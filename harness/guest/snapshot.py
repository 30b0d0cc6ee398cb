# SPDX-License-Identifier: GPL-2.0
"""Snapshots of a booted guest at the agent's gate: boot once per kernel.

The first boot of a kernel, with a given initramfs and QEMU command line
(vCPUs, memory, accelerator, devices, kernel command line), stops at the
agent's gate ("KSTALL ready"). kstall saves the whole VM there with QEMU's
migration, to a file it hands QEMU over QMP, and lets that guest go on. Later
runs start QEMU with `-incoming` on the file: about a second instead of a
3-5 s boot under TCG. What a restored guest cannot have had on its command
line, and what must differ between guests restored from one file (the
reproducer and its arguments, RNG seed, wall clock), comes with the host's GO
(repro/agent.c).

Guest RAM is not in the migration stream (x-ignore-shared): a guest that may
be saved keeps its RAM in a memfd (VMConfig.shared_ram), which is copied to
KEY.ram, sparse, beside the stream of device state (KEY.vmstate). A restored
guest maps KEY.ram private, so a run reads and copies only the pages it
touches.

A snapshot is keyed by the kernel's sha256 and by VM.shape(), the QEMU command
line without the run's private paths, which names the initramfs by its content
hash; and by the QEMU binary, whose migration format may change between
versions. It lives in the cache (snapshots/KEY.vmstate, with KEY.json beside
it), is written atomically, and one that does not load is removed.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from harness.base import paths
from harness.guest.qmp import QMPError
from harness.guest.vm import QEMU, VM

# bump when what the guest does before its gate changes in a way the key does not see
FORMAT = 2
SAVE_TIMEOUT = 60.0
RESTORE_TIMEOUT = 30.0
# the cache keeps the most recently used snapshots up to this size
MAX_BYTES = int(float(os.environ.get("KSTALL_SNAPSHOT_MAX_GB", "8")) * (1 << 30))


class SnapshotError(RuntimeError):
    pass


def directory() -> Path:
    return paths.cache_dir() / "snapshots"


def _qemu_identity() -> list:
    exe = shutil.which(QEMU) or QEMU
    try:
        st = os.stat(exe)
    except OSError:
        return [exe]
    return [os.path.realpath(exe), st.st_size, int(st.st_mtime)]


@dataclass
class Snapshot:
    key: str

    @property
    def state(self) -> Path:
        return directory() / f"{self.key}.vmstate"

    @property
    def ram(self) -> Path:
        return directory() / f"{self.key}.ram"

    @property
    def meta_path(self) -> Path:
        return directory() / f"{self.key}.json"

    @property
    def console(self) -> Path:
        """The boot's console up to the gate, which a restored guest does not print again."""
        return directory() / f"{self.key}.console"

    def start_console_log(self, log: Path) -> None:
        """Begin a restored run's console log (QEMU appends to it) with the boot."""
        log.parent.mkdir(parents=True, exist_ok=True)
        try:
            shutil.copyfile(self.console, log)
        except OSError:
            pass

    def meta(self) -> dict | None:
        """What was recorded when it was saved; None when there is no whole snapshot."""
        try:
            doc = json.loads(self.meta_path.read_text())
        except (OSError, ValueError):
            return None
        try:
            if self.state.stat().st_size != doc.get("bytes") or self.ram.stat().st_size != doc.get("ram_size"):
                return None
        except OSError:
            return None
        os.utime(self.meta_path)  # recently used: pruned last
        return doc

    def discard(self) -> None:
        for p in (self.meta_path, self.state, self.ram, self.console):
            p.unlink(missing_ok=True)

    def save(self, vm: VM, meta: dict) -> dict:
        """Save the running guest (stopped for it, then resumed); what was
        recorded. Raises SnapshotError; the guest runs on either way."""
        if vm.ram_fd is None:
            raise SnapshotError("the guest's RAM is not shared with kstall (VMConfig.shared_ram)")
        directory().mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{self.key}.", suffix=".vmstate", dir=directory())
        ram_tmp = Path(tmp).with_suffix(".ram")
        t0 = time.monotonic()
        try:
            vm.qmp.cmd("stop")
            vm.qmp.cmd("migrate-set-capabilities", capabilities=[{"capability": "x-ignore-shared", "state": True}])
            # the default cap (32 MiB/s) is meant for a network
            vm.qmp.cmd("migrate-set-parameters", **{"max-bandwidth": 1 << 40})
            vm.qmp.send_fd("kstall-snapshot", fd)
            vm.qmp.cmd("migrate", uri="fd:kstall-snapshot")
            try:
                status = _wait_migration(vm, SAVE_TIMEOUT, "saving")
            except SnapshotError:
                with contextlib.suppress(QMPError, OSError):
                    vm.qmp.cmd("migrate_cancel")
                raise
            if status.get("status") != "completed":
                raise SnapshotError(f"migration {status.get('status')}: {status.get('error-desc', '')}".strip(": "))
            size = os.fstat(fd).st_size
            ram_size, ram_data = copy_sparse(vm.ram_fd, ram_tmp)
            os.replace(ram_tmp, self.ram)
            os.replace(tmp, self.state)
            shutil.copyfile(vm.cfg.log_dir / "console.log", self.console)
            doc = meta | {"key": self.key, "bytes": size, "ram_size": ram_size, "ram_bytes": ram_data,
                          "save_s": round(time.monotonic() - t0, 2),
                          "saved": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
            paths.write_atomic(self.meta_path, json.dumps(doc, indent=1) + "\n")
            return doc
        except (QMPError, OSError) as e:
            raise SnapshotError(str(e)) from None
        finally:
            os.close(fd)
            Path(tmp).unlink(missing_ok=True)
            ram_tmp.unlink(missing_ok=True)
            try:
                vm.qmp.cmd("cont")
            except (QMPError, OSError):
                pass  # QEMU gone: the watch names it


PAGE = 4096


def copy_sparse(src: int, dest: Path, chunk: int = 1 << 20) -> tuple[int, int]:
    """Copy the file open as src to dest, leaving holes where src has holes
    or zero pages (guest RAM: mostly never touched); (size, bytes written)."""
    size = os.fstat(src).st_size
    zero = bytes(PAGE)
    written = 0
    with open(dest, "wb") as out:
        pos = 0
        while pos < size:
            try:
                pos = os.lseek(src, pos, os.SEEK_DATA)
            except OSError:  # ENXIO: only a hole is left
                break
            end = os.lseek(src, pos, os.SEEK_HOLE)
            while pos < end:
                data = memoryview(os.pread(src, min(chunk, end - pos), pos))
                for off in range(0, len(data), PAGE):
                    page = data[off:off + PAGE]
                    if page != zero[:len(page)]:
                        out.seek(pos + off)
                        out.write(page)
                        written += len(page)
                pos += len(data)
        out.truncate(size)
    return size, written


def for_vm(vm: VM, kernel_sha: str) -> Snapshot:
    doc = [FORMAT, kernel_sha, vm.shape(), _qemu_identity()]
    return Snapshot(hashlib.sha256(json.dumps(doc).encode()).hexdigest()[:32])


def _wait_migration(vm: VM, timeout: float, what: str) -> dict:
    """query-migrate until the migration (out, or in from -incoming) ends."""
    deadline = time.monotonic() + timeout
    while True:
        if not vm.alive():
            raise SnapshotError(f"QEMU exited while {what}: {vm.qemu_log_tail(2)}")
        try:
            status = vm.qmp.cmd("query-migrate")
        except (QMPError, OSError) as e:
            raise SnapshotError(f"QEMU did not answer while {what}: {e}") from None
        if status.get("status") in ("completed", "failed", "cancelled"):
            return status
        if time.monotonic() > deadline:
            raise SnapshotError(f"{what} took longer than {timeout:.0f}s")
        time.sleep(0.005)


def wait_restored(vm: VM, timeout: float = RESTORE_TIMEOUT) -> None:
    """Wait until QEMU has loaded the state it was started with, then run the
    guest (it was saved stopped, so QEMU leaves it paused)."""
    status = _wait_migration(vm, timeout, "loading it")
    if status.get("status") != "completed":
        raise SnapshotError(f"QEMU could not load it: {vm.qemu_log_tail(2)}")
    try:
        vm.qmp.cmd("cont")
    except (QMPError, OSError) as e:
        raise SnapshotError(f"QEMU loaded it but did not run it: {e}") from None


def prune(keep_bytes: int = MAX_BYTES) -> list[Path]:
    """Remove the least recently used snapshots beyond keep_bytes; what went."""
    metas = sorted(directory().glob("*.json"), key=lambda p: p.stat().st_mtime, reverse=True)
    total, gone = 0, []
    for m in metas:
        snap = Snapshot(m.stem)
        total += sum(p.stat().st_blocks * 512 for p in (snap.state, snap.ram) if p.exists())
        if total > keep_bytes:
            snap.discard()
            gone.append(snap.state)
    return gone
