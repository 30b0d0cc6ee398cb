# SPDX-License-Identifier: GPL-2.0
"""Another architecture's static libraries for the guest programs (libbpf,
libelf, zlib, zstd, jemalloc): that architecture's Debian packages of
images/guest/sysroot-packages.txt, at the versions the host has installed
(their headers are the host's), unpacked once into <cache>/sysroot/. The
host's dpkg never learns of the architecture."""
from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
from pathlib import Path
from typing import Callable
from urllib.parse import unquote

from harness.base import arch as arches
from harness.base import paths
from images.kernels import cached, debian
from images.kernels.download import download as fetch_file
from images.kernels.kernel import SpecError

PACKAGES = paths.data_file("images", "guest", "sysroot-packages.txt")
Progress = Callable[[str], None]


def wanted() -> list[str]:
    return [l.strip() for l in PACKAGES.read_text().splitlines() if l.strip() and not l.startswith("#")]


def host_version(package: str) -> str | None:
    p = subprocess.run(["dpkg-query", "-W", "-f=${Version}", package], capture_output=True, text=True, timeout=30)
    return p.stdout.strip() or None if p.returncode == 0 else None


def ensure(arch: str, progress: Progress | None = None) -> Path:
    """The sysroot of arch's libraries, made once per package set."""
    a = arches.get(arch)
    suite = a.table.get("sysroot_suite")
    if suite:  # the host's release has none of the architecture's packages: that suite's
        pins = [f"{p}:{a.debian}/{suite}" for p in wanted()]
    else:
        pins = [f"{p}:{a.debian}" + (f"={v}" if (v := host_version(p)) else "") for p in wanted()]
    d = paths.cache_dir() / "sysroot" / f"{arch}-{hashlib.sha256(' '.join(pins).encode()).hexdigest()[:12]}"

    def make() -> None:
        archive = debian.Archive(arch=a.debian)
        archive.update(progress=progress)
        work = d / "download"
        work.mkdir(parents=True, exist_ok=True)
        try:
            for pin in pins:
                url, fname, size, sha = _uris(archive, pin, progress)
                fetch_file(url, work / fname, size, sha, pin, progress)
                p = subprocess.run(["dpkg-deb", "-x", str(work / fname), str(d)], capture_output=True, text=True,
                                   timeout=300)
                if p.returncode != 0:
                    raise SpecError(f"cannot unpack {fname}: {p.stderr.strip()[-300:]}")
        finally:
            shutil.rmtree(work, ignore_errors=True)
        (d / "complete").write_text("\n".join(pins) + "\n")
    cached.make_once(d, make, done="complete")
    return d


def _uris(archive: debian.Archive, pin: str, progress: Progress | None) -> tuple[str, str, int, str]:
    """A pin's package; where its exact version is missing from the package
    lists (a security update the host has, in a suite whose index the mirror
    served stale, so that it did not refresh), the host release's own one of
    the same upstream version: the same headers, the host's compiler's ABI."""
    try:
        return archive.uris(pin)
    except SpecError:
        name, _, version = pin.partition("=")
        if not version or not (release := host_release()):
            raise
        got = archive.uris(f"{name}/{release}")
        if upstream(unquote(got[1]).split("_")[1]) != upstream(version):
            raise
    if progress:
        progress(f"{pin}: not in the package lists kstall has; taking {release}'s {got[1]}, the same upstream version")
    return got


def upstream(version: str) -> str:
    """A Debian version's upstream part: 1:1.2.13.dfsg-1 -> 1.2.13.dfsg."""
    return version.split(":", 1)[-1].rsplit("-", 1)[0]


def host_release() -> str:
    """The host's Debian codename (os-release), '' where it says none."""
    try:
        text = Path("/etc/os-release").read_text()
    except OSError:
        return ""
    m = re.search(r"^VERSION_CODENAME=\"?(\w+)", text, re.M)
    return m.group(1) if m else ""


def make_args(arch: str, progress: Progress | None = None) -> list[str]:
    """What `make guest` needs for arch: nothing on its own host, else SYSROOT=."""
    if arches.get(arch).compiler() == "gcc":
        return []
    return [f"SYSROOT={ensure(arch, progress)}"]
