# SPDX-License-Identifier: GPL-2.0
"""A bootable kernel out of distro package files: vmlinuz, config and the
modules the guest needs (images/kernels/modules.py).

Packages are read by standard tools as tar streams: `dpkg-deb --fsys-tarfile`
for a .deb, bsdtar for an .rpm (libarchive reads rpm payloads, whatever their
compression, and writes tar). Each package is streamed once. vmlinuz and the
config are kept wherever the layout puts them (Debian's boot/, or
[usr/]lib/modules/<release>/ as in Debian 7.x and Fedora). Module files and
their metadata go to a staging tree only while they may be needed: once the
config says no needed module is =m, the stream stops and later packages are
not even opened (debian: then skips downloading them).
"""
from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
import tarfile
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterable, Iterator

from harness.base import paths, procs, untrusted
from images.kernels import cached, modules
from images.kernels.kernel import Kernel, SpecError, image_arch, sha256_file

# the bootable image: vmlinuz, or vmlinux where the architecture boots the ELF itself (Debian's ppc64el)
_VMLINUZ = re.compile(r"boot/vmlinu[zx]-(?P<a>[^/]+)|(?:usr/)?lib/modules/(?P<b>[^/]+)/vmlinu[zx]")
_CONFIG = re.compile(r"boot/config-(?P<a>[^/]+)|(?:usr/)?lib/modules/(?P<b>[^/]+)/config")
# the package's changelog, which lists the upstream stable commits it carries (images/kernels/changelog.py)
_CHANGELOG = re.compile(r"usr/share/doc/linux-[^/]+/changelog(?:\.Debian)?\.gz")
_MODFILE = re.compile(r"(?:usr/)?lib/modules/(?P<r>[^/]+)/(?P<rel>(?:kernel|updates|extra)/\S+\.ko(?:\.xz|\.zst|\.gz)?"
                      r"|modules\.(?:dep|builtin|order))")


def tar_command(pkg: Path) -> list[str]:
    if pkg.name.endswith(".deb"):
        return ["dpkg-deb", "--fsys-tarfile", str(pkg)]
    if pkg.name.endswith(".rpm"):
        return ["bsdtar", "-cf", "-", "--format", "pax", f"@{pkg}"]
    raise SpecError(f"{pkg}: not a .deb or .rpm")


def _checked_release(match: re.Match, member: tarfile.TarInfo, *groups: str) -> str:
    text = next(match.group(g) for g in (groups or ("a", "b")) if match.group(g))
    release = untrusted.release(text)
    if release is None:
        raise SpecError(f"package member {member.name!r} names no kernel release a kernel could have: refused")
    return release


class TarStream:
    """A package read as a tar stream (stream()): its members in s.tar; set
    s.stopped when the rest is not wanted, so the tool's end is not awaited."""

    def __init__(self, tar: tarfile.TarFile) -> None:
        self.tar = tar
        self.stopped = False


@contextmanager
def stream(pkg: Path) -> Iterator[TarStream]:
    """pkg's members, streamed once by its tool (tar_command); a package the
    tool cannot read, or tar cannot parse, is a SpecError naming it."""
    # the tool's stderr goes to a file: a pipe nobody reads would block it once full
    err_file = tempfile.TemporaryFile()
    proc = subprocess.Popen(tar_command(pkg), stdout=subprocess.PIPE, stderr=err_file,
                            preexec_fn=procs.die_with_parent)
    s: TarStream | None = None
    try:
        with tarfile.open(fileobj=proc.stdout, mode="r|") as tar:
            s = TarStream(tar)
            yield s
        if not s.stopped:  # the tool's end-of-archive padding: let it finish writing
            while proc.stdout and proc.stdout.read(1 << 20):
                pass
    except tarfile.TarError as e:
        raise SpecError(f"{pkg.name}: unreadable package ({e})") from None
    finally:
        if proc.stdout:
            proc.stdout.close()
        if proc.poll() is None:
            proc.kill()
        rc = proc.wait(60)
        err_file.seek(0)
        err = err_file.read(1 << 16).decode(errors="replace")
        err_file.close()
    if rc != 0 and not s.stopped:
        raise SpecError(f"{pkg.name}: {tar_command(pkg)[0]} could not read it: {err.strip()[-300:]}")


class Collector:
    """Takes what a kernel needs from a series of packages into dest."""

    def __init__(self, dest: Path, changelog_only: bool = False) -> None:
        self.dest = dest
        self.changelog_only = changelog_only  # a cached kernel's missing changelog (debian.changelog_of)
        self.staging = dest / "staging"
        self.vmlinuz: Path | None = None
        self.config: Path | None = None
        self.changelog: Path | None = None
        self.releases: set[str] = set()
        self.release: str | None = None
        self.module_files = 0
        self.read: list[str] = []
        self.needs = modules.every_need()
        self.needed: list[str] | None = None  # modules whose option is =m, once the config is known
        self.optional: list[str] = []  # the same, of modules.optional_needs(): taken if there
        self.optional_missing: list[str] = []  # those the packages did not hold
        self.plan: dict[str, list[str]] = {}

    def config_value(self, option: str) -> str | None:
        return Kernel("", "", Path(), "", config=self.config).config_value(option)

    def complete(self) -> bool:
        return self.vmlinuz is not None and self.needed == [] and not self.optional

    def done(self) -> bool:
        """Nothing more to read: a package's doc comes last, so one is read
        to its end for its changelog."""
        return self.changelog is not None and (self.changelog_only or self.complete())

    def feed(self, pkg: Path) -> None:
        """Stream one package, keeping what is wanted."""
        self.read.append(pkg.name)
        with stream(pkg) as s:
            for m in s.tar:
                if (m.isfile() or m.issym() or m.islnk()) and self._take(s.tar, m) and self.done():
                    s.stopped = True  # the rest is not needed
                    break

    def _take(self, tar: tarfile.TarFile, m: tarfile.TarInfo) -> bool:
        """Keep member m if the kernel needs it. Its name is the package's: one
        that would leave its directory (an absolute path, '..') or names no
        sane release is refused, naming the member."""
        name = untrusted.relative_path(m.name)
        if name is None:
            raise SpecError(f"package member {m.name!r} leaves the package's tree: refused")
        if not m.isfile():  # a link where kstall takes a file would be followed out of the package
            if _VMLINUZ.fullmatch(name) or _CONFIG.fullmatch(name) or _MODFILE.fullmatch(name):
                raise SpecError(f"package member {m.name!r} is a link (to {m.linkname!r}) where a file belongs: "
                                "refused")
            return False
        if _CHANGELOG.fullmatch(name):
            self.changelog = self._write(tar, m, self.dest / "changelog.gz")
            return True
        if self.changelog_only:
            return False
        if mz := _VMLINUZ.fullmatch(name):
            self.releases.add(_checked_release(mz, m))
            self.vmlinuz = self._write(tar, m, self.dest / "vmlinuz")
            self.release = _checked_release(mz, m)
            return True
        if _CONFIG.fullmatch(name):
            self.config = self._write(tar, m, self.dest / "config")
            self.needed = modules.wanted(self.needs, self.config_value)
            self.optional = [m for m in modules.wanted(modules.optional_needs(), self.config_value)
                             if m not in self.needed]
            return True
        mm = _MODFILE.fullmatch(name)
        if mm and (self.needed != [] or self.optional):
            release = _checked_release(mm, m, "r")
            self._write(tar, m, self.staging / "lib" / "modules" / release / mm.group("rel"))
            self.module_files += mm.group("rel").startswith(("kernel/", "updates/", "extra/"))
        return False

    @staticmethod
    def _write(tar: tarfile.TarFile, m: tarfile.TarInfo, dest: Path) -> Path:
        src = tar.extractfile(m)
        assert src is not None
        dest.parent.mkdir(parents=True, exist_ok=True)
        with open(dest, "wb") as out:
            shutil.copyfileobj(src, out, 1 << 20)
        return dest

    def finish(self, what: str) -> None:
        """Check that a kernel was found and install the modules it needs
        (self.plan: images.kernels.modules.install's)."""
        try:
            if self.vmlinuz is None:
                raise SpecError(f"{what} holds no kernel (no boot/vmlinuz-*, boot/vmlinux-* or lib/modules/*/vmlinuz)")
            if len(self.releases) > 1:
                raise SpecError(f"{what} holds several kernels ({', '.join(sorted(self.releases))}): give one")
            assert self.release is not None
            tree = modules.Tree(self.staging, self.release)
            names = self.needed if self.needed is not None else modules.wanted(self.needs, None, tree.builtin())
            if names and self.module_files == 0:
                why = "its config has them =m" if self.config else "modules.builtin does not list them"
                raise SpecError(f"the kernel {self.release} needs module(s) {', '.join(names)} ({why}) "
                                f"but {what} holds no modules: add the package that does (e.g. linux-modules-*, "
                                "kernel-modules)")
            if self.optional and self.module_files:
                tree.ensure_dep()
                have = set(tree.deps()) | (tree.builtin() or set())
                self.optional_missing = [m for m in self.optional if m not in have]
                names = names + [m for m in self.optional if m in have]
            else:
                self.optional_missing = list(self.optional)
            if not names:
                return
            tree.ensure_dep()
            self.plan = modules.install(tree, names, self.dest / "modules")
        finally:
            shutil.rmtree(self.staging, ignore_errors=True)


def collect(packages: Iterable[Callable[[], Path]], dest: Path, what: str) -> Collector:
    """Feed packages (each a callable that returns its file, so a download can
    wait until it is known to be needed) until the kernel is complete."""
    c = Collector(dest)
    for get in packages:
        if c.complete():
            break
        c.feed(get())
    c.finish(what)
    return c


def kernel_from(c: Collector, spec: str, canonical: str, upstream: str | None, origin: dict) -> Kernel:
    assert c.vmlinuz is not None
    plan = c.plan
    return Kernel(spec=spec, canonical=canonical, vmlinuz=c.vmlinuz, sha256=sha256_file(c.vmlinuz),
                  arch=image_arch(c.vmlinuz),
                  release=c.release, upstream=upstream or upstream_of(c.release), config=c.config,
                  changelog=c.changelog,
                  origin=origin | {"read": c.read} | ({"optional_missing": c.optional_missing}
                                                      if c.optional_missing else {}), modules=plan,
                  modules_dir=c.dest / "modules" if any(plan.values()) else None)


def upstream_of(release: str | None) -> str | None:
    """6.16.12+deb13-amd64 -> 6.16.12; 6.8.0-45-generic -> 6.8.0"""
    m = re.match(r"\d+\.\d+(?:\.\d+)?", release or "")
    return m.group(0) if m else None


def resolve_local(spec: str, scheme: str, text: str, upstream_of_package: Callable[[Path], str | None]) -> Kernel:
    """A kernel from package files the user names (deb:, rpm:), cached by
    their content: a second verify of the same files reads none of them."""
    files = [Path(p).expanduser().resolve() for p in text.split(",") if p]
    if not files:
        raise SpecError(f"{spec}: name at least one package file")
    for f in files:
        if not f.is_file():
            raise SpecError(f"{spec}: no such file {f}")
        tar_command(f)  # a .deb or .rpm
    digests = sorted(sha256_file(f) for f in files)
    key = hashlib.sha256("\n".join(digests).encode()).hexdigest()[:20]
    d = paths.cache_dir() / "kernels" / scheme / key

    def make() -> Kernel:
        # smallest first: a config-only package (linux-base) says whether the big modules one is needed
        ordered = sorted(files, key=lambda f: f.stat().st_size)
        c = collect([lambda f=f: f for f in ordered], d, ", ".join(f.name for f in files))
        upstream = next(filter(None, (upstream_of_package(f) for f in files)), None)
        return kernel_from(c, spec, f"{scheme}:{c.release}", upstream,
                           {"files": [str(f) for f in files], "sha256": digests})
    return cached.kernel_once(d, spec, make)


def tool_output(cmd: list[str], timeout: float = 60) -> str:
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError:
        raise SpecError(f"{cmd[0]} not found: {paths.install_hint()}") from None
    except subprocess.TimeoutExpired:
        raise SpecError(f"{' '.join(cmd)} took longer than {timeout:.0f}s") from None
    if p.returncode != 0:
        raise SpecError(f"{' '.join(cmd)} failed: {p.stderr.strip()[-300:]}")
    return p.stdout
