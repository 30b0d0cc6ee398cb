# SPDX-License-Identifier: GPL-2.0
"""The kernel's BTF (/sys/kernel/btf/vmlinux): structure layouts by name.

Just enough of the format (Documentation/bpf/btf.rst) to answer "at which
byte of struct X is member a.b.c, and what type is it", "how big is type T"
and "what is the value of enumerator E". One pass indexes every type (where
its record starts); members are decoded only for the types asked about.
The blob comes from the guest: it is not trusted, and any inconsistency is a
BtfError, never an exception of another kind.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

MAGIC = 0xEB9F
# a kernel's BTF is in its own byte order (s390x's is big-endian): told by how the magic reads
_HEADER_FIELDS, _TYPE_FIELDS = "HBBIIIII", "III"
_HEADER_SIZE, _TYPE_SIZE = struct.calcsize("<" + _HEADER_FIELDS), struct.calcsize("<" + _TYPE_FIELDS)

INT, PTR, ARRAY, STRUCT, UNION, ENUM, FWD, TYPEDEF, VOLATILE, CONST, RESTRICT, FUNC, FUNC_PROTO, VAR, DATASEC, \
    FLOAT, DECL_TAG, TYPE_TAG, ENUM64 = range(1, 20)
# kinds that only qualify the type they point at
_QUALIFIERS = frozenset({TYPEDEF, VOLATILE, CONST, RESTRICT, TYPE_TAG})
# bytes that follow a type's 12-byte record: fixed, or per vlen entry
_FIXED_EXTRA = {INT: 4, ARRAY: 12, VAR: 4, DECL_TAG: 4}
_PER_ENTRY = {STRUCT: 12, UNION: 12, ENUM: 8, FUNC_PROTO: 8, DATASEC: 12, ENUM64: 12}


class BtfError(ValueError):
    pass


@dataclass(frozen=True)
class Member:
    name: str
    type_id: int
    offset: int  # bytes from the start of the structure that holds it (bitfields: their byte)


class Btf:
    def __init__(self, blob: bytes) -> None:
        if len(blob) < _HEADER_SIZE:
            raise BtfError("shorter than a BTF header")
        self.order = ">" if blob[:2] == MAGIC.to_bytes(2, "big") else "<"
        magic, _version, _flags, hdr_len, type_off, type_len, str_off, str_len = struct.unpack_from(
            self.order + _HEADER_FIELDS, blob)
        if magic != MAGIC:
            raise BtfError(f"not BTF (magic {magic:#x})")
        self.blob = blob
        self.types_at = hdr_len + type_off
        self.types_end = self.types_at + type_len
        self.strings_at = hdr_len + str_off
        self.strings_end = self.strings_at + str_len
        if self.types_end > len(blob) or self.strings_end > len(blob):
            raise BtfError("its sections run past its end")
        self.records: list[int] = [0]  # type id -> where its record starts (id 0 is void)
        self._by_name: dict[int, dict[str, int]] = {}  # kind -> name -> the first type of that kind and name
        pos = self.types_at
        while pos < self.types_end:
            if pos + _TYPE_SIZE > self.types_end:
                raise BtfError("a type record is cut short")
            _, info, _ = struct.unpack_from(self.order + _TYPE_FIELDS, blob, pos)
            kind, vlen = (info >> 24) & 0x1F, info & 0xFFFF
            if kind in _FIXED_EXTRA:
                extra = _FIXED_EXTRA[kind]
            elif kind in _PER_ENTRY:
                extra = _PER_ENTRY[kind] * vlen
            elif 0 < kind <= ENUM64:
                extra = 0
            else:
                raise BtfError(f"unknown type kind {kind} at byte {pos}")
            if pos + _TYPE_SIZE + extra > self.types_end:
                raise BtfError(f"type {len(self.records)} runs past the type section")
            self.records.append(pos)
            pos += _TYPE_SIZE + extra

    def __len__(self) -> int:
        return len(self.records) - 1

    def string(self, off: int) -> str:
        start = self.strings_at + off
        if not self.strings_at <= start < self.strings_end:
            raise BtfError(f"a name outside the string section ({off})")
        end = self.blob.find(b"\0", start, self.strings_end)
        return self.blob[start:end if end >= 0 else self.strings_end].decode(errors="replace")

    def _record(self, type_id: int) -> tuple[int, int, int, int, int]:
        """(kind, vlen, kind_flag, name_off, size_or_type) of a type."""
        if not 0 < type_id < len(self.records):
            raise BtfError(f"no type {type_id}")
        name_off, info, size_or_type = struct.unpack_from(self.order + _TYPE_FIELDS, self.blob, self.records[type_id])
        return (info >> 24) & 0x1F, info & 0xFFFF, info >> 31, name_off, size_or_type

    def kind(self, type_id: int) -> int:
        return self._record(type_id)[0]

    def name(self, type_id: int) -> str:
        return self.string(self._record(type_id)[3])

    def find(self, kind: int, name: str) -> int:
        """The id of the type of this kind and name (the first, when several)."""
        if kind not in self._by_name:  # names are read for this kind only: a kernel has 100k+ types
            index: dict[str, int] = {}
            for tid in range(1, len(self.records)):
                k, _, _, name_off, _ = self._record(tid)
                if k == kind and name_off:
                    index.setdefault(self.string(name_off), tid)
            self._by_name[kind] = index
        tid = self._by_name[kind].get(name)
        if tid is None:
            raise BtfError(f"no {_KIND_NAMES.get(kind, kind)} {name}")
        return tid

    def variable_type(self, name: str) -> int:
        """The type of a variable BTF describes (every per-CPU one, in a kernel)."""
        return self._record(self.find(VAR, name))[4]

    def member_at(self, type_id: int, offset: int, word: int = 8) -> str:
        """'__lock', 'a.b[2].c': the member that holds byte offset of a
        structure, looked into until it is no bigger than a word (a lock,
        not the fields inside it); "" when none holds it."""
        parts: list[str] = []
        for _ in range(16):
            if parts and self._size_or_0_of(type_id) <= word:
                break
            type_id = self.resolve(type_id)
            kind = self.kind(type_id)
            if kind == ARRAY:
                elem, n = self.array_of(type_id) or (0, 0)
                size = self.size(elem) if n else 0
                if not size or offset >= size * n or not parts:
                    break
                parts[-1] += f"[{offset // size}]"
                offset, type_id = offset % size, elem
                continue
            if kind not in (STRUCT, UNION):
                break
            inner = next((m for m in self.members(type_id) if m.offset <= offset < m.offset + self._size_or_0(m)),
                         None)
            if inner is None:
                break
            if inner.name:
                parts.append(inner.name)
            offset, type_id = offset - inner.offset, inner.type_id
        return ".".join(parts)

    def _size_or_0(self, m: Member) -> int:
        return self._size_or_0_of(m.type_id)

    def _size_or_0_of(self, type_id: int) -> int:
        try:
            return self.size(type_id)
        except BtfError:
            return 0

    def resolve(self, type_id: int) -> int:
        """The type behind typedefs and qualifiers."""
        for _ in range(32):
            kind, _, _, _, target = self._record(type_id)
            if kind not in _QUALIFIERS:
                return type_id
            type_id = target
        raise BtfError("a loop of typedefs")

    def size(self, type_id: int) -> int:
        count = 1
        for _ in range(32):  # arrays of arrays; a loop of them is a lie
            type_id = self.resolve(type_id)
            kind, _, _, _, size = self._record(type_id)
            if kind == ARRAY:
                type_id, _, n = self._array(type_id)
                count *= n
                continue
            if kind == PTR:
                return 8 * count
            if kind in (INT, STRUCT, UNION, ENUM, ENUM64, FLOAT, DATASEC):
                return size * count
            raise BtfError(f"type {type_id} ({_KIND_NAMES.get(kind, kind)}) has no size")
        raise BtfError("arrays nested past 32 levels")

    def _array(self, type_id: int) -> tuple[int, int, int]:
        return struct.unpack_from(self.order + "III", self.blob, self.records[type_id] + _TYPE_SIZE)

    def array_of(self, type_id: int) -> tuple[int, int] | None:
        """(element type, count) when the type is an array."""
        type_id = self.resolve(type_id)
        if self.kind(type_id) != ARRAY:
            return None
        elem, _, n = self._array(type_id)
        return elem, n

    def is_pointer(self, type_id: int) -> bool:
        return self.kind(self.resolve(type_id)) == PTR

    def members(self, type_id: int) -> list[Member]:
        type_id = self.resolve(type_id)
        kind, vlen, kind_flag, _, _ = self._record(type_id)
        if kind not in (STRUCT, UNION):
            raise BtfError(f"{self.name(type_id) or type_id} is not a struct or union")
        out, pos = [], self.records[type_id] + _TYPE_SIZE
        for i in range(vlen):
            name_off, tid, off = struct.unpack_from(self.order + "III", self.blob, pos + 12 * i)
            bits = off & 0xFFFFFF if kind_flag else off
            out.append(Member(self.string(name_off), tid, bits // 8))
        return out

    def member(self, type_id: int, path: str) -> Member:
        """Member a.b.c of a struct, its offset from the struct's start;
        anonymous unions and structs on the way are looked into."""
        offset, tid, name = 0, type_id, ""
        for name in path.split("."):
            found = self._find_member(tid, name)
            if found is None:
                raise BtfError(f"{self.name(self.resolve(tid)) or 'an anonymous type'} has no member {name}")
            offset += found.offset
            tid = found.type_id
        return Member(name, tid, offset)

    def _find_member(self, type_id: int, name: str, depth: int = 0) -> Member | None:
        if depth > 8:
            return None
        for m in self.members(type_id):
            if m.name == name:
                return m
            if not m.name and self.kind(self.resolve(m.type_id)) in (STRUCT, UNION):
                inner = self._find_member(m.type_id, name, depth + 1)
                if inner is not None:
                    return Member(inner.name, inner.type_id, m.offset + inner.offset)
        return None

    def enum_value(self, enumerator: str) -> int:
        """The value of an enumerator, in whichever enum declares it."""
        for tid in range(1, len(self.records)):
            kind, vlen, _, _, _ = self._record(tid)
            if kind not in (ENUM, ENUM64):
                continue
            step = 8 if kind == ENUM else 12
            pos = self.records[tid] + _TYPE_SIZE
            for i in range(vlen):
                name_off, lo = struct.unpack_from(self.order + "Ii", self.blob, pos + step * i)
                if self.string(name_off) == enumerator:
                    if kind == ENUM64:
                        hi = struct.unpack_from(self.order + "I", self.blob, pos + step * i + 8)[0]
                        return (hi << 32) | (lo & 0xFFFFFFFF)
                    return lo
        raise BtfError(f"no enumerator {enumerator}")


_KIND_NAMES = {INT: "int", PTR: "pointer", ARRAY: "array", STRUCT: "struct", UNION: "union", ENUM: "enum",
               TYPEDEF: "typedef", VAR: "variable", DATASEC: "section", ENUM64: "enum"}
