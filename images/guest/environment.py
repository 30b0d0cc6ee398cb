# SPDX-License-Identifier: GPL-2.0
"""What a guest environment (harness/base/guest_env.py) puts into a guest:
its disks (the kernel's whole module tree, an empty work disk), the
modules that mount them, busybox (whose modprobe answers the kernel's
request_module()), and the agent's steps as etc/kstall/env."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from harness.base import arch as arches
from harness.base.guest_env import GuestEnv
from images.guest import disks, programs, sysroot
from images.kernels import module_tree
from images.kernels.kernel import Kernel, SpecError

BOOT_FILE, ENV_FILE = "etc/kstall/env.boot", "etc/kstall/env"
BUSYBOX = "bin/busybox"
HOST_BUSYBOX = Path("/bin/busybox")


@dataclass(frozen=True)
class Prepared:
    files: dict[str, bytes] = field(default_factory=dict)   # initramfs path -> contents
    disks: tuple[disks.Disk, ...] = ()
    modules: tuple[Path, ...] = ()                          # loaded first, in order (mount_modules)


def busybox(arch: str, progress: Callable[[str], None] | None = None) -> Path:
    """A static busybox for arch's guests: the host's, or arch's Debian package's in kstall's sysroot."""
    path = HOST_BUSYBOX if arches.get(arch).compiler() == "gcc" else sysroot.ensure(arch, progress) / "bin" / "busybox"
    if not path.is_file():
        raise SpecError(f"no static busybox for {arch} guests at {path}: install busybox-static")
    return path


def env_text(env: GuestEnv, checks: list[str]) -> str:
    """The agent's steps at the GO, then the paths it says are there or not at the end."""
    return "".join(f"{s}\n" for s in env.steps) + "".join(f"check {p}\n" for p in checks)


def with_preload(p: Prepared, modules: list[str]) -> Prepared:
    """p with these modules loaded at the GO, before the program runs: what
    a kernel with them built in (syzbot's) has there at its first call."""
    if not modules:
        return p
    steps = "".join(f"load {m}\n" for m in modules).encode()
    return Prepared(p.files | {ENV_FILE: steps + p.files[ENV_FILE]}, p.disks, p.modules)


def prepare(env: GuestEnv, kernel: Kernel, checks: list[str], progress: Callable[[str], None] | None = None,
            test_modules: tuple[Path, ...] = ()) -> Prepared:
    """Everything env's guest needs on this kernel (made once, then cached);
    test_modules: the ones built for the program's devices, in its module tree."""
    guest_disks = []
    mount: tuple[Path, ...] = ()
    for d in env.disks:
        if d.what == "modules":
            tree = module_tree.image(kernel, env.mount_modules, progress, test_modules)
            mount = tuple(tree.mount)
            guest_disks.append(disks.Disk(tree.image, d.serial, readonly=True))
        elif d.what == "work":
            guest_disks.append(disks.Disk(disks.empty_ext4(d.size_mb, d.serial, progress), d.serial, throwaway=True,
                                          bus=d.bus))
        else:
            raise SpecError(f"{env.name}'s environment names a disk kstall does not know: {d.what!r}")
    files = {BOOT_FILE: "".join(f"{s}\n" for s in env.boot_steps).encode(), ENV_FILE: env_text(env, checks).encode(),
             BUSYBOX: busybox(kernel.arch, progress).read_bytes()}
    for tool in env.host_tools:
        files |= programs.host_tool(Path(tool), kernel.arch)
    return Prepared(files, tuple(guest_disks), mount)
