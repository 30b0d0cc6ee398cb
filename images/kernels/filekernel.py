# SPDX-License-Identifier: GPL-2.0
"""file:PATH kernels: a bzImage the user built or copied, or an installed one.

A kernel tree's arch/x86/boot/bzImage finds the tree's .config and vmlinux.
An installed kernel, <root>/boot/vmlinuz-<release>, finds /boot/config-<release>
and the modules in <root>/lib/modules/<release> (read, never written: its
modules.dep is the one the system made), so `file:/boot/vmlinuz-$(uname -r)`
checks the machine's own kernel, modules and all.
"""
from __future__ import annotations

from pathlib import Path

from harness.base import paths
from images.kernels import modules
from images.kernels.kernel import Kernel, SpecError, image_arch, sha256_file


def bzimage_release(data: bytes) -> str | None:
    """The version string a bzImage's setup header points at (boot protocol
    2.00+: 'HdrS' at 0x202, kernel_version at 0x20e), up to the first space."""
    if len(data) < 0x210 or data[0x202:0x206] != b"HdrS":
        return None
    ptr = int.from_bytes(data[0x20E:0x210], "little")
    if not ptr:
        return None
    start = ptr + 0x200
    end = data.find(b"\0", start, start + 256)
    if end < 0:
        return None
    return data[start:end].decode(errors="replace").split(" ")[0] or None


def resolve(spec: str, path_text: str) -> Kernel:
    path = Path(path_text).expanduser().resolve()
    if not path.is_file():
        raise SpecError(f"{spec}: no such file {path}")
    with open(path, "rb") as f:
        head = f.read(65536)
    release = bzimage_release(head)
    config = next((c for c in (path.parent / ".config", path.parent / f"config-{release}",
                               path.parent.parent.parent.parent / ".config") if c.is_file()), None)
    vmlinux = next((p for p in (path.parent / "vmlinux", path.parent.parent.parent.parent / "vmlinux")
                    if p.is_file()), None)
    sha = sha256_file(path)
    kernel = Kernel(spec=spec, canonical=f"file:{path}", vmlinuz=path, sha256=sha,
                    release=release, upstream=release.split("-")[0].split("+")[0] if release else None,
                    config=config, vmlinux=vmlinux, origin={"path": str(path)}, arch=image_arch(path))
    tree = modules.Tree(path.parent.parent, release or "")
    if release and path.parent.name == "boot" and (tree.dir / "modules.dep").is_file():
        names = modules.wanted(modules.every_need(), kernel.config_value if config else None, tree.builtin())
        if names:
            kernel.modules_dir = paths.cache_dir() / "kernels" / "file" / sha[:20]
            kernel.modules = modules.install(tree, names, kernel.modules_dir)
            kernel.origin["modules_from"] = str(tree.dir)
    return kernel
