# SPDX-License-Identifier: GPL-2.0
"""The machine a guest boots on, from its architecture's table
(harness/base/arches.toml): the QEMU binary, an accelerator's arguments, and
per machine type the boot file, the SMP layout, the console and the base
kernel command line."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from harness.base import arch as arches
from images.guest import pvh
from images.kernels.kernel import Kernel


def qemu(arch: str = arches.DEFAULT) -> str:
    """The QEMU binary for arch's guests (KSTALL_QEMU overrides it)."""
    return os.environ.get("KSTALL_QEMU") or arches.get(arch).qemu


def accel_args(kind: str, arch: str = arches.DEFAULT) -> list[str]:
    """QEMU's arguments for an accelerator ("tcg", "tcg-single", "kvm")."""
    return list(arches.get(arch).table["accel"][kind])


@dataclass(frozen=True)
class Machine:
    name: str         # QEMU's -machine
    boot: str         # "pvh": the kernel's PVH ELF where it has one; "bzimage"
    smp: str          # QEMU's -smp, {cpus} filled in
    console: str      # the kernel's console device (QEMU's serial port)
    cmdline: tuple[str, ...]  # kernel command line every guest gets
    detectors: tuple[str, ...] = ()  # how the kernel's hang detectors are set
    arch: str = arches.DEFAULT
    options: str = ""  # QEMU's -machine properties after the name (pseries' x-vof=on)

    @property
    def qemu_arg(self) -> str:
        """QEMU's -machine argument."""
        return f"{self.name},{self.options}" if self.options else self.name

    def smp_arg(self, cpus: int) -> str:
        return self.smp.format(cpus=cpus)

    def kernel_cmdline(self, *extra: str) -> str:
        return " ".join([f"console={self.console}", *self.cmdline, *self.detectors, *(e for e in extra if e)])

    def boot_file(self, kernel: Kernel) -> Path:
        """QEMU's -kernel for kernel on this machine."""
        return pvh.boot_file(kernel.vmlinuz, kernel.key) if self.boot == "pvh" else kernel.vmlinuz


def get(name: str, arch: str = arches.DEFAULT) -> Machine:
    table = arches.get(arch).table
    m = table["machine"][name]
    return Machine(name, m["boot"], m["smp"], m["console"], tuple(m["cmdline"]), tuple(table.get("detectors", ())),
                   arch, m.get("options", ""))


def for_kernel(kernel: Kernel) -> Machine:
    return get(kernel.machine(), kernel.arch)
