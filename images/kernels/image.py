# SPDX-License-Identifier: GPL-2.0
"""image:PATH[#RELEASE] kernels: the kernel a VM or cloud disk image boots.

libguestfs opens the image read-only (images/kernels/guestfs_child.py, in a child
process kstall can bound and kill) and finds the kernel: RELEASE when given,
else the entry grub boots (grub.cfg's default, grubenv's saved_entry, BLS
entries), else the newest in /boot. It copies that kernel, its config, its
initrd (for --boot-image) and the modules the guest needs. Whatever
libguestfs can read works: qcow2 or raw, GPT/MBR, LVM, ext4, XFS, btrfs.

The result is cached by the image's content identity (SHA-256 of every file
in its backing chain, remembered per file by device, inode, size and change
times), so a second verify of an unchanged image does not start libguestfs.
"""
from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path
from typing import Callable

from harness.base import arch, paths, untrusted
from images.kernels import appliance, cached
from images.kernels.kernel import Kernel, Progress, SpecError, image_arch, sha256_file
from images.kernels.packages import upstream_of

# (image, its format, its identity, progress, (release, where to extract)) -> what the child read;
# images/guest/boot_image.py make_layer
LayerMaker = Callable[[Path, str, str, Progress | None, tuple[str, Path]], dict]

def image_chain(path: Path, trust_backing: bool = False) -> tuple[str, list[Path]]:
    """(format, the image and its backing files) from qemu-img. A backing
    file outside the image's directory is refused unless trusted: the image
    names it, and kstall would hash it and hand it to libguestfs and QEMU."""
    try:
        p = subprocess.run(["qemu-img", "info", "--output=json", "--backing-chain", str(path)],
                           capture_output=True, text=True, timeout=60)
    except FileNotFoundError:
        raise SpecError(f"qemu-img not found: {paths.install_hint('qemu-utils')}") from None
    if p.returncode != 0:
        raise SpecError(f"{path}: not a disk image qemu-img can read: {p.stderr.strip()[-300:]}")
    chain = json.loads(p.stdout)
    fmt = chain[0]["format"]
    if fmt not in ("qcow2", "raw"):
        raise SpecError(f"{path}: a {fmt} image; image: reads qcow2 and raw")
    files = [Path(c["filename"]) for c in chain]
    for f in files[1:]:
        if not trust_backing and not f.resolve().is_relative_to(path.parent):
            raise SpecError(f"{path}: its backing file {f} is outside the image's directory {path.parent}; "
                            "pass --trust-backing-files if the image and what it names are yours")
    return fmt, files


def identity(files: list[Path]) -> str:
    """SHA-256 over the chain's contents; each file hashed once per change."""
    memo_path = paths.cache_dir() / "kernels" / "image" / "identity.json"
    try:
        memo = json.loads(memo_path.read_text())
    except (OSError, ValueError):
        memo = {}
    digests = []
    for f in files:
        st = f.stat()
        key = f"{st.st_dev}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}"
        entry = memo.get(str(f))
        if not entry or entry["stat"] != key:
            entry = memo[str(f)] = {"stat": key, "sha256": sha256_file(f)}
        digests.append(entry["sha256"])
    paths.write_atomic(memo_path, json.dumps(memo, indent=1))
    return hashlib.sha256("\n".join(digests).encode()).hexdigest()


def resolve(spec: str, text: str, fetch: bool = True, progress: Progress | None = None,
            boot_layer: LayerMaker | None = None, trust_backing: bool = False) -> Kernel:
    """boot_layer: --boot-image will follow; when the image has to be read,
    it makes the agent's layer and reads the kernel in one libguestfs launch. trust_backing:
    the image may name backing files outside its own directory."""
    path_text, _, wanted = text.partition("#")
    path = Path(path_text).expanduser().resolve()
    if not path.is_file():
        raise SpecError(f"{spec}: no such file {path}")
    if wanted and untrusted.release(wanted) is None:  # it names the cache directory
        raise SpecError(f"{spec}: {wanted!r} is not a kernel release (such as 6.16.12+deb13-{arch.get().debian})")
    fmt, chain = image_chain(path, trust_backing)
    ident = identity(chain)
    d = paths.cache_dir() / "kernels" / "image" / f"{ident[:20]}-{wanted or 'default'}"
    if not (d / cached.META).exists() and not fetch:
        raise SpecError(f"{spec} has not been read yet")
    kernel = cached.kernel_once(d, spec, lambda: _extract(spec, path, fmt, wanted, ident, d, progress, boot_layer))
    kernel.origin["image"] = str(path)  # the same content may have moved since it was read
    if progress:
        progress(f"image: kernel {kernel.release}: {kernel.origin.get('why')}")
    return kernel


def _extract(spec: str, path: Path, fmt: str, wanted: str, ident: str, d: Path, progress: Progress | None,
             boot_layer: LayerMaker | None) -> Kernel:
    if progress:
        progress(f"reading {path.name} with libguestfs (read-only)")
    if boot_layer:
        info = boot_layer(path, fmt, ident, progress, (wanted, d))
    else:
        info = appliance.run_child(["extract", str(path), fmt, wanted, str(d)], progress)
    vmlinuz = d / "vmlinuz"
    kernel = Kernel(spec=spec, canonical=f"image:{path.name}#{info['release']}", vmlinuz=vmlinuz,
                    sha256=sha256_file(vmlinuz), arch=image_arch(vmlinuz), release=info["release"],
                    upstream=upstream_of(info["release"]),
                    config=d / "config" if info.get("config") else None, modules=info["modules"],
                    modules_dir=d / "modules" if any(info["modules"].values()) else None,
                    origin={"image": str(path), "format": fmt, "identity": ident, "why": info["why"],
                            "os": info["os"], "boot_args": info["args"], "root": info["root"],
                            "root_uuid": info["root_uuid"], "init": info["init"],
                            "initrd": str(d / "initrd") if info.get("initrd") else None,
                            "label": f"image-{path.stem}-{info['release']}"})
    return kernel
