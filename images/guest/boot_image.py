# SPDX-License-Identifier: GPL-2.0
"""verify --boot-image: boot a disk image's own initrd, init and userspace.

The image is never written. kstall keeps one qcow2 layer per image and guest
build, backed by the image, into which libguestfs put the agent
(/opt/kstall/init), the reproducers (/opt/kstall/bin) and a systemd unit
(images/kstall-agent.service); each run boots a throwaway overlay of that
layer, removed afterwards. The kernel command line is the one the image's
boot entry gives (root=...), with kstall's own (nokaslr, console, kstall.*).
"""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from harness.base import arch as arches
from harness.base import leftovers, paths
from images.kernels import appliance
from images.kernels.kernel import Kernel, Progress, SpecError

UNIT = paths.data_file("images", "kstall-agent.service")
# arguments of the image's boot entry that kstall sets itself
_DROP = re.compile(r"^(console|earlyprintk|quiet|splash|kstall\.\w+|panic|nokaslr|BOOT_IMAGE)(=|$)")


@dataclass
class BootDisk:
    overlay: Path
    initrd: Path
    cmdline: str
    workdir: Path

    def qemu_args(self) -> list[str]:
        return ["-drive", f"file={self.overlay},format=qcow2,if=virtio,discard=unmap"]

    def remove(self) -> None:
        shutil.rmtree(self.workdir, ignore_errors=True)


def boot_args(kernel: Kernel) -> str:
    args = [a for a in kernel.origin.get("boot_args", "").split() if not _DROP.match(a)]
    if not any(a.startswith("root=") for a in args):
        uuid = kernel.origin.get("root_uuid")
        root = f"UUID={uuid}" if uuid else re.sub(r"^/dev/sd", "/dev/vd", kernel.origin.get("root", "/dev/vda1"))
        args = [f"root={root}", "rw"] + args
    return " ".join(args)


def _qemu_img(*args: str) -> None:
    p = subprocess.run(["qemu-img", *args], capture_output=True, text=True, timeout=120)
    if p.returncode != 0:
        raise SpecError(f"qemu-img {' '.join(args)}: {p.stderr.strip()[-300:]}")


def _guest_key(guest: Path) -> str:
    h = hashlib.sha256(UNIT.read_bytes())
    for p in sorted(guest.iterdir()):
        if p.is_file():
            h.update(p.name.encode() + p.read_bytes())
    return h.hexdigest()[:16]


def layer_file(identity: str, src: Path, arch: str) -> Path:
    """Keyed by the image's content, its path (the layer names it as its
    backing file) and arch's guest binaries."""
    where = hashlib.sha256(str(src).encode()).hexdigest()[:8]
    name = f"{identity[:20]}-layer-{where}-{_guest_key(paths.guest_dir(arch))}.qcow2"
    return paths.cache_dir() / "kernels" / "image" / name


def make_layer(src: Path, fmt: str, identity: str, progress: Progress | None,
               extract: tuple[str, Path] | None = None, arch: str = arches.DEFAULT) -> dict:
    """The cached layer over src with arch's agent installed. With extract
    (RELEASE, DEST), the kernel is read through the layer in the same
    libguestfs launch (a first --boot-image pays for one launch, not two)."""
    layer = layer_file(identity, src, arch)
    part = layer.with_name(f".{layer.name}.{os.getpid()}.part")
    try:
        _qemu_img("create", "-q", "-f", "qcow2", "-F", fmt, "-b", str(src), str(part))
        if progress:
            progress("putting the agent and the reproducers into an overlay of the image (libguestfs)")
        with tempfile.NamedTemporaryFile("w", suffix=".service") as unit:
            unit.write(UNIT.read_text())
            unit.flush()
            args = ["extract", str(part), "qcow2", extract[0], str(extract[1])] if extract else ["install", str(part)]
            info = appliance.run_child([*args, str(paths.guest_dir(arch)), unit.name], progress)
        part.replace(layer)
        return info
    finally:
        part.unlink(missing_ok=True)


def prepare(kernel: Kernel, progress: Progress | None) -> BootDisk:
    origin = kernel.origin
    if "image" not in origin:
        raise SpecError("--boot-image boots a disk image: use an image:PATH kernel")
    if not origin.get("initrd") or not Path(origin["initrd"]).is_file():
        raise SpecError(f"--boot-image: the image has no initrd for {kernel.release}")
    if origin.get("init") != "systemd":
        raise SpecError("--boot-image needs an image that boots with systemd")
    layer = layer_file(origin["identity"], Path(origin["image"]), kernel.arch)
    if not layer.is_file():
        make_layer(Path(origin["image"]), origin["format"], origin["identity"], progress, arch=kernel.arch)
    work = Path(tempfile.mkdtemp(prefix="kstall-boot-image-"))
    leftovers.mark(work)  # a killed kstall's is swept by the next
    try:
        overlay = work / "run.qcow2"
        _qemu_img("create", "-q", "-f", "qcow2", "-F", "qcow2", "-b", str(layer), str(overlay))
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return BootDisk(overlay, Path(origin["initrd"]), boot_args(kernel), work)
