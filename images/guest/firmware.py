# SPDX-License-Identifier: GPL-2.0
"""Device firmware for the guest (images/guest-firmware.toml): the files a
kernel driver loads at probe for a device a syzkaller program emulates, as
syzbot's images carry them. Taken from Debian's own firmware package
(through the private apt state kernels come by), kept once per package
version under <cache>/firmware/, and put into the initramfs under
lib/firmware/, where the kernel's loader looks."""
from __future__ import annotations

import functools
import re
import subprocess
import tarfile
import tempfile
import tomllib
from dataclasses import dataclass
from pathlib import Path

from harness.base import paths
from images.kernels import cached, debian
from images.kernels.download import download
from images.kernels.kernel import Progress, SpecError

TABLE = paths.data_file("images", "guest-firmware.toml")
UNPACK_TIMEOUT = 300


@dataclass(frozen=True)
class Firmware:
    driver: str
    package: str             # apt's PKG/SUITE
    files: tuple[str, ...]   # under lib/firmware/
    when: tuple[str, ...]    # a program whose source has one of these carries them
    reason: str


@functools.cache
def table() -> tuple[Firmware, ...]:
    with open(TABLE, "rb") as f:
        doc = tomllib.load(f)
    return tuple(Firmware(r["driver"], r["package"], tuple(r["files"]), tuple(r["when"]), " ".join(r["reason"].split()))
                 for r in doc["firmware"])


def wanted(source: str) -> list[Firmware]:
    """The rows a program's source asks for."""
    return [r for r in table() if any(w in source for w in r.when)]


@dataclass(frozen=True)
class Carried:
    driver: str
    package: str      # the .deb's file name: package, version and architecture
    files: tuple[str, ...]

    def to_json(self) -> dict:
        return {"driver": self.driver, "package": self.package, "files": list(self.files)}

    def text(self) -> str:
        return f"{', '.join(self.files)} for {self.driver}, from Debian's {self.package}"


def files(rows: list[Firmware], progress: Progress | None = None) -> tuple[dict[str, bytes], list[Carried]]:
    """Initramfs path -> contents of every row's files, and what they are."""
    out: dict[str, bytes] = {}
    carried = []
    for r in rows:
        d, deb = _unpacked(r, progress)
        for name in r.files:
            out[f"lib/firmware/{name}"] = (d / name).read_bytes()
        carried.append(Carried(r.driver, deb, r.files))
    return out, carried


def _cached(r: Firmware) -> tuple[Path, str] | None:
    """The newest unpacked .deb of r's package that holds all its files."""
    name = r.package.split("/")[0]
    dirs = [d for d in (paths.cache_dir() / "firmware").glob(f"{name}_*") if all((d / n).is_file() for n in r.files)]
    if not dirs:
        return None
    d = max(dirs, key=lambda d: debian.version_key(d.name.removeprefix(f"{name}_")))
    return d, d.name + ".deb"


def _unpacked(r: Firmware, progress: Progress | None) -> tuple[Path, str]:
    """The directory holding r's files (fetched and unpacked once per .deb),
    and the .deb's name. When apt cannot say or fetch the package's newest
    (no network, a mirror in mid-sync) or its .deb cannot be read, the newest one kept serves."""
    try:
        return _fetched(r, progress)
    except (SpecError, OSError, subprocess.SubprocessError, tarfile.TarError):
        if (kept := _cached(r)) is not None:
            return kept
        raise


def _fetched(r: Firmware, progress: Progress | None) -> tuple[Path, str]:
    archive = debian.Archive()
    archive.update(progress=progress)
    url, fname, size, sha = archive.uris(r.package)
    d = paths.cache_dir() / "firmware" / fname.removesuffix(".deb")
    if all((d / n).is_file() for n in r.files):
        return d, fname
    with cached.locked(d), tempfile.TemporaryDirectory(prefix="kstall-fw-", dir=paths.cache_dir()) as tmp:
        if all((d / n).is_file() for n in r.files):
            return d, fname
        deb = Path(tmp) / fname
        download(url, deb, size, sha, r.package.split("/")[0], progress)
        _extract(deb, r.files, d)
    return d, fname


def _extract(deb: Path, names: tuple[str, ...], dest: Path) -> None:
    """names out of deb's lib/firmware (usr/lib/firmware in newer packages) into dest."""
    tar = deb.with_suffix(".tar")
    with open(tar, "wb") as f:
        subprocess.run(["dpkg-deb", "--fsys-tarfile", str(deb)], stdout=f, check=True, timeout=UNPACK_TIMEOUT)
    found: dict[str, bytes] = {}
    with tarfile.open(tar) as t:
        for member in t:
            name = re.sub(r"^(\./)?(usr/)?lib/firmware/", "", member.name)
            if name in names and name != member.name and (member.isfile() or member.issym()):
                target = t.extractfile(member)  # a symlink inside the package is followed
                if target is not None:
                    found[name] = target.read()
    missing = sorted(set(names) - set(found))
    if missing:
        raise SpecError(f"{deb.name} has no lib/firmware/{', '.join(missing)}")
    for name, data in found.items():
        paths.write_atomic(dest / name, data)
