# SPDX-License-Identifier: GPL-2.0
"""The architectures kstall runs guests of, from harness/base/arches.toml:
the one place an architecture's facts live (names, QEMU, GDB, registers,
the interrupt-state bit, the unwinder, the NMI source, the image format).
Code asks the Arch of a kernel or a dump; it never tests for one by name."""
from __future__ import annotations

import platform
import tomllib
from dataclasses import dataclass, field
from functools import cache
from typing import Literal

from harness.base import paths

TABLE_FILE = paths.data_file("harness", "base", "arches.toml")
KERNEL_HALF = 0xFF00000000000000  # where the kernels of most 64-bit architectures live


@dataclass(frozen=True)
class RegisterBit:
    register: str
    mask: int
    equals: int | None = None  # None: any bit of mask set

    def holds(self, regs: dict[str, str | int]) -> bool | None:
        """Whether the bit holds in regs (hex strings or ints); None when the register is missing."""
        v = regs.get(self.register)
        if v is None:
            return None
        value = (int(v, 16) if isinstance(v, str) else v) & self.mask
        return value == self.equals if self.equals is not None else bool(value)


@dataclass(frozen=True)
class Arch:
    name: str               # uname -m: x86_64
    debian: str             # amd64
    kcidb: str
    qemu: str
    qemu_package: str
    gdb: str
    gdb_arch: str
    image: str
    unwinder: str
    nmi: str
    snapshot: bool
    default_machine: str
    registers: tuple[str, ...]
    pc: str
    sp: str
    fp: str
    user_bit: RegisterBit
    irqs_on_bit: RegisterBit
    qmp_registers: dict[str, str] = field(default_factory=dict, hash=False, compare=False)
    table: dict = field(default_factory=dict, hash=False, compare=False, repr=False)  # the whole row

    def in_user_mode(self, regs: dict) -> bool:
        """By its mode register; in a dump without one (QEMU's monitor prints
        no riscv64 `priv`), by a pc below the kernel's addresses where the
        kernel has the upper half of them."""
        held = self.user_bit.holds(regs)
        if held is None and self.kernel_from and (pc := regs.get(self.pc)) is not None:
            return (int(pc, 16) if isinstance(pc, str) else pc) < self.kernel_from
        return bool(held)

    def irqs_off(self, regs: dict) -> bool:
        """Interrupts masked; a dump without the flags register says on."""
        on = self.irqs_on_bit.holds(regs)
        return on is False

    def pc_of(self, regs: dict) -> str:
        return str(regs.get(self.pc, "0x0"))

    @property
    def virtio(self) -> str:
        """The bus its machine's virtio devices sit on: "pci" (virtio-serial-pci), or s390x's "ccw"."""
        return self.table.get("virtio", "pci")

    @property
    def byteorder(self) -> Literal["little", "big"]:
        """How its memory holds a word: "little", or "big" (s390x)."""
        return "big" if self.table.get("byteorder") == "big" else "little"

    @property
    def monitor_byteorder(self) -> Literal["little", "big"]:
        """How QEMU's monitor prints its words (HMP `x`): in its target's order,
        which for ppc64 is big-endian whichever way the guest runs (the table's
        `monitor_byteorder`), else the guest's."""
        return "big" if self.table.get("monitor_byteorder", self.byteorder) == "big" else "little"

    @property
    def kernel_from(self) -> int:
        """The lowest address a pointer into its kernel has: the upper half's
        (the table's `pagetable.kernel_from` where lower: ppc64's linear map at
        0xc000..., and s390x's 0, whose user space is another address space)."""
        return int(self.table.get("pagetable", {}).get("kernel_from", KERNEL_HALF))

    @property
    def flavour(self) -> str:
        """Debian's kernel flavour for it (powerpc64le on ppc64el): what its kernel packages' names end with."""
        return self.table.get("debian_flavour", self.debian)

    @property
    def triplet(self) -> str:
        """GNU's name of its target (aarch64-linux-gnu): its multiarch directories."""
        return self.table["triplet"]

    def compiler(self) -> str:
        """The C compiler that builds its guest programs on this host: the
        host's own gcc for its own architecture, else the cross compiler."""
        return "gcc" if platform.machine() == self.name else self.table["cross_cc"]

    def unbuildable(self) -> list[str]:
        """The guest programs this host cannot build for it (the table's
        `unbuildable`, with its reason in `why`)."""
        return list(self.table.get("unbuildable", {}).get("programs", []))

    def is_image(self, head: bytes) -> bool:
        """Whether a kernel image's first bytes carry this architecture's header."""
        m = self.table["image_magic"]
        magic = bytes.fromhex(m["bytes"])
        return head[m["offset"]:m["offset"] + len(magic)] == magic

    @property
    def kbuild(self) -> dict:
        """arch (make's ARCH=), target (the image's make target), image (where it comes out)."""
        return self.table["kbuild"]

    @property
    def syscall(self) -> dict:
        """nr, args: the registers of a thread's system call; futex: futex(2)'s number;
        sigframe_siginfo: the siginfo's offset in the kernel's signal frame."""
        return self.table["syscall"]


def _bit(doc: dict) -> RegisterBit:
    return RegisterBit(doc["register"], int(doc["mask"]), doc.get("equals"))


DEFAULTS = "defaults"  # the table's [defaults]: what every row has unless it says otherwise


@cache
def _table() -> dict:
    """Each row, over the table's [defaults] (a row's own key wins)."""
    with open(TABLE_FILE, "rb") as f:
        doc = tomllib.load(f)
    base = doc.pop(DEFAULTS, {})
    return {name: base | row for name, row in doc.items()}


def names() -> list[str]:
    return list(_table())


# dumps and kernels recorded before they named their architecture are of the first one
DEFAULT = names()[0]


@cache
def get(name: str = DEFAULT) -> Arch:
    try:
        d = _table()[name]
    except KeyError:
        raise KeyError(f"unknown architecture {name!r}: kstall knows {', '.join(names())}") from None
    return Arch(name=name, debian=d["debian"], kcidb=d["kcidb"], qemu=d["qemu"], qemu_package=d["qemu_package"],
                gdb=d["gdb"], gdb_arch=d["gdb_arch"], image=d["image"], unwinder=d["unwinder"], nmi=d["nmi"],
                snapshot=bool(d["snapshot"]), default_machine=d["default_machine"],
                registers=tuple(d["registers"]), pc=d["pc"], sp=d["sp"],
                fp=d["fp"], user_bit=_bit(d["user_mode"]), irqs_on_bit=_bit(d["irqs_on"]),
                qmp_registers=dict(d.get("qmp_registers", {})), table=d)


def host() -> Arch:
    """The host's own architecture (what KVM can run, what the libguestfs appliance boots)."""
    return get(platform.machine())


def syscall_name(function: str) -> str:
    """A system call's entry point by its plain name, whichever architecture's
    wrapper it is (the rows' `syscall_prefix`): __s390x_sys_ptrace is sys_ptrace."""
    for a in names():
        prefix = get(a).table.get("syscall_prefix", "sys_")
        if prefix != "sys_" and function.startswith(prefix):
            return "sys_" + function[len(prefix):]
    return function


def of_dump(cpu: dict) -> Arch:
    """The architecture a CPU dump (or a sample holding CPUs) was taken on."""
    return get(cpu.get("arch") or DEFAULT)


# how much of a kernel image its header may span: s390's marker is 64 KiB in
IMAGE_HEAD = 0x20000


def of_image(head: bytes) -> Arch | None:
    """The architecture a kernel image is for, from its first IMAGE_HEAD bytes; None when no header matches."""
    return next((get(n) for n in names() if get(n).is_image(head)), None)


def of_elf(head: bytes) -> str | None:
    """The architecture an ELF file is for (its e_machine), by name; None
    when it is not ELF, or an architecture kstall does not know (then its
    e_machine number, as text)."""
    if head[:4] != b"\x7fELF" or len(head) < 20:
        return None
    machine = int.from_bytes(head[18:20], "little" if head[5] == 1 else "big")
    return next((n for n in names() if get(n).table["elf_machine"] == machine or
                 get(n).table.get("compat", {}).get("elf_machine") == machine), f"ELF machine {machine}")


def with_compat(abi: str) -> Arch | None:
    """The architecture whose kernels run programs of another ABI (its table's compat: "386" on x86_64)."""
    return next((get(n) for n in names() if get(n).table.get("compat", {}).get("name") == abi), None)


def compat_of(abi: str) -> dict:
    """The compat table (arches.toml) of the architecture that runs programs of that ABI, or {}."""
    runs_it = with_compat(abi) if abi else None
    return runs_it.table["compat"] if runs_it else {}


def by_syzkaller(name: str) -> Arch | None:
    """The architecture syzkaller names so (the rows' `syzkaller`: ppc64le is
    Debian's ppc64el), or the one that runs that ABI's programs (386: x86_64)."""
    return next((get(n) for n in names() if get(n).table.get("syzkaller") == name), None) or with_compat(name)


def named(name: str) -> Arch:
    """An architecture by kstall's name (uname -m) or Debian's: aarch64 or arm64."""
    return get(name) if name in names() else by_debian(name)


def by_debian(name: str) -> Arch:
    """An architecture by Debian's name for it (ppc64el) or its kernel flavour's (powerpc64le)."""
    for n in names():
        if name in (get(n).debian, get(n).flavour):
            return get(n)
    raise KeyError(f"no architecture kstall knows is Debian's {name!r}")


def by_gdb(gdb_arch: str) -> Arch:
    for n in names():
        if get(n).gdb_arch == gdb_arch:
            return get(n)
    raise KeyError(f"no architecture kstall knows is GDB's {gdb_arch!r}")


def make_vars(name: str) -> str:
    """The Makefile's view of an architecture (`make guest GUEST_ARCH=...`): its
    compiler on this host, GNU triplet and BPF target, as make assignments."""
    a = get(name)
    skip = ",".join(a.unbuildable())
    return (f"GUEST_CC={a.compiler()} TRIPLET={a.triplet} BPF_TARGET={a.table['bpf_target']} "
            f"BPF_ENDIAN={'bpfeb' if a.byteorder == 'big' else 'bpfel'}" + (f" GUEST_SKIP={skip}" if skip else "")
            + (f" LINK_SHIM={a.table['link_shim']}" if "link_shim" in a.table else ""))


if __name__ == "__main__":  # the Makefile: python3 -m harness.base.arch make-vars ARCH
    import sys
    if len(sys.argv) != 3 or sys.argv[1] != "make-vars":
        sys.exit("usage: python3 -m harness.base.arch make-vars ARCH")
    print(make_vars(sys.argv[2]))
