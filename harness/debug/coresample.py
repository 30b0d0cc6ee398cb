# SPDX-License-Identifier: GPL-2.0
"""Every vCPU of a vmcore as one kstall sample, in the format the gdb script
writes from a live guest (gdbscripts/kstall_gdb.py, kstall-sample): the
registers from the core's NT_PRSTATUS notes (the architecture table's
`prstatus_registers`), the kernel memory through the kernel mappings kstall
added to the core (harness/debug/corekernel.py), walked by the same
unwinder, and who waits for whom read by the same kernel_waits reads. So
`kstall analyze` reads a hang again from its core as from its samples."""
from __future__ import annotations

import struct
from pathlib import Path

from harness.analysis import kernel_waits, task_waits, unwind
from harness.analysis.kallsyms import Kallsyms
from harness.base.arch import Arch
from harness.debug.corekernel import PT_LOAD, Core, cpu_notes, order_of

PR_REG_AT = 112  # elf_prstatus: pr_info, pr_cursig, pr_sigpend/hold, 4 pids, 4 timevals, then pr_reg
STACK_BYTES = 16384


def _prstatus_registers(notes: bytes, a: Arch) -> list[dict[str, int]]:
    names, order = a.table["prstatus_registers"], order_of(a)
    return [dict(zip(names, struct.unpack_from(f"{order}{len(names)}Q", notes, desc + PR_REG_AT)))
            for desc, size in cpu_notes(notes, order) if size >= PR_REG_AT + 8 * len(names)]


def sample(path: Path, a: Arch, syms: Kallsyms | None, layout: dict | None) -> dict:
    """{"cpus": [...], "waits": {...}, "source": "vmcore"} of the core at path."""
    core = Core(path)
    try:
        # the kernel's mappings kstall added (corekernel.complete), not QEMU's physical
        # ones, which QEMU writes at virtual address 0
        low = a.table["pagetable"].get("kernel_from", 0xffff000000000000)
        core.map_virtual([s for s in core.segments if s.type == PT_LOAD and s.vaddr >= low and
                          (s.vaddr or not s.paddr)])
        cpus = []
        for n, all_regs in enumerate(_prstatus_registers(core.notes(), a)):
            regs = {r: all_regs.get(r, 0) for r in a.registers}
            cpu = {"cpu": n, "thread": n + 1, "state": "stopped", "arch": a.name,
                   "regs": {k: f"{v:#x}" for k, v in regs.items()}}
            cpus.append(cpu | unwind.walk_cpu(core.read_virtual, regs, a, syms, STACK_BYTES))
        waits = kernel_waits.read(core.read_virtual, layout, len(cpus)) if layout else {}
        # who holds what the sleeping tasks wait for, from the core as from the live guest
        tasks = task_waits.read(core.read_virtual, layout, len(cpus), syms) if layout else {}
        return {"cpus": cpus, "waits": waits, "task_waits": tasks, "source": "vmcore"}
    finally:
        core.close()
