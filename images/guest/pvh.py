# SPDX-License-Identifier: GPL-2.0
"""The uncompressed kernel inside a bzImage, for QEMU's PVH boot.

Under TCG a Debian kernel spends about 1.2 s before its clock starts: the
firmware's Linux loader and, mostly, decompressing a 14 MB zstd payload in
the guest. A kernel built with CONFIG_PVH carries an ELF note with a 32-bit
entry point (XEN_ELFNOTE_PHYS32_ENTRY), and QEMU's -kernel loads such an ELF
at its link address and enters there: no decompression. kstall decompresses
the payload once on the host and caches it by the bzImage's sha256; a kernel
without the note, or with a payload it cannot decompress, boots as a bzImage.
"""
from __future__ import annotations

import lzma
import os
import re
import struct
import subprocess
import tempfile
import zlib
from pathlib import Path

from harness.base import kernel_cache, procs
from harness.base.kernel_cache import KernelKey

PHYS32_ENTRY = 18  # XEN_ELFNOTE_PHYS32_ENTRY
_PART = re.compile(r"\.(\d+)\.(?:\w+\.)?part$")  # SHA.elf.PID[.RANDOM].part: its writer's pid
ZSTD_MAGIC, XZ_MAGIC, GZIP_MAGIC = b"\x28\xb5\x2f\xfd", b"\xfd7zXZ\x00", b"\x1f\x8b"
MAX_ELF_BYTES = 512 << 20  # a decompressed kernel larger than this is no kernel (a bomb)
# the cache keeps the most recently booted ELFs up to this size (~64 MB each)
MAX_BYTES = int(float(os.environ.get("KSTALL_PVH_MAX_GB", "2")) * (1 << 30))


def payload(bz: bytes) -> bytes | None:
    """The compressed kernel: boot protocol 2.08+ gives its offset and length."""
    if len(bz) < 0x250 or bz[0x202:0x206] != b"HdrS" or struct.unpack_from("<H", bz, 0x206)[0] < 0x208:
        return None
    offset, length = struct.unpack_from("<II", bz, 0x248)
    start = ((bz[0x1f1] or 4) + 1) * 512 + offset
    return bz[start:start + length] if start + length <= len(bz) else None


def decompress(data: bytes, limit: int = MAX_ELF_BYTES) -> bytes | None:
    """The payload decompressed, or None when it is not one kstall reads or
    comes out larger than limit (a kernel is tens of MB: more is no kernel)."""
    if data.startswith(ZSTD_MAGIC):  # the kernel's build appends the size after the frame
        return _zstd(data[:-4], limit)
    try:
        if data.startswith(XZ_MAGIC):
            d = lzma.LZMADecompressor(format=lzma.FORMAT_XZ)
            out = d.decompress(data, max_length=limit + 1)
        elif data.startswith(GZIP_MAGIC):
            d = zlib.decompressobj(16 + zlib.MAX_WBITS)
            out = d.decompress(data, limit + 1)
        else:
            return None
    except (lzma.LZMAError, zlib.error):
        return None
    return out if len(out) <= limit else None


def _zstd(frame: bytes, limit: int) -> bytes | None:
    """zstd(1) reads the frame from a file and its output is read up to limit,
    so neither side of the pipe can block or grow without bound."""
    with tempfile.TemporaryFile() as src, tempfile.TemporaryFile() as err:
        src.write(frame)
        src.seek(0)
        proc = subprocess.Popen(["zstd", "-dcq", "--memory=2048MB"], stdin=src, stdout=subprocess.PIPE, stderr=err,
                                preexec_fn=procs.die_with_parent)
        try:
            out = proc.stdout.read(limit + 1)
            if len(out) <= limit:
                proc.wait(60)  # it has written all: let it exit on its own
        except subprocess.TimeoutExpired:
            out = b""
        finally:
            proc.stdout.close()
            procs.reap(proc, grace=10)
    return out if len(out) <= limit and proc.returncode == 0 else None


def has_pvh_entry(elf: bytes) -> bool:
    """A 64-bit ELF with a PT_NOTE holding a Xen PHYS32_ENTRY note."""
    if not elf.startswith(b"\x7fELF\x02\x01"):
        return False
    phoff, = struct.unpack_from("<Q", elf, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", elf, 0x36)
    for i in range(phnum):
        p_type, _, p_offset, _, _, p_filesz = struct.unpack_from("<IIQQQQ", elf, phoff + i * phentsize)
        if p_type != 4:  # PT_NOTE
            continue
        pos, end = p_offset, p_offset + p_filesz
        while pos + 12 <= end:
            namesz, descsz, ntype = struct.unpack_from("<III", elf, pos)
            name = elf[pos + 12:pos + 12 + namesz].rstrip(b"\0")
            if name == b"Xen" and ntype == PHYS32_ENTRY:
                return True
            pos += 12 + (namesz + 3) // 4 * 4 + (descsz + 3) // 4 * 4
    return False


def boot_file(vmlinuz: Path, key: KernelKey) -> Path:
    """What to give QEMU's -kernel: the cached PVH ELF, else the bzImage."""
    d = kernel_cache.directory(kernel_cache.PVH)
    elf, no = kernel_cache.path(kernel_cache.PVH, key, "elf"), kernel_cache.path(kernel_cache.PVH, key, "none")
    try:
        os.utime(elf)  # most recently booted: pruned last
        return elf
    except FileNotFoundError:
        pass
    if no.is_file():
        return vmlinuz
    d.mkdir(parents=True, exist_ok=True)
    packed = payload(vmlinuz.read_bytes())
    image = decompress(packed) if packed else None
    if not image or not has_pvh_entry(image):
        no.touch()
        return vmlinuz
    # unique to this writer (a matrix's cells are threads of one pid); the pid
    # in its name lets a later prune remove the part of a kstall that died
    fd, tmp = tempfile.mkstemp(prefix=f"{elf.name}.{os.getpid()}.", suffix=".part", dir=d)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(image)
        os.replace(tmp, elf)  # whole or absent, even if kstall dies here
    finally:
        Path(tmp).unlink(missing_ok=True)
    prune(d)
    return elf


def prune(d: Path, keep_bytes: int = MAX_BYTES) -> list[Path]:
    """Remove the least recently booted ELFs beyond keep_bytes (the newest is
    always kept), and the .part files of processes that are gone; what went."""
    gone = []
    for part in d.glob("*.part"):
        m = _PART.search(part.name)
        if m is None or not Path(f"/proc/{m.group(1)}").exists():
            part.unlink(missing_ok=True)
            gone.append(part)
    elfs = []
    for elf in d.glob("*.elf"):
        try:
            st = elf.stat()
        except FileNotFoundError:  # another kstall pruned it
            continue
        elfs.append((st.st_mtime, st.st_blocks * 512, elf))
    total = 0
    for i, (_, size, elf) in enumerate(sorted(elfs, reverse=True)):
        total += size
        if i and total > keep_bytes:
            elf.unlink(missing_ok=True)
            gone.append(elf)
    return gone
