# SPDX-License-Identifier: GPL-2.0
"""Another architecture's static libraries for the guest programs (libbpf,
libelf, zlib, zstd, jemalloc): that architecture's Debian packages of
images/guest/sysroot-packages.txt, at the versions the host has installed
(their headers are the host's), unpacked once into <cache>/sysroot/. The
host's dpkg never learns of the architecture."""
from __future__ import annotations

import hashlib
import shutil
import subprocess
from pathlib import Path
from typing import Callable

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
                url, fname, size, sha = archive.uris(pin)
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


def make_args(arch: str, progress: Progress | None = None) -> list[str]:
    """What `make guest` needs for arch: nothing on its own host, else SYSROOT=."""
    if arches.get(arch).compiler() == "gcc":
        return []
    return [f"SYSROOT={ensure(arch, progress)}"]
