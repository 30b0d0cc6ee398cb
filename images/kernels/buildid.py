# SPDX-License-Identifier: GPL-2.0
"""A kernel's GNU build ID, read from what kstall boots and from a vmlinux.

The linker puts the build ID in a note (owner "GNU", type 3) in the
kernel's .notes, which is in every form of the kernel: an ELF vmlinux, an
arm64 Image (the raw text and data), and the compressed vmlinux inside an
x86 bzImage. So notes are searched for in the bytes, after unpacking a
bzImage's payload by its compression's magic. The kernel carries other
build IDs too (its vDSOs'), so an image yields all it holds: a vmlinux is a
booted kernel's exactly when its own build ID is among them.
"""
from __future__ import annotations

import lzma
import re
import struct
import subprocess
import zlib
from pathlib import Path

from harness.base import procs

# namesz 4, descsz 20 (SHA-1) or 16 (md5/uuid), type NT_GNU_BUILD_ID, "GNU\0"
_NOTE = re.compile(rb"\x04\x00\x00\x00([\x10\x14])\x00\x00\x00\x03\x00\x00\x00GNU\x00", re.S)
_BZIMAGE_MAGIC = (0x202, b"HdrS")
_UNPACK_TIMEOUT = 120


def in_bytes(data: bytes) -> list[str]:
    """Every build-ID note in data, as hex, in order."""
    return [data[m.end():m.end() + m.group(1)[0]].hex() for m in _NOTE.finditer(data)]


def _payload(image: bytes) -> bytes | None:
    """A bzImage's compressed vmlinux (boot protocol 2.08+: payload_offset and
    payload_length in the setup header, from the protected-mode code)."""
    if len(image) < 0x250:
        return None
    setup_sects = image[0x1f1] or 4
    offset, length = struct.unpack_from("<II", image, 0x248)
    start = (setup_sects + 1) * 512 + offset
    return image[start:start + length] if length and start + length <= len(image) else None


def _unpack(payload: bytes) -> bytes:
    """The payload's vmlinux, whichever compression the kernel was built with
    (Debian: xz up to 6.1, zstd after; gzip is the kernel's default)."""
    if payload.startswith(b"\xfd7zXZ\x00"):
        return lzma.LZMADecompressor().decompress(payload)
    if payload.startswith(b"\x1f\x8b"):
        return zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(payload)
    if payload.startswith(b"\x28\xb5\x2f\xfd"):
        try:  # the zstd frame ends with the kernel's size appended, which zstd -dc ignores
            p = subprocess.run(["zstd", "-dcq"], input=payload, capture_output=True, timeout=_UNPACK_TIMEOUT,
                               preexec_fn=procs.die_with_parent)
        except (OSError, subprocess.TimeoutExpired):
            return b""
        return p.stdout
    return b""


def of_kernel_image(path: Path) -> list[str]:
    """The build IDs in a bootable kernel (bzImage, arm64 Image, ELF vmlinux):
    its own and its vDSOs'."""
    data = path.read_bytes()
    at, magic = _BZIMAGE_MAGIC
    if data[at:at + len(magic)] == magic:
        payload = _payload(data)
        return in_bytes(_unpack(payload)) if payload else []
    return in_bytes(data)


def of_elf(path: Path) -> str | None:
    """The build ID of an ELF file (a vmlinux with DWARF): read from its note
    sections only, not the whole file (Debian's 6.1 vmlinux is 700 MB)."""
    with open(path, "rb") as f:
        head = f.read(64)
        if head[:4] != b"\x7fELF" or head[4] != 2:
            return None
        end = "<" if head[5] == 1 else ">"
        shoff, = struct.unpack_from(end + "Q", head, 0x28)
        shentsize, shnum = struct.unpack_from(end + "HH", head, 0x3a)
        f.seek(shoff)
        table = f.read(shentsize * shnum)
        for i in range(shnum):
            sh_type, = struct.unpack_from(end + "I", table, i * shentsize + 4)
            if sh_type != 7:  # SHT_NOTE
                continue
            offset, size = struct.unpack_from(end + "QQ", table, i * shentsize + 0x18)
            f.seek(offset)
            found = in_bytes(f.read(min(size, 1 << 16)))
            if found:
                return found[0]
    return None
