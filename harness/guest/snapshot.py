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
(repro/agent/).

Guest RAM is not in the migration stream (x-ignore-shared): a guest that may
be saved keeps its RAM in a memfd (VMConfig.shared_ram), which is copied to
KEY.ram, sparse, beside the stream of device state (KEY.vmstate). A restored
guest maps KEY.ram private, so a run reads and copies only the pages it
touches.

A snapshot is keyed by the kernel's sha256 and by VM.shape(), the QEMU command
line without the run's private paths, which names the initramfs by its content
hash; and by the QEMU binary, whose migration format may change between
versions. It lives in the cache as a set of files, KEY.json naming the other
three (the device state, the RAM, the boot's console) by a name unique to
that save: a save writes its files whole, then replaces KEY.json in one
rename, then removes the set it replaced, so a reader never mixes two saves
(a reader that still has the old files open keeps them). One that does not
load is removed.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from harness.base import kernel_cache, paths
from harness.base.kernel_cache import KernelKey
from harness.guest.qmp import QMPError
from harness.guest import machine
from harness.guest.vm import VM

# bump when what the guest does before its gate changes in a way the key does not see
FORMAT = 2
SAVE_TIMEOUT = 60.0
RESTORE_TIMEOUT = 30.0
# the cache keeps the most recently used snapshots up to this size
MAX_BYTES = int(float(os.environ.get("KSTALL_SNAPSHOT_MAX_GB", "8")) * (1 << 30))
# a disk image's identity: its size and this much of its head (ext4's superblock, with its UUID)
HEAD_BYTES = 4096


class SnapshotError(RuntimeError):
    pass


def directory() -> Path:
    return kernel_cache.directory(kernel_cache.SNAPSHOTS)


def _qemu_identity(arch: str) -> list:
    qemu = machine.qemu(arch)
    exe = shutil.which(qemu) or qemu
    try:
        st = os.stat(exe)
    except OSError:
        return [exe]
    return [os.path.realpath(exe), st.st_size, int(st.st_mtime)]


@dataclass
class Snapshot:
    key: str
    files: dict = field(default_factory=dict)  # the saved set, as its KEY.json names it

    def _file(self, kind: str) -> Path:
        return directory() / self.files.get(kind, f"{self.key}.{kind}")

    @property
    def state(self) -> Path:
        return self._file("vmstate")

    @property
    def ram(self) -> Path:
        return self._file("ram")

    @property
    def console(self) -> Path:
        """The boot's console up to the gate, which a restored guest does not print again."""
        return self._file("console")

    @property
    def meta_path(self) -> Path:
        return directory() / f"{self.key}.json"

    def start_console_log(self, log: Path) -> None:
        """Begin a restored run's console log (QEMU appends to it) with the boot."""
        log.parent.mkdir(parents=True, exist_ok=True)
        try:
            shutil.copyfile(self.console, log)
        except OSError:
            pass

    def meta(self, touch: bool = True) -> dict | None:
        """What was recorded when it was saved (and the set it names, for
        state/ram/console); None when there is no whole snapshot. touch: mark
        it used (pruned last)."""
        try:
            doc = json.loads(self.meta_path.read_text())
        except (OSError, ValueError):
            return None
        self.files = doc.get("files", {})
        try:
            if self.state.stat().st_size != doc.get("bytes") or self.ram.stat().st_size != doc.get("ram_size"):
                return None
            if touch:
                os.utime(self.meta_path)
        except OSError:  # another kstall replaced or pruned it meanwhile
            return None
        return doc

    def discard(self) -> None:
        """Remove it: KEY.json first (no reader finds it), then the set it named."""
        self.meta(touch=False)
        self.meta_path.unlink(missing_ok=True)
        for p in (self.state, self.ram, self.console):
            p.unlink(missing_ok=True)

    def save(self, vm: VM, meta: dict) -> dict:
        """Save the running guest (stopped for it, then resumed); what was
        recorded. Raises SnapshotError; the guest runs on either way."""
        if vm.ram_fd is None:
            raise SnapshotError("the guest's RAM is not shared with kstall (VMConfig.shared_ram)")
        directory().mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{self.key}.", suffix=".vmstate", dir=directory())
        save_id = Path(tmp).name.split(".")[2]  # mkstemp's unique part: this save's files
        new = {kind: f"{self.key}.{save_id}.{kind}" for kind in ("vmstate", "ram", "console")}
        written: list[Path] = []
        t0 = time.monotonic()
        try:
            self._migrate(vm, fd)
            size = os.fstat(fd).st_size
            ram_size, ram_data = copy_sparse(vm.ram_fd, directory() / new["ram"])
            written.append(directory() / new["ram"])
            shutil.copyfile(vm.cfg.log_dir / "console.log", directory() / new["console"])
            os.chmod(directory() / new["console"], 0o600)
            written.append(directory() / new["console"])
            os.replace(tmp, directory() / new["vmstate"])
            written.append(directory() / new["vmstate"])
            doc = meta | {"key": self.key, "files": new, "bytes": size, "ram_size": ram_size, "ram_bytes": ram_data,
                          "save_s": round(time.monotonic() - t0, 2),
                          "saved": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
            old = Snapshot(self.key)
            old_meta = old.meta(touch=False)
            paths.write_atomic(self.meta_path, json.dumps(doc, indent=1) + "\n")  # the set, replaced at once
            written.clear()
            if old_meta is not None and old.files != new:
                for f in (old.state, old.ram, old.console):
                    f.unlink(missing_ok=True)
            self.files = new
            return doc
        except (QMPError, OSError) as e:
            raise SnapshotError(str(e)) from None
        finally:
            os.close(fd)
            Path(tmp).unlink(missing_ok=True)
            for f in written:  # a save that failed leaves no part of itself
                f.unlink(missing_ok=True)
            try:
                vm.qmp.cmd("cont")
            except (QMPError, OSError):
                pass  # QEMU gone: the watch names it

    @staticmethod
    def _migrate(vm: VM, fd: int) -> None:
        """The guest's devices (its RAM stays in the memfd) into fd, the guest stopped."""
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


PAGE = 4096


def copy_sparse(src: int, dest: Path, chunk: int = 1 << 20) -> tuple[int, int]:
    """Copy the file open as src to dest, leaving holes where src has holes
    or zero pages (guest RAM: mostly never touched); (size, bytes written)."""
    size = os.fstat(src).st_size
    zero = bytes(PAGE)
    written = 0
    # guest RAM (keys, whatever the guest held): its owner's only, as the device state is
    with open(dest, "wb", opener=lambda p, flags: os.open(p, flags, 0o600)) as out:
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


def for_vm(vm: VM, kernel: KernelKey) -> Snapshot:
    doc = [FORMAT, kernel.name, vm.shape(), _qemu_identity(vm.cfg.arch), _disk_identities(vm.cfg.disks)]
    return Snapshot(hashlib.sha256(json.dumps(doc).encode()).hexdigest()[:32])


def _disk_identities(disks: tuple) -> list:
    """Each disk image as it is now: a snapshot's guest has the image it was
    saved with mounted, and an image made again at the same path (a module
    tree read afresh) must not be restored under it. Its size and its first
    HEAD_BYTES say which: an ext4 image's superblock (at 1024) holds the UUID
    mkfs draws anew for each image. Not its times, which a use touches
    (module_tree: what prune keeps), nor its inode, which a cache copied to
    another runner (a CI's) changes though the image is the same."""
    out = []
    for d in disks:
        try:
            with open(d.path, "rb") as f:
                head = hashlib.sha256(f.read(HEAD_BYTES)).hexdigest()[:16]
                out.append([str(d.path), os.fstat(f.fileno()).st_size, head])
        except OSError:
            out.append([str(d.path), None])
    return out


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
    """Remove the least recently used snapshots beyond keep_bytes; what went.
    Another kstall may prune or replace the same files meanwhile: a file
    already gone is no error."""
    metas = []
    for m in directory().glob("*.json"):
        try:
            metas.append((m.stat().st_mtime, m))
        except FileNotFoundError:
            continue
    total, gone = 0, []
    for _, m in sorted(metas, reverse=True):
        snap = Snapshot(m.stem)
        if snap.meta(touch=False) is None:
            continue
        for p in (snap.state, snap.ram):
            try:
                total += p.stat().st_blocks * 512
            except FileNotFoundError:
                pass
        if total > keep_bytes:
            snap.discard()
            gone.append(snap.state)
    return gone
