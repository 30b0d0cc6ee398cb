# SPDX-License-Identifier: GPL-2.0
"""The machine a guest boots on, from harness/guest/machines.toml: the QEMU
binary, an accelerator's arguments, and per machine type the boot file, the
SMP layout, the console and the base kernel command line. The one table a
new accelerator or machine goes in."""
from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass
from pathlib import Path

from harness.base import paths
from images import pvh
from images.kernel import Kernel

ARCH = "x86_64"
with open(paths.data_file("harness", "guest", "machines.toml"), "rb") as _f:
    _TABLE = tomllib.load(_f)[ARCH]

QEMU = os.environ.get("KSTALL_QEMU", _TABLE["qemu"])


def accel_args(kind: str) -> list[str]:
    """QEMU's arguments for an accelerator ("tcg", "kvm")."""
    return list(_TABLE["accel"][kind])


@dataclass(frozen=True)
class Machine:
    name: str         # QEMU's -machine
    boot: str         # "pvh": the kernel's PVH ELF where it has one; "bzimage"
    smp: str          # QEMU's -smp, {cpus} filled in
    console: str      # the kernel's console device (QEMU's serial port)
    cmdline: tuple[str, ...]  # kernel command line every guest gets
    detectors: tuple[str, ...] = ()  # how the kernel's hang detectors are set

    def smp_arg(self, cpus: int) -> str:
        return self.smp.format(cpus=cpus)

    def kernel_cmdline(self, *extra: str) -> str:
        return " ".join([f"console={self.console}", *self.cmdline, *self.detectors, *(e for e in extra if e)])

    def boot_file(self, kernel: Kernel) -> Path:
        """QEMU's -kernel for kernel on this machine."""
        return pvh.boot_file(kernel.vmlinuz, kernel.sha256) if self.boot == "pvh" else kernel.vmlinuz


def get(name: str) -> Machine:
    m = _TABLE["machine"][name]
    return Machine(name, m["boot"], m["smp"], m["console"], tuple(m["cmdline"]), tuple(_TABLE.get("detectors", ())))


def for_kernel(kernel: Kernel) -> Machine:
    return get(kernel.machine())
