# SPDX-License-Identifier: GPL-2.0
"""Virtio disks a guest gets beside its initramfs: each found in the guest by
its serial (/sys/block/*/serial), never by the order it probed in. A disk on
the SCSI bus (a virtio-scsi controller of its own) is there for the device
nodes a SCSI disk gives, /dev/sdX and /dev/sgN, not to be mounted by serial."""
from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from harness.base import paths
from images.kernels import cached
from images.kernels.kernel import SpecError

MKFS_TIMEOUT = 600


@dataclass(frozen=True)
class Disk:
    path: Path
    serial: str
    readonly: bool = False
    # the guest writes to a temporary overlay QEMU drops when it exits: the
    # image stays as it was, for the next guest (and for a snapshot's)
    throwaway: bool = False
    bus: str = "virtio-blk"  # or "scsi"

    def qemu_args(self, index: int, transport: str = "pci") -> list[str]:
        mode = "readonly=on" if self.readonly else ("snapshot=on" if self.throwaway else "readonly=off")
        drive = ["-drive", f"file={self.path},if=none,id=kdisk{index},format=raw,{mode}"]
        if self.bus == "scsi":
            return drive + ["-device", f"virtio-scsi-{transport},id=kscsi{index}",
                            "-device", f"scsi-hd,bus=kscsi{index}.0,drive=kdisk{index},serial={self.serial}"]
        return drive + ["-device", f"virtio-blk-{transport},drive=kdisk{index},serial={self.serial}"]


def qemu_args(disks: tuple[Disk, ...], transport: str = "pci") -> list[str]:
    """transport: the machine's virtio bus (arches.toml `virtio`: pci, or s390x's ccw)."""
    return [a for i, d in enumerate(disks) for a in d.qemu_args(i, transport)]


def empty_ext4(size_mb: int, label: str, progress: Callable[[str], None] | None = None) -> Path:
    """An empty ext4 image of size_mb (sparse), made once and shared by every
    guest that writes to a throwaway overlay of it."""
    out = paths.cache_dir() / "disks" / f"{label}-{size_mb}M.ext4"
    if out.exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    with cached.locked(out):
        if out.exists():
            return out
        if progress:
            progress(f"making an empty {size_mb} MB ext4 disk for guests to work on ({out})")
        part = out.with_name(out.name + ".part")
        # inode tables and journal written now: the guest's kernel has no lazy init to do
        try:
            p = subprocess.run(["mkfs.ext4", "-q", "-F", "-L", label, "-E",
                                "lazy_itable_init=0,lazy_journal_init=0,root_owner=0:0", str(part), f"{size_mb}M"],
                               capture_output=True, text=True, timeout=MKFS_TIMEOUT)
        except FileNotFoundError:
            raise SpecError(f"mkfs.ext4 not found: {paths.install_hint('e2fsprogs')}") from None
        if p.returncode != 0:
            part.unlink(missing_ok=True)
            raise SpecError(f"mkfs.ext4 failed: {p.stderr.strip()[-300:]}")
        part.rename(out)
    return out
