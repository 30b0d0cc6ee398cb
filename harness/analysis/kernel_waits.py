# SPDX-License-Identifier: GPL-2.0
"""Who waits for whom, from the kernel's own records in a frozen guest.

A CPU in csd_lock_wait waits for the CPUs whose call-function requests it
sent are still locked; a CPU spinning on a resilient spinlock (BPF's) has
the lock in its table of held locks, as has the CPU that holds it
(kernel-waits.toml). kernel_layout.layout() works out, once per kernel,
where those records are (its BTF for the structures, its kallsyms for the
variables); read() reads them from a stopped guest through any memory reader (GDB's, or
QMP's), and is all that runs while the guest is stopped. What the guest's
memory says is not trusted: a value is a number or nothing.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, TypeGuard

from harness.analysis import btf
from harness.analysis.kallsyms import DATA_TYPES, Kallsyms
from harness.base import paths
from harness.base.arch import KERNEL_HALF, Arch
from images.kernels import symcache

SPEC_FILE = paths.data_file("harness", "analysis", "kernel-waits.toml")
MAX_CPUS = 64  # one word of a cpumask
MAX_HELD = 64  # a CPU's table of held resilient spinlocks holds 31; a BTF that says more is not believed
Reader = Callable[[int, int], "bytes | None"]


def variables(symbols_text: str, names: set[str]) -> dict[str, int]:
    """The addresses of the named variables in a kallsyms capture."""
    out: dict[str, int] = {}
    for line in symbols_text.splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[2] in names and parts[2] not in out:
            try:
                out[parts[2]] = int(parts[0], 16)
            except ValueError:
                continue
    return out


class Memory:
    """A guest kernel's memory as the readers here take it: bytes at an
    address (a per-CPU address wraps past 2**64, as in the kernel), words in
    the kernel's byte order, and which values may point into it."""

    def __init__(self, read: Reader, order: str = "<", kernel_from: int = KERNEL_HALF) -> None:
        self.read, self.order, self.kernel_from = read, order, kernel_from

    @classmethod
    def of(cls, read: "Reader | Memory", lay: dict) -> "Memory":
        """read, in the byte order and pointer range a layout() says."""
        if isinstance(read, Memory):
            return read
        return cls(read, lay.get("order", "<"), int(lay.get("kernel_from", KERNEL_HALF)))

    @classmethod
    def of_arch(cls, read: Reader, a: Arch) -> "Memory":
        return cls(read, ">" if a.byteorder == "big" else "<", a.kernel_from)

    def raw(self, addr: int, size: int) -> bytes | None:
        data = self.read(addr & (2**64 - 1), size)
        return data if data is not None and len(data) == size else None

    def word(self, addr: int, size: int) -> int | None:
        data = self.raw(addr, size)
        return None if data is None else self.number(data)

    def words(self, data: bytes) -> tuple[int, ...]:
        """data as 8-byte words."""
        return struct.unpack(f"{self.order}{len(data) // 8}Q", data[:len(data) // 8 * 8])

    def number(self, raw: bytes, signed: bool = False) -> int:
        return int.from_bytes(raw, "big" if self.order == ">" else "little", signed=signed)

    def pointer(self, v: int | None, align: int = 8) -> TypeGuard[int]:
        """v may be the address of something the kernel keeps (not NULL, aligned, in its range)."""
        return v is not None and v != 0 and v >= self.kernel_from and v % align == 0

    def window(self, base: int, size: int) -> "Memory":
        """This memory, with [base, base + size) read at once (a task's members in one read, not a dozen)."""
        data = self.raw(base, size)

        def read(addr: int, n: int) -> bytes | None:
            if data is not None and base <= addr and addr + n <= base + size:
                return data[addr - base:addr - base + n]
            return self.read(addr, n)
        return Memory(read, self.order, self.kernel_from)


def read(mem: "Reader | Memory", lay: dict, ncpus: int) -> dict:
    """{"per_cpu_offsets": [...], "csd": {"1": [0]}, "rqspinlock": {"0": [lock, ...]}}
    from a stopped guest: for each CPU, the CPUs whose requests it waits on
    and the resilient spinlocks in its table (the last one it may be
    spinning on); addresses as hex strings. Empty when the kernel's layout
    is not known."""
    if "per_cpu_offset" not in lay:
        return {}
    mem = Memory.of(mem, lay)
    ncpus = min(ncpus, MAX_CPUS)
    offs = [mem.word(lay["per_cpu_offset"] + 8 * n, 8) for n in range(ncpus)]
    if any(o is None for o in offs):
        return {"error": "__per_cpu_offset unreadable"}
    out: dict = {"per_cpu_offsets": [f"{o:#x}" for o in offs]}
    if "csd" in lay:
        out["csd"] = _csd_waits(mem, lay["csd"], offs)
    if "rqspinlock" in lay:
        out["rqspinlock"] = _held_locks(mem, lay["rqspinlock"], offs)
    if "running" in lay:
        out["running"] = _running(mem, lay["running"], offs)
    return out


def _running(mem: Memory, r: dict, offs: list) -> dict[str, dict]:
    """{cpu: {"task": address, "pid": n}}: the task each CPU's runqueue runs."""
    out: dict[str, dict] = {}
    for n, off in enumerate(offs):
        task = mem.word(r["variable"] + off + r["curr"], 8)
        pid = mem.word(task + r["pid"], 4) if task else None
        if task and pid is not None:
            out[str(n)] = {"task": f"{task:#x}", "pid": pid}
    return out


def _csd_waits(mem: Memory, c: dict, offs: list) -> dict[str, list[int]]:
    waits: dict[str, list[int]] = {}
    for n, off in enumerate(offs):
        cfd = c["variable"] + off
        csd = mem.word(cfd + c["csd"], 8)
        mask_at = mem.word(cfd + c["mask"], 8) if c["mask_pointer"] else cfd + c["mask"]
        mask = mem.word(mask_at, 8) if mask_at else None
        if csd is None or mask is None:
            continue
        locked = [t for t, toff in enumerate(offs) if t != n and mask >> t & 1 and
                  (mem.word(csd + toff + c["flags"], 4) or 0) & c["locked"]]
        if locked:
            waits[str(n)] = locked
    return waits


def _held_locks(mem: Memory, r: dict, offs: list) -> dict[str, list[str]]:
    held: dict[str, list[str]] = {}
    for n, off in enumerate(offs):
        count = mem.word(r["variable"] + off + r["count"], 4)
        if not count:
            continue
        k = min(count, r["max"], MAX_HELD)
        data = mem.raw(r["variable"] + off + r["locks"], 8 * k)
        if data is None:
            continue
        held[str(n)] = [f"{a:#x}" for a in mem.words(data)]
    return held


@dataclass
class Variables:
    """A kernel's variables (its captured data symbols), where its per-CPU
    ones are ([__per_cpu_start, __per_cpu_end)), and its BTF, which has
    the type of each per-CPU one (read when a lock is named)."""
    symbols: Kallsyms
    per_cpu: tuple[int, int] = (0, 0)
    btf_path: Path | None = None
    _btf: btf.Btf | None = None

    @classmethod
    def load(cls, kallsyms: Path) -> "Variables | None":
        """The variables of the capture these text symbols belong to (None without them)."""
        path = symcache.beside(kallsyms, "datasyms")
        if not path.is_file():
            return None
        area = variables(path.read_text(errors="replace"), {"__per_cpu_start", "__per_cpu_end"})
        return cls(Kallsyms.load(path, DATA_TYPES), (area.get("__per_cpu_start", 0), area.get("__per_cpu_end", 0)),
                   symcache.beside(kallsyms, "btf"))

    def member(self, variable: str, offset: int) -> str:
        """'runqueues.__lock': the variable's member at offset, by its BTF type."""
        if self._btf is None and self.btf_path is not None:
            try:
                self._btf = btf.Btf(self.btf_path.read_bytes())
            except (OSError, btf.BtfError):
                self.btf_path = None  # no BTF (a build: kernel's is empty): named by offsets
        try:
            path = self._btf.member_at(self._btf.variable_type(variable), offset) if self._btf else ""
        except btf.BtfError:  # not a variable its BTF describes (static ones are not)
            path = ""
        if path:
            return f"{variable}.{path}"
        return variable if offset == 0 else f"{variable}+{offset:#x}"


class LockNames:
    """Names a lock by the variable it is (or is in): a static lock by its
    symbol, a per-CPU one by its variable and CPU; a lock in memory the
    kernel allocated has no name."""

    def __init__(self, variables: Variables, per_cpu_offsets: list[int]) -> None:
        self.vars, self.offs = variables, per_cpu_offsets

    def name(self, addr: int) -> str:
        start, end = self.vars.per_cpu
        if not start <= addr < end and (sym := self.vars.symbols.lookup(addr)) is not None:
            return self.vars.member(sym.name, addr - sym.start)
        for n, off in enumerate(self.offs):
            template = (addr - off) & (2**64 - 1)  # the per-CPU variable's own address
            if off and start <= template < end and (sym := self.vars.symbols.lookup(template)) is not None:
                return f"{self.vars.member(sym.name, template - sym.start)} of CPU{n}"
        return ""


def register_words(read: Reader, regs: dict[str, int], a: Arch) -> dict[str, str]:
    """The 32-bit word each register that holds a kernel address points at:
    a CPU spinning on a queued spinlock keeps the lock's address in one (the
    pc, stack and frame pointers never do)."""
    out: dict[str, str] = {}
    mem = Memory.of_arch(read, a)
    for name, value in regs.items():
        if mem.pointer(value, 4) and name not in (a.pc, a.sp, a.fp):
            word = mem.word(value, 4)
            if word is not None:
                out[name] = f"{word:#x}"
    return out


def register_lock(cpu: dict, locks: LockNames) -> str:
    """The variable a CPU spinning on a queued spinlock spins on: the one a
    register points at whose word is a held lock (its locked byte set; in a
    guest, where the kernel spins test-and-set in virt_spin_lock(), that is
    all its word holds); "" when none is a variable (a lock in allocated
    memory has no name to give)."""
    words = cpu.get("words") or {}
    for name, value in (cpu.get("regs") or {}).items():
        try:
            addr, word = int(value, 16), int(words.get(name, ""), 16)
        except (TypeError, ValueError):
            continue
        if word & 0xFF and (named := locks.name(addr)):
            return named
    return ""


def _ints(values, base: int = 10) -> list[int]:
    out = []
    for v in values if isinstance(values, list) else []:
        try:
            out.append(int(v, base) if isinstance(v, str) else int(v))
        except (TypeError, ValueError):
            continue
    return out


@dataclass
class Waits:
    """The samples' reads of the kernel's records."""
    csd: dict[int, list[int]] = field(default_factory=dict)  # CPU -> the CPUs its requests wait on in every sample
    held: list[dict[int, list[int]]] = field(default_factory=list)  # per sample: CPU -> its held resilient spinlocks
    per_cpu_offsets: list[int] = field(default_factory=list)

    @classmethod
    def from_samples(cls, samples: list[dict]) -> "Waits":
        reads = [s.get("waits") if isinstance(s.get("waits"), dict) else {} for s in samples]
        if not any("per_cpu_offsets" in r for r in reads):
            return cls()

        def table(r: dict, key: str) -> dict:
            return r[key] if isinstance(r.get(key), dict) else {}
        csd: dict[int, set[int]] | None = None
        for r in reads:  # a request that completed between samples was no wait
            cur = {int(k): set(_ints(v)) for k, v in table(r, "csd").items() if str(k).isdigit()}
            csd = cur if csd is None else {k: csd[k] & cur[k] for k in csd if k in cur}
        held = [{int(k): t for k, v in table(r, "rqspinlock").items() if str(k).isdigit() and (t := _ints(v, 16))}
                for r in reads]
        offsets = next(_ints(r["per_cpu_offsets"], 16) for r in reversed(reads) if "per_cpu_offsets" in r)
        return cls({k: sorted(v) for k, v in (csd or {}).items() if v}, held, offsets)

    def spun_lock(self, cpu: int, sample: int) -> int | None:
        """The resilient spinlock a CPU may be spinning on in a sample: its table's last entry."""
        table = self.held[sample].get(cpu) if 0 <= sample < len(self.held) else None
        return table[-1] if table else None

    def holders(self, lock: int, cpu: int, sample: int, spinning: set[int]) -> list[int]:
        """The CPUs that hold a lock cpu spins on, in the same sample: it is
        in their table, and not only as the last entry of one that spins on
        it too; cpu itself when the lock is in its table twice (it spins on a
        lock it holds: from an NMI, say)."""
        out = []
        for other, table in sorted(self.held[sample].items()):
            earlier = lock in table[:-1]
            if other == cpu and earlier or other != cpu and (earlier or lock in table and other not in spinning):
                out.append(other)
        return out
