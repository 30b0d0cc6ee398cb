# SPDX-License-Identifier: GPL-2.0
"""Upstream kernel source tarballs from Debian's deb-src suites.

Debian's `linux` source package carries the upstream tree unchanged as
linux_<upstream>.orig.tar.xz; apt serves it even when that version's .dsc has
left the suites. The deb-src state is private (<cache>/apt-src), built from
the same images/debian-suites.list as the binary fetcher, and only the orig
tarball is downloaded (verified against apt's SHA256), into <cache>/src.
"""
from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path

from harness.base import paths
from images.kernels import cached, debian
from images.kernels.download import download
from images.kernels.kernel import Progress, SpecError, sha256_file


class SourceArchive(debian.Archive):
    def __init__(self) -> None:
        super().__init__(paths.cache_dir() / "apt-src")

    def sources_text(self) -> str:
        return "".join(re.sub(r"^deb\s", "deb-src ", l) + "\n" for l in super().sources_text().splitlines())

    def update_sources(self, progress: Progress | None = None) -> None:
        with self.locked():
            self._prepare()
            if progress:
                progress("updating Debian source lists (private apt state)")
            self._run("apt-get", ["update", "-q"], timeout=300)

    def orig_uri(self, debian_version: str) -> tuple[str, str, int, str]:
        """(url, file name, size, sha256) of linux=<debian_version>'s orig tarball."""
        out = self._run("apt-get", ["source", "--print-uris", "-q", f"linux={debian_version}"], timeout=120)
        m = re.search(r"^'([^']+)'\s+(linux_[^\s']+\.orig\.tar\.\w+)\s+(\d+)\s+SHA256:([0-9a-f]{64})", out, re.M)
        if not m:
            raise SpecError(f"apt lists no upstream tarball for linux={debian_version}")
        return m.group(1), m.group(2), int(m.group(3)), m.group(4)


def orig_tarball(upstream: str, progress: Progress | None = None) -> Path:
    """linux_<upstream>.orig.tar.xz, downloaded once and verified."""
    binaries = debian.Archive().kernels(progress)
    k = debian.find(binaries, upstream)
    src = SourceArchive()
    src.update_sources(progress)
    url, name, size, sha = src.orig_uri(k.version)
    dest = paths.cache_dir() / "src" / name
    if dest.is_file() and dest.stat().st_size == size and sha256_file(dest) == sha:
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    with cached.locked(dest):  # one download; the others wait and find it
        if dest.is_file() and dest.stat().st_size == size and sha256_file(dest) == sha:
            return dest
        fd, part = tempfile.mkstemp(prefix=f".{name}.", suffix=".part", dir=dest.parent)
        os.close(fd)
        try:
            download(url, Path(part), size, sha, name, progress)
            os.replace(part, dest)
        finally:
            Path(part).unlink(missing_ok=True)
    return dest
