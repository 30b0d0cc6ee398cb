# SPDX-License-Identifier: GPL-2.0
"""The stack walkers, by the name an architecture's table gives
(harness/base/arches.toml `unwinder`). Each reads a stack's raw bytes and
the code before each address the dumper copied; a new architecture whose
stacks are walked another way adds its module here."""
from __future__ import annotations

from types import ModuleType
from typing import Callable

from harness.analysis import backchain, framewalk, kernel_waits, stackwalk
from harness.analysis.kallsyms import Kallsyms
from harness.base.arch import Arch

# a walker module has: CODE_BEFORE, regions(), candidates(), frames()
UNWINDERS: dict[str, ModuleType] = {"call-sites": stackwalk, "frame-records": framewalk, "back-chain": backchain}


def for_arch(a: Arch) -> ModuleType:
    try:
        return UNWINDERS[a.unwinder]
    except KeyError:
        raise KeyError(f"{a.name}: no unwinder {a.unwinder!r} (kstall has {', '.join(UNWINDERS)})") from None


def walk_cpu(read: Callable[[int, int], bytes | None], regs: dict[str, int], a: Arch, syms: Kallsyms | None,
             max_bytes: int) -> dict:
    """What a CPU sample keeps of a CPU in the kernel, whatever reads its
    memory (gdb on a live guest, a vmcore): the stack regions and code bytes
    the walker read, the words its registers point at, and its frames."""
    walker = for_arch(a)
    user = a.in_user_mode(regs)
    regions = [] if user else walker.regions(read, regs, a, max_bytes, syms)
    code: dict[int, bytes] = {}
    if syms is not None:
        for addr in walker.candidates(regions, syms):
            b = read(addr - walker.CODE_BEFORE, walker.CODE_BEFORE)
            if b is not None:
                code[addr] = b
    out = {"regions": [{"base": f"{b:#x}", "bytes": d.hex()} for b, d in regions],
           # what registers point at: the lock a CPU spins on is among them
           "words": {} if user else kernel_waits.register_words(read, regs, a),
           "code": {f"{addr:#x}": b.hex() for addr, b in code.items()}}
    if syms is not None and not user:
        out |= {"frames": [f.to_json() for f in walker.frames(regs, a, regions, code, syms)],
                "unwinder": a.unwinder}
    else:
        out |= {"frames": [{"addr": f"{regs[a.pc]:#x}", "text": f"{regs[a.pc]:#x}", "function": "",
                            "reliable": True, "slot": None, "inlined": False}], "unwinder": "none"}
    return out
