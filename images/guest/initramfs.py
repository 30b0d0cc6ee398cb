# SPDX-License-Identifier: GPL-2.0
"""Builds the guest's initramfs (newc cpio) from the static guest binaries.

Written in Python rather than with cpio(1) so that device nodes (/dev/console)
can be created without root and the archive is byte-for-byte reproducible,
which lets it be cached by content hash.
"""
from __future__ import annotations

import hashlib
import os
import stat
import time
from pathlib import Path

from harness.base import paths

_DIRS = ("bin", "dev", "proc", "sys", "tmp")


def _entry(name: str, mode: int, data: bytes = b"", rdev: tuple[int, int] = (0, 0), ino: int = 0) -> list[bytes]:
    """The entry's pieces, joined once with the whole archive's (a guest's
    binaries are ~10 MB: copying them per entry cost a tenth of a second)."""
    namez = name.encode() + b"\0"
    fields = (ino, mode, 0, 0, 1, 0, len(data), 0, 0, rdev[0], rdev[1], len(namez), 0)
    head = b"070701" + b"".join(b"%08X" % f for f in fields) + namez
    return [head, b"\0" * (-len(head) % 4), data, b"\0" * (-len(data) % 4)]


class Symlink(str):
    """An archive entry that is a symbolic link to this target."""


def newc_archive(files: dict[str, bytes | Symlink]) -> bytes:
    """A newc archive holding the standard directories, /dev/console and files
    (archive path -> contents, all executable, or a Symlink), with their parent
    directories (the kernel's unpacker creates none)."""
    return b"".join(_pieces(files))


def _pieces(files: dict[str, bytes | Symlink]) -> list[bytes]:
    """newc_archive() in pieces: hashed without joining, joined only when the
    cache lacks it (joining 10 MB cost more than the rest of a cached build)."""
    parts: list[bytes] = []
    ino = 1
    parents = {"/".join(name.split("/")[:i]) for name in files for i in range(1, name.count("/") + 1)}
    for d in sorted(set(_DIRS) | parents):
        parts += _entry(d, stat.S_IFDIR | 0o755, ino=ino)
        ino += 1
    # the kernel opens /dev/console for init's stdio before devtmpfs exists
    parts += _entry("dev/console", stat.S_IFCHR | 0o600, rdev=(5, 1), ino=ino)
    ino += 1
    for name in sorted(files):
        data = files[name]
        if isinstance(data, Symlink):
            parts += _entry(name, stat.S_IFLNK | 0o777, data.encode(), ino=ino)
        else:
            parts += _entry(name, stat.S_IFREG | 0o755, data, ino=ino)
        ino += 1
    parts += _entry("TRAILER!!!", 0)
    return parts + [b"\0" * (-sum(map(len, parts)) % 512)]


def guest_files(guest: Path) -> dict[str, bytes | Symlink]:
    """/init plus every reproducer binary in the guest build directory, and
    the tree under its rootfs/ as it is (files and symbolic links), for a
    guest that needs more than kstall's own binaries (a shell, a test suite)."""
    init = guest / "init"
    if not init.is_file():
        raise FileNotFoundError(f"guest agent {init} is missing: run `make guest`")
    files = {"init": init.read_bytes()}
    for p in sorted(guest.iterdir()):
        if p.is_file() and p.name != "init" and os.access(p, os.X_OK):
            files[f"bin/{p.name}"] = p.read_bytes()
    root = guest / "rootfs"
    for p in sorted(root.rglob("*")) if root.is_dir() else []:
        name = p.relative_to(root).as_posix()
        if p.is_symlink():
            files[name] = Symlink(os.readlink(p))
        elif p.is_file():
            files[name] = p.read_bytes()
    return files


def build(guest: Path, modules: list[Path] | tuple[Path, ...] = (),
          extra: dict[str, bytes] | None = None) -> Path:
    """Path of the initramfs for the guest binaries in guest, built if needed,
    with modules (NAME.ko, uncompressed) for the agent to load first, in order
    (the agent reads etc/kstall/modules, see repro/agent/boot.c), and extra files
    (a user's program and its libraries: images/guest/programs.py)."""
    out_dir = paths.cache_dir() / "initramfs"
    # reading and hashing the inputs was 0.06 s of every verify: inputs whose
    # status (ctime included, which any write changes) is unchanged name the
    # archive they made last time
    stamp = out_dir / f"{_stamp(guest, modules, extra)}.stamp"
    try:
        known = out_dir / stamp.read_text().strip()
        if known.suffix == ".cpio" and known.exists():
            return known
    except (OSError, ValueError):
        pass
    files = guest_files(guest) | (extra or {})
    for m in modules:
        files[f"lib/modules/kstall/{m.name}"] = m.read_bytes()
    if modules:
        files["etc/kstall/modules"] = "".join(m.name.removesuffix(".ko") + "\n" for m in modules).encode()
    pieces = _pieces(files)
    h = hashlib.sha256()
    for piece in pieces:
        h.update(piece)
    out_dir.mkdir(parents=True, exist_ok=True)
    out = out_dir / f"{h.hexdigest()[:16]}.cpio"
    if not out.exists():
        paths.write_atomic(out, b"".join(pieces))
    paths.write_atomic(stamp, out.name.encode())
    return out


# a file changed this recently may change again within the same timestamp
# tick (inode times are coarse), as git's "racy" entries: its bytes count too
RACY_NS = 2_000_000_000


def _stamp(guest: Path, modules: list[Path] | tuple[Path, ...], extra: dict[str, bytes] | None) -> str:
    """The status of every file build() would read, and the extra files' bytes."""
    h = hashlib.sha256(b"initramfs stamp 1\n")
    root = guest / "rootfs"
    inputs = [guest, *sorted(guest.iterdir()), *(sorted(root.rglob("*")) if root.is_dir() else [])] \
        if guest.is_dir() else [guest]
    racy = time.time_ns() - RACY_NS
    for p in [*inputs, *modules]:
        try:
            st = p.lstat()
            h.update(f"{p}\0{st.st_mode}\0{st.st_size}\0{st.st_ino}\0{st.st_mtime_ns}\0{st.st_ctime_ns}\n".encode())
            if st.st_ctime_ns > racy and stat.S_ISREG(st.st_mode):
                h.update(p.read_bytes())
        except OSError:
            h.update(f"{p}\0missing\n".encode())
    for name, data in sorted((extra or {}).items()):
        h.update(f"{name}\0{type(data).__name__}\0{len(data)}\0".encode())
        h.update(data if isinstance(data, bytes) else str(data).encode())
    return h.hexdigest()[:32]
