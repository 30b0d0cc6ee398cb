# SPDX-License-Identifier: GPL-2.0
"""Test-only modules a distro kernel's config leaves out (images/test-modules.toml:
raw_gadget, syzkaller's USB device), built for that very kernel from its own
source: the file from Debian's source of its upstream version (the orig
tarball of its `linux` source package), built against its own headers
package and kbuild tools, by the compiler it was built with. Where the host
has that compiler (bookworm's gcc-12 for bookworm's kernels) the host builds
it; else inside the kernel's release's own userland (images/kernels/userland.py:
trixie's gcc-14 and glibc for trixie's kernels). Each module is built once
per kernel and kept with its build log and what it was built from
(<cache>/testmods/<arch>-<sha>/); one that cannot be built says why.
"""
from __future__ import annotations

import functools
import json
import re
import shutil
import subprocess
import tarfile
import tempfile
import time
import tomllib
from dataclasses import asdict, dataclass
from pathlib import Path

from harness.base import kernel_cache, paths, procs
from images.kernels import cached, debian, debian_source, userland
from images.kernels.download import download as fetch_file
from images.kernels.kernel import Kernel, Progress, SpecError

TABLE = paths.data_file("images", "test-modules.toml")
BUILD_TIMEOUT = 600
# a module that could not be built is tried again after this long (a mirror that failed, a package added)
RETRY_FAILED_S = 3600


@dataclass(frozen=True)
class TestModule:
    name: str
    option: str
    sources: tuple[str, ...]
    requires: tuple[str, ...]
    device: str
    reason: str


@functools.cache
def table() -> tuple[TestModule, ...]:
    with open(TABLE, "rb") as f:
        doc = tomllib.load(f)
    return tuple(TestModule(m["name"], m["option"], tuple(m["sources"]), tuple(m.get("requires", ())), m["device"],
                            " ".join(m["reason"].split())) for m in doc["module"])


def for_device(device: str) -> TestModule | None:
    return next((m for m in table() if m.device == device), None)


@dataclass
class Built:
    name: str
    ko: str = ""            # the module file, "" when it could not be built
    why: str = ""           # why it could not ("" when built)
    source: str = ""        # what its source was taken from
    headers: str = ""       # the headers package it was built against
    built_with: str = ""    # the host's compiler, or the release's userland
    build_s: float = 0.0

    def to_json(self) -> dict:
        return asdict(self)

    def text(self) -> str:
        """'raw_gadget, built from linux_6.1.170.orig.tar.xz against linux-headers-6.1.0-47-amd64 6.1.170-3'"""
        if not self.ko:
            return f"{self.name} could not be built: {self.why}"
        return f"{self.name}, built from {self.source} against {self.headers} with {self.built_with}"


def applies(kernel: Kernel, m: TestModule) -> str:
    """Why kstall will not build m for kernel ("" when it will)."""
    if kernel.config is None or not kernel.config.is_file():
        return "the kernel's config is unknown"
    if kernel.config_value(f"CONFIG_{m.option}") in ("y", "m"):
        return f"the kernel builds CONFIG_{m.option} itself"
    lacking = [o for o in m.requires if kernel.config_value(f"CONFIG_{o}") not in ("y", "m")]
    if lacking:
        return f"the kernel's config leaves out {', '.join('CONFIG_' + o for o in lacking)}, which it drives"
    if not kernel.canonical.startswith("debian:"):
        return "kstall builds test modules for debian: kernels only (their headers and source are Debian's packages)"
    return ""


def _dir(kernel: Kernel) -> Path:
    return kernel_cache.path(kernel_cache.TESTMODS, kernel.key, "d")


def built(kernel: Kernel) -> list[Built]:
    """What was built (or found unbuildable) for kernel so far: nothing is built here."""
    d = _dir(kernel)
    out = []
    for f in sorted(d.glob("*.json")) if d.is_dir() else []:
        try:
            b = Built(**json.loads(f.read_text()))
        except (OSError, ValueError, TypeError):
            continue
        failed_lately = not b.ko and time.time() - f.stat().st_mtime < RETRY_FAILED_S
        if failed_lately or (b.ko and Path(b.ko).is_file()):
            out.append(b)
    return out


def ensure(kernel: Kernel, m: TestModule, progress: Progress | None = None) -> Built:
    """m built for kernel (once: later calls read the record), or why not."""
    if why := applies(kernel, m):
        return Built(m.name, why=why)
    d = _dir(kernel)
    record = d / f"{m.name}.json"
    if (b := next((b for b in built(kernel) if b.name == m.name), None)) is not None:
        return b
    d.mkdir(parents=True, exist_ok=True)
    with cached.locked(record):
        if (b := next((b for b in built(kernel) if b.name == m.name), None)) is not None:
            return b
        t = time.monotonic()
        b = Built(m.name)
        try:
            _build(kernel, m, d, b, progress)
        except (SpecError, OSError, subprocess.SubprocessError, tarfile.TarError) as e:
            b.ko, b.why = "", str(e)
        b.build_s = round(time.monotonic() - t, 1)
        if progress:
            progress(f"{kernel.canonical}: test module {b.text()} ({b.build_s:g}s)")
        paths.write_atomic(record, json.dumps(b.to_json(), indent=1) + "\n")
    return b


def _build(kernel: Kernel, m: TestModule, d: Path, b: Built, progress: Progress | None) -> None:
    version = kernel.origin.get("version", "")
    release = kernel.release or ""
    archive = debian.archive_for(release)
    headers = f"linux-headers-{release}"
    compiler = _compiler(kernel)
    with tempfile.TemporaryDirectory(prefix="testmod-", dir=d) as tmp:
        work = Path(tmp)
        try:
            debs = [_fetch(archive, f"{headers}={version}", work, progress)]
        except SpecError:
            raise SpecError(f"its headers package, {headers} {version}, is not in Debian's suites (any more)") from None
        for dep in _depends(debs[0], ("linux-headers-", "linux-kbuild-")):
            debs.append(_fetch(archive, dep, work, progress))
        # what the kbuild tools need to run (objtool: libelf; pahole for a module's BTF)
        runtime = tuple(d.split("=")[0] for deb in debs if deb.name.startswith("linux-kbuild-")
                        for d in _depends(deb, ("",)))
        b.headers = f"{headers} {version}"
        tarball, b.source = _source_tarball(kernel, archive, work, progress)
        if shutil.which(compiler):  # the compiler the kernel was built with is the host's
            root, inside = work / "root", work / "root"
            b.built_with = f"the host's {compiler}"
        else:
            root = userland.ensure(_release_of(kernel), compiler, progress, packages=runtime)
            inside = root / "var" / "tmp" / f"kstall-{m.name}-{work.name}"
            b.built_with = f"{_release_of(kernel)}'s own userland ({compiler})"
        inside.mkdir(parents=True, exist_ok=True)
        try:
            for deb in debs:
                subprocess.run(["dpkg-deb", "-x", str(deb), str(inside)], check=True, capture_output=True,
                               timeout=300)
            tree = inside / "usr" / "src" / headers
            mod = inside / "module"
            _sources(tarball, m, mod)
            (mod / "Kbuild").write_text(f"obj-m += {m.name}.o\n")
            # where the tree is as make sees it: on the host, or inside the userland's root
            seen = inside if root == inside else Path("/") / inside.relative_to(root)
            mk = tree / "Makefile"  # it names the common headers' Makefile by its installed path
            mk.write_text(re.sub(r"^include /usr/src/", f"include {seen}/usr/src/", mk.read_text(), flags=re.M))
            cmd = ["make", "-C", f"{seen}/usr/src/{headers}", f"M={seen}/module", "modules"]
            if root != inside:
                cmd = ["chroot", str(root), *cmd]
            if progress:
                progress(f"{kernel.canonical}: building test module {m.name} ({b.built_with})")
            p = procs.run_bounded(cmd, timeout=BUILD_TIMEOUT)
            (d / f"{m.name}.log").write_text(p.stdout + p.stderr)
            ko = mod / f"{m.name}.ko"
            if p.returncode != 0 or not ko.is_file():
                tail = " | ".join(l for l in (p.stdout + p.stderr).splitlines()[-4:] if l.strip())
                raise SpecError(f"its build failed (exit {p.returncode}): {tail[-400:]}")
            shutil.copy2(ko, d / f"{m.name}.ko")
            b.ko = str(d / f"{m.name}.ko")
        finally:
            if root != inside:
                shutil.rmtree(inside, ignore_errors=True)


def _compiler(kernel: Kernel) -> str:
    """The compiler the kernel was built with, as its config names it
    (CONFIG_CC_VERSION_TEXT: "gcc-12 (Debian 12.2.0-14+deb12u1) 12.2.0",
    "x86_64-linux-gnu-gcc-14 (Debian 14.2.0-19) 14.2.0")."""
    text = (kernel.config_value("CONFIG_CC_VERSION_TEXT") or "").strip('"')
    name = text.split(" ", 1)[0]
    if not re.fullmatch(r"[\w.+-]{1,64}", name):
        raise SpecError(f"the kernel's config does not name the compiler it was built with ({text[:80]!r})")
    return name


def _release_of(kernel: Kernel) -> str:
    """The Debian release whose userland built the kernel: its suite's name
    before any -security or -backports (trixie-backports: trixie)."""
    suite = kernel.origin.get("suite", "")
    name = suite.split("-", 1)[0]
    if not re.fullmatch(r"[a-z]{2,20}", name):
        raise SpecError(f"the kernel's suite is unknown ({suite!r}), so its release's userland is too")
    return name


def _source_tarball(kernel: Kernel, archive: debian.Archive, work: Path, progress: Progress | None
                    ) -> tuple[Path, str]:
    """The kernel's source tree as a tarball, and what it is: Debian's own
    (linux-source-X.Y at the kernel's exact version, its patches applied)
    where the suites have it, else the upstream tree of its version (the
    orig tarball of Debian's linux source package, which outlives it)."""
    version, upstream = kernel.origin.get("version", ""), kernel.upstream or ""
    series = ".".join(upstream.split(".")[:2])
    package = f"linux-source-{series}"
    try:
        deb = _fetch(archive, f"{package}={version}", work, progress)
    except SpecError:
        tarball = debian_source.orig_tarball(upstream, progress)
        return tarball, f"{tarball.name} (the upstream tree of Debian's linux {version} source)"
    inner = work / f"{package}.tar.xz"
    with open(inner, "wb") as out:
        fsys = subprocess.Popen(["dpkg-deb", "--fsys-tarfile", str(deb)], stdout=subprocess.PIPE)
        assert fsys.stdout is not None
        try:
            with tarfile.open(fileobj=fsys.stdout, mode="r|*") as t:
                for member in t:
                    if member.name.lstrip("./") == f"usr/src/{package}.tar.xz" and (f := t.extractfile(member)):
                        shutil.copyfileobj(f, out)
                        break
        finally:
            fsys.kill()
            fsys.wait(timeout=30)
    deb.unlink()
    if inner.stat().st_size == 0:
        raise SpecError(f"{package} {version} holds no usr/src/{package}.tar.xz")
    return inner, f"{package} {version} (Debian's patched tree)"


def _fetch(archive: debian.Archive, package: str, work: Path, progress: Progress | None) -> Path:
    url, fname, size, sha = archive.uris(package)
    fetch_file(url, work / fname, size, sha, package.split("=")[0], progress)
    return work / fname


def _depends(deb: Path, prefixes: tuple[str, ...]) -> list[str]:
    """The packages deb depends on whose names start with prefixes, at the
    version it names when it names one exactly (=), else apt's candidate."""
    p = subprocess.run(["dpkg-deb", "-f", str(deb), "Depends"], capture_output=True, text=True, timeout=60,
                       check=True)
    out = []
    for alt in p.stdout.split(","):
        m = re.match(r"\s*([a-z0-9][a-z0-9+.-]*)\s*(?:\((=|>=)\s*([\w.+:~-]+)\))?", alt.split("|")[0])
        if m and m.group(1).startswith(prefixes):
            out.append(f"{m.group(1)}={m.group(3)}" if m.group(2) == "=" else m.group(1))
    return out


def _sources(tarball: Path, m: TestModule, dest: Path) -> None:
    """m's files out of the upstream tarball (linux-X.Y.Z/<path>), into dest."""
    dest.mkdir(parents=True, exist_ok=True)
    want = set(m.sources)
    found = set()
    with tarfile.open(tarball) as t:
        for member in t:
            name = member.name.split("/", 1)[-1]
            if name in want and member.isfile():
                f = t.extractfile(member)
                assert f is not None
                (dest / Path(name).name).write_bytes(f.read())
                found.add(name)
                if found == want:
                    break
    if found != want:
        raise SpecError(f"{tarball.name} has no {', '.join(sorted(want - found))}")
