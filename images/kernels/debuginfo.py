# SPDX-License-Identifier: GPL-2.0
"""A kernel's DWARF: the vmlinux of its distribution's debug-info package,
fetched once and cached by its build ID (images/kernels/buildid.py).

Debian's linux-image-<release>-dbg is about 860 MB, 5.6 GB unpacked, most of
it the modules' debug info. kstall needs the vmlinux, so the package is
streamed straight from the mirror (ar, then data.tar.xz, then tar) and that
one member is kept; the rest of the stream is only hashed, so the .deb's
SHA-256 is still checked. A module's debug file is streamed out the same
way, the first time a syzbot report has a frame in that module. A debuginfo
.rpm (or .deb) the user already has is read the same way from the file.
Nothing here decides a verdict: the vmlinux is for the developer's debugger
(kstall attach, kstall inspect) and, with the modules', for the functions
a report's frames inlined, after which syzbot titles hangs
(harness/debug/inlines.py).

    debuginfo/<build-id>.vmlinux       the vmlinux, named by its build ID
    debuginfo/<build-id>.modules/      debug files of that kernel's modules, fetched when a
                                       report's frame is in one (<name>.ko; <name>.absent: none)
    debuginfo/<arch>-<sha>.build-id    the build IDs in a booted kernel's image (read once)
"""
from __future__ import annotations

import hashlib
import lzma
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from harness.base import kernel_cache, paths, procs
from harness.base.kernel_cache import KernelKey
from images.kernels import buildid, debian
from images.kernels.download import why_failed
from images.kernels.kernel import Kernel, Progress, SpecError
from images.kernels.packages import tar_command

# where distributions put the kernel's vmlinux with DWARF (Debian: boot/;
# Fedora and SUSE: lib/modules/<release>/)
_MEMBER = re.compile(r"(?:\./)?usr/lib/debug/(?:boot/vmlinux-[^/]+|lib/modules/[^/]+/vmlinux)")
_MODULE = re.compile(r"(?:\./)?usr/lib/debug/lib/modules/[^/]+/.+\.ko")
_AR_MAGIC = b"!<arch>\n"
_CHUNK = 1 << 20
PARTIAL = ".vmlinux-"  # a vmlinux being copied in: .vmlinux-<pid>-<random>


@dataclass
class Fetched:
    vmlinux: Path
    build_id: str
    package: str = ""
    read_mb: float = 0.0     # what came over the network (or out of the file)
    seconds: float = 0.0
    cached: bool = False


def cache_path(build_id: str) -> Path:
    return kernel_cache.directory(kernel_cache.DEBUGINFO) / f"{build_id}.vmlinux"


def booted_build_ids(key: KernelKey, vmlinuz: Path) -> list[str]:
    """The build IDs in the kernel's image, kept beside the cache (reading them unpacks a bzImage)."""
    memo = kernel_cache.path(kernel_cache.DEBUGINFO, key, "build-id")
    if memo.is_file():
        return memo.read_text().split()
    if not vmlinuz.is_file():
        return []
    found = buildid.of_kernel_image(vmlinuz)
    paths.write_atomic(memo, "".join(f"{b}\n" for b in found))
    return found


def cached_vmlinux(kernel: Kernel) -> Path | None:
    """The vmlinux with DWARF of this kernel, if kstall has one: a build's own, or a fetched one."""
    return for_image(kernel.key, kernel.vmlinuz, kernel.vmlinux)


def for_image(key: KernelKey, vmlinuz: Path, own: Path | None = None) -> Path | None:
    """The same, from what a run recorded of its kernel (run.json's kernel)."""
    if own is not None and own.is_file():
        return own
    return next((cache_path(b) for b in booted_build_ids(key, vmlinuz) if cache_path(b).is_file()), None)


def package_name(kernel: Kernel) -> str:
    """Debian's debug-info package of a debian: kernel: the image package's name with -dbg."""
    package = kernel.origin.get("package", "")
    if not package.startswith("linux-image-"):
        raise SpecError(f"{kernel.canonical} is not a Debian package kernel: give its debug info as a file "
                        "(kstall symbols KERNEL --debuginfo FILE: a vmlinux, a -dbg .deb or a debuginfo .rpm)")
    return package.removesuffix("-unsigned") + "-dbg"


class _Stream:
    """A .deb's data.tar member as a file object, read from an HTTP response:
    ar's 60-byte headers skipped, xz decompressed as it arrives, every byte
    of the package hashed."""

    def __init__(self, response, label: str, size: int, progress: Progress | None) -> None:
        self.r, self.label, self.size, self.progress = response, label, size, progress
        self.sha = hashlib.sha256()
        self.read_bytes = 0
        self.t0 = self.last = time.monotonic()
        self.left_in_member = 0
        self.unxz = lzma.LZMADecompressor()
        self.out = bytearray()
        self.tty = sys.stderr.isatty()
        if self._raw(len(_AR_MAGIC)) != _AR_MAGIC:
            raise SpecError(f"{label}: not a Debian package (no ar header)")
        self._to_data_member()

    def _raw(self, n: int) -> bytes:
        try:
            b = self.r.read(n)
        except OSError as e:
            raise SpecError(f"download of {self.label} broke off after {self.read_bytes} bytes: {why_failed(e)}") \
                from None
        self.sha.update(b)
        self.read_bytes += len(b)
        now = time.monotonic()
        if self.progress and (now - self.last > (0.5 if self.tty else 10)):
            self.last = now
            pct = 100 * self.read_bytes // max(self.size, 1)
            rate = self.read_bytes / max(now - self.t0, 1e-3) / 1e6
            self.progress(f"{self.label}: {pct}% of {self.size / 1e6:.0f} MB read ({rate:.0f} MB/s)")
        return b

    def _to_data_member(self) -> None:
        while True:
            header = self._raw(60)
            if len(header) < 60:
                raise SpecError(f"{self.label}: no data.tar member")
            name, size = header[:16].decode(errors="replace").strip().rstrip("/"), int(header[48:58])
            if name.startswith("data.tar"):
                if not name.endswith(".xz"):
                    raise SpecError(f"{self.label}: its {name} is not xz-compressed, which kstall reads as it streams")
                self.left_in_member = size
                return
            self._raw(size + (size & 1))

    def read(self, n: int = -1) -> bytes:
        while (n < 0 or len(self.out) < n) and self.left_in_member > 0:
            chunk = self._raw(min(_CHUNK, self.left_in_member))
            if not chunk:
                raise SpecError(f"download of {self.label} broke off after {self.read_bytes} of {self.size} bytes")
            self.left_in_member -= len(chunk)
            self.out += self.unxz.decompress(chunk)
        take = len(self.out) if n < 0 else min(n, len(self.out))
        data = bytes(self.out[:take])
        del self.out[:take]
        return data

    def drain(self) -> None:
        """The rest of the package, hashed only."""
        while self._raw(_CHUNK):
            pass


def _copy_to_partial(src, dest_dir: Path) -> Path:
    """src's bytes into a new partial file in dest_dir, named for this
    process: a copy cut short (a reset connection, Ctrl-C, a full disk)
    removes it, and one this process left by dying is removed by the next
    (_drop_orphans). Up to 855 MB each: none may stay."""
    _drop_orphans(dest_dir)
    fd, tmp = tempfile.mkstemp(dir=dest_dir, prefix=f"{PARTIAL}{os.getpid()}-")
    try:
        with open(fd, "wb") as f:
            while chunk := src.read(_CHUNK):
                f.write(chunk)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return Path(tmp)


def _drop_orphans(dest_dir: Path) -> None:
    """Partial files of processes that are gone."""
    for f in dest_dir.glob(f"{PARTIAL}*"):
        pid = f.name[len(PARTIAL):].split("-", 1)[0]
        if not pid.isdigit() or not Path(f"/proc/{pid}").exists():
            f.unlink(missing_ok=True)


Keep = Callable[[tarfile.TarFile, Path], Iterator[tuple[Path, str]]]


def _keep_member(tar: tarfile.TarFile, dest_dir: Path) -> Iterator[tuple[Path, str]]:
    """The vmlinux member of a streamed package, written to a partial file in dest_dir."""
    for m in tar:
        if not (m.isfile() and _MEMBER.fullmatch(m.name)):
            continue
        src = tar.extractfile(m)
        if src is None:
            continue
        yield _copy_to_partial(src, dest_dir), m.name
        return


def _keep_modules(names: set[str]) -> Keep:
    """A keep for _stream: the debug files of these modules (as the kernel
    names them: jfs, nf_tables), each written to a partial file."""
    def keep(tar: tarfile.TarFile, dest_dir: Path) -> Iterator[tuple[Path, str]]:
        for m in tar:
            if m.isfile() and _MODULE.fullmatch(m.name) and module_name(m.name) in names:
                src = tar.extractfile(m)
                if src is not None:
                    yield _copy_to_partial(src, dest_dir), m.name
    return keep


def module_name(member: str) -> str:
    """The name the kernel gives a module file: net/sched/sch_fq-pie.ko is sch_fq_pie."""
    return member.rsplit("/", 1)[-1].split(".ko")[0].replace("-", "_")


def _publish(tmp: Path, booted: list[str], what: str) -> Path:
    got = buildid.of_elf(tmp)
    if got is None:
        tmp.unlink()
        raise SpecError(f"{what}: its vmlinux has no build ID")
    if booted and got not in booted:
        tmp.unlink()
        raise SpecError(f"{what}: its vmlinux (build ID {got}) is not this kernel's, whose image holds "
                        f"build IDs {', '.join(booted)}")
    dest = cache_path(got)
    tmp.rename(dest)
    return dest


def at_version(url: str, version: str) -> bool:
    """Whether a package's pool URL is of this version. The archive's index
    percent-encodes the file name (':' as %3a, and a backport's '~' and '+'
    as %7e and %2b): 7.3.4-1~bpo13+1's own -dbg read as another version."""
    from urllib.parse import unquote
    return f"_{version}_" in unquote(url.rsplit("/", 1)[-1])


def fetch_debian(kernel: Kernel, progress: Progress | None = None) -> Fetched:
    """Stream kernel's -dbg package from Debian's mirror, keeping its vmlinux."""
    package = package_name(kernel)
    booted = booted_build_ids(kernel.key, kernel.vmlinuz)
    kept, s, seconds = _stream(kernel, "keeping only its vmlinux", _keep_member, progress)
    if not kept:
        raise SpecError(f"{package} holds no vmlinux under usr/lib/debug")
    path = _publish(kept[0][0], booted, package)
    return Fetched(path, buildid.of_elf(path) or "", package, round(s.read_bytes / 1e6, 1), seconds)


def _stream(kernel: Kernel, what: str, keep: Keep,
            progress: Progress | None) -> tuple[list[tuple[Path, str]], _Stream, float]:
    """The members keep takes from kernel's -dbg package, streamed from
    Debian's mirror into partial files of the cache, the package's SHA-256
    checked; the partial files and the stream, and the seconds it took."""
    import urllib.request  # here: most runs download nothing (images/kernels/download.py)
    package = package_name(kernel)
    archive = debian.archive_for(package)
    archive.update(progress=progress)
    try:
        url, _, size, sha = archive.uris(package)
    except SpecError:
        raise SpecError(f"Debian's archive has no {package} (debug info is published for some kernels only): "
                        "give it as a file, kstall symbols KERNEL --debuginfo FILE") from None
    version = kernel.origin.get("version")
    if version and not at_version(url, version):
        raise SpecError(f"Debian's archive has {package} only at another version than {version} "
                        f"({url.rsplit('/')[-1]})")
    dest_dir = kernel_cache.directory(kernel_cache.DEBUGINFO)
    dest_dir.mkdir(parents=True, exist_ok=True)
    if progress:
        progress(f"{package}: streaming {size / 1e6:.0f} MB from {url.split('/')[2]}, {what}")
    t0 = time.monotonic()
    try:
        r = urllib.request.urlopen(url, timeout=60)
    except OSError as e:
        raise SpecError(f"cannot download {package}: {why_failed(e)}") from None
    kept: list[tuple[Path, str]] = []
    try:
        with r:
            s = _Stream(r, package, size, progress)
            try:
                with tarfile.open(fileobj=s, mode="r|") as tar:  # type: ignore[arg-type]  # read() is all it needs
                    kept += keep(tar, dest_dir)
            except (tarfile.TarError, lzma.LZMAError, EOFError) as e:
                raise SpecError(f"{package}: unreadable package ({e})") from None
            s.drain()
        if s.read_bytes != size or s.sha.hexdigest() != sha:
            raise SpecError(f"{package} is corrupt ({s.read_bytes} of {size} bytes, sha256 mismatch)")
    except BaseException:
        for tmp, _ in kept:
            tmp.unlink(missing_ok=True)
        raise
    return kept, s, round(time.monotonic() - t0, 1)


def from_file(kernel: Kernel, given: Path, progress: Progress | None = None) -> Fetched:
    """The user's own debug info: a vmlinux, or a package holding one (.deb, .rpm)."""
    if not given.is_file():
        raise SpecError(f"{given}: no such file")
    booted = booted_build_ids(kernel.key, kernel.vmlinuz)
    dest_dir = kernel_cache.directory(kernel_cache.DEBUGINFO)
    dest_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    if given.name.endswith((".deb", ".rpm")):
        if progress:
            progress(f"{given.name}: reading its vmlinux")
        proc = subprocess.Popen(tar_command(given), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                preexec_fn=procs.die_with_parent)
        try:
            with tarfile.open(fileobj=proc.stdout, mode="r|") as tar:
                kept = list(_keep_member(tar, dest_dir))
        except tarfile.TarError as e:
            raise SpecError(f"{given.name}: unreadable package ({e})") from None
        finally:
            proc.kill()
            proc.wait(60)
        if not kept:
            raise SpecError(f"{given.name} holds no vmlinux under usr/lib/debug")
        tmp = kept[0][0]
    else:
        with open(given, "rb") as src:
            tmp = _copy_to_partial(src, dest_dir)
    size = given.stat().st_size
    path = _publish(tmp, booted, given.name)
    return Fetched(path, buildid.of_elf(path) or "", given.name, round(size / 1e6, 1), round(time.monotonic() - t0, 1))


def fetch(kernel: Kernel, given: Path | None = None, progress: Progress | None = None) -> Fetched:
    """The kernel's vmlinux with DWARF: the cached one, the given file's, or Debian's -dbg package's."""
    have = cached_vmlinux(kernel)
    if have is not None and given is None:
        return Fetched(have, buildid.of_elf(have) or "", cached=True)
    return from_file(kernel, given, progress) if given is not None else fetch_debian(kernel, progress)


def module_files(kernel: Kernel, names: set[str], progress: Progress | None = None) -> dict[str, Path]:
    """The debug files of these modules of a kernel whose vmlinux kstall
    has: cached ones, and the rest streamed from its -dbg package once (a
    name the package has no file for is remembered as absent). Only
    Debian's packages are fetched; a module's debug file is a few MB, all
    of them 5 GB, so only the modules a report's frames are in are kept."""
    vmlinux = cached_vmlinux(kernel)
    if vmlinux is None or vmlinux.parent != kernel_cache.directory(kernel_cache.DEBUGINFO) or not names:
        return {}  # a build's own vmlinux: its modules' debug files are in its tree
    where = vmlinux.with_suffix(".modules")
    missing = {n for n in names if not (where / f"{n}.ko").is_file() and not (where / f"{n}.absent").exists()}
    if missing:
        kept, _, _ = _stream(kernel, f"keeping the debug files of {', '.join(sorted(missing))}",
                             _keep_modules(missing), progress)
        where.mkdir(exist_ok=True)
        for tmp, member in kept:
            tmp.rename(where / f"{module_name(member)}.ko")
        for n in missing - {module_name(m) for _, m in kept}:
            (where / f"{n}.absent").touch()
    return {n: where / f"{n}.ko" for n in names if (where / f"{n}.ko").is_file()}
