# SPDX-License-Identifier: GPL-2.0
"""Kernel symbols from a /proc/kallsyms capture: address -> name+offset.

Shared by the GDB-side dumper and the host (which re-symbolizes recorded dumps
in tests). Debian's System.map is a stub, so kallsyms captured from the guest
(nokaslr, kptr_restrict=0) is the symbol source when there is no vmlinux.
"""
from __future__ import annotations

import array
import bisect
import marshal
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

TEXT_TYPES = frozenset("tTwW")
# variables (data and bss; per-CPU ones are absolute where the per-CPU area is
# based at 0, as on x86-64 before 6.15), which name a lock or a per-CPU structure
DATA_TYPES = frozenset("dDbBA")
# a symbol's extent is up to the next symbol; past this we call it unknown
MAX_SYMBOL_SIZE = 1 << 20


@dataclass(frozen=True)
class Symbol:
    name: str
    start: int
    end: int
    module: str = ""

    def fmt(self, addr: int) -> str:
        mod = f" [{self.module}]" if self.module else ""
        return f"{self.name}+{addr - self.start:#x}/{self.end - self.start:#x}{mod}"


def _better(a: tuple[str, str, str], b: tuple[str, str, str]) -> bool:
    """Whether alias a names an address better than b: real functions over
    __pfx_/__cfi_ padding, globals over locals."""
    def rank(s: tuple[str, str, str]) -> tuple[int, int]:
        name, typ, _ = s
        return (name.startswith(("__pfx_", "__cfi_")), typ.islower())
    return rank(a) < rank(b)


# bump when the index's layout changes: an older index is then parsed again
INDEX_FORMAT = 2


class Lines:
    """Many strings as one text and where each starts: loaded from an index
    without making a Python string per symbol (135,000 of them took GDB
    0.1 s, while a guest restored beside it), each made when looked up."""

    def __init__(self, text: str, starts: array.array) -> None:
        self.text, self.starts = text, starts  # starts: one more than there are strings

    @classmethod
    def of(cls, strings: list[str]) -> "Lines":
        starts, at = array.array("Q", [0]), 0
        for x in strings:
            at += len(x) + 1
            starts.append(at)
        return cls("\n".join(strings) + "\n" if strings else "", starts)

    def dumps(self) -> tuple[str, bytes]:
        return self.text, self.starts.tobytes()

    @classmethod
    def loads(cls, stored: tuple[str, bytes]) -> "Lines":
        text, raw = stored
        starts = array.array("Q")
        starts.frombytes(raw)
        if not starts or starts[-1] != len(text):
            raise ValueError("a damaged index")
        return cls(text, starts)

    def __len__(self) -> int:
        return len(self.starts) - 1

    def __getitem__(self, i: int) -> str:
        return self.text[self.starts[i]:self.starts[i + 1] - 1]

    def __iter__(self) -> Iterator[str]:
        return iter(self.text.split("\n")[:len(self)])


class Kallsyms:
    def __init__(self, entries: list[tuple[int, str, str, str]], types: frozenset[str] = TEXT_TYPES) -> None:
        """entries: (address, type, name, module) of symbols, any order; those
        of the given types are kept."""
        best: dict[int, tuple[str, str, str]] = {}
        for addr, typ, name, mod in entries:
            if typ not in types or (addr == 0 and typ in TEXT_TYPES):
                continue
            cur = best.get(addr)
            if cur is None or _better((name, typ, mod), cur):
                best[addr] = (name, typ, mod)
        addrs = sorted(best)
        self._index(array.array("Q", addrs), Lines.of([best[a][0] for a in addrs]),
                    Lines.of([best[a][2] for a in addrs]))

    def _index(self, addrs: array.array, names: "Lines", modules: "Lines") -> None:
        # parallel sequences, not a tuple per symbol: they load from the index in milliseconds
        self.addrs, self.names, self.modules = addrs, names, modules
        self._by_name: dict[str, int] | None = None

    @property
    def by_name(self) -> dict[str, int]:
        if self._by_name is None:  # built when first asked: few lookups need it
            self._by_name = {}
            for a, name in zip(self.addrs, self.names):
                self._by_name.setdefault(name, a)
        return self._by_name

    @classmethod
    def parse(cls, text: str, types: frozenset[str] = TEXT_TYPES) -> "Kallsyms":
        entries = []
        for line in text.splitlines():
            parts = line.split()
            if len(parts) < 3:
                continue
            try:
                addr = int(parts[0], 16)
            except ValueError:
                continue
            mod = parts[3].strip("[]") if len(parts) > 3 else ""
            entries.append((addr, parts[1], parts[2], mod))
        return cls(entries, types)

    @classmethod
    def load(cls, path: str | Path, types: frozenset[str] = TEXT_TYPES) -> "Kallsyms":
        """From a capture, through a parsed copy beside it (marshal: data
        only) that loads in a tenth of the time: GDB loads the symbols while
        a frozen guest waits for its verdict."""
        path = Path(path)
        index = path.with_name(f"{path.name}.py{sys.version_info[0]}{sys.version_info[1]}.v{INDEX_FORMAT}.marshal")
        try:
            if index.stat().st_mtime_ns >= path.stat().st_mtime_ns:
                raw, names, modules = marshal.loads(index.read_bytes())
                addrs = array.array("Q")
                addrs.frombytes(raw)
                k = cls.__new__(cls)
                k._index(addrs, Lines.loads(names), Lines.loads(modules))
                if not len(addrs) == len(k.names) == len(k.modules):
                    raise ValueError("a damaged index")
                return k
        except (OSError, ValueError, EOFError, TypeError):
            pass
        k = cls.parse(path.read_text(errors="replace"), types)
        try:  # best effort: a read-only cache still works, only slower
            tmp = index.with_name(f".{index.name}.{os.getpid()}")
            tmp.write_bytes(marshal.dumps((k.addrs.tobytes(), k.names.dumps(), k.modules.dumps())))
            os.replace(tmp, index)
        except OSError:
            pass
        return k

    def __len__(self) -> int:
        return len(self.addrs)

    def lookup(self, addr: int) -> Symbol | None:
        i = bisect.bisect_right(self.addrs, addr) - 1
        if i < 0:
            return None
        start = self.addrs[i]
        end = self.addrs[i + 1] if i + 1 < len(self.addrs) else start + 4096
        if addr >= end or end - start > MAX_SYMBOL_SIZE:
            return None
        return Symbol(self.names[i], start, end, self.modules[i])

    def is_text(self, addr: int) -> bool:
        return self.lookup(addr) is not None

    def address(self, name: str) -> int | None:
        return self.by_name.get(name)

    def fmt(self, addr: int) -> str:
        sym = self.lookup(addr)
        return sym.fmt(addr) if sym else f"{addr:#x}"
