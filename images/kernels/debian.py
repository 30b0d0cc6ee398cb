# SPDX-License-Identifier: GPL-2.0
"""debian:VERSION kernels, fetched from Debian's suites with a private apt state.

The suites are listed in images/debian-suites.list; apt's lists, the package
index kstall derives from them, and the extracted kernels live under
~/.cache/kstall. Only vmlinuz, config and a hash are kept of each package.

Packaging differs by version:
- bookworm's own 6.1 uses the older ABI naming, `linux-image-6.1.0-<N>-<flavour>`,
  with the upstream version only in the package's Version (6.1.192-2);
- up to 6.18 `linux-image-<abi>-<flavour>` holds boot/vmlinuz-*, the config
  and the modules;
- from 6.19 on it is a metapackage: the image sits in `linux-binary-<abi>-<flavour>`
  at usr/lib/modules/<abi>-<flavour>/vmlinuz, the config in `linux-base-…`, the
  modules in `linux-modules-…`.
Packages are read by images/kernels/packages.py, which also takes the modules the guest
must load (virtio console and PCI are modules in 6.1); a package that is not
needed (the modules, when they are built in) is not downloaded.
"""
from __future__ import annotations

import re
import shutil
from pathlib import Path

from harness.base import arch, paths
from images.kernels import cached, packages
from images.kernels.download import download as fetch_file, why_failed
from images.kernels.kernel import Kernel, Progress, SpecError
from images.kernels.debian_archive import (ARCH_NAMES, DEFAULT_ARCH, DEFAULT_FLAVOUR, DEBIAN_ARCHES, Archive, DebKernel,
                                         version_key)

def parse_query(text: str) -> tuple[str | None, str | None, str]:
    """'6.16.12' | '6.16.12+deb13' | '6.16.12-rt' | '6.16.12+deb13-cloud-amd64' |
    '6.1.0-56' | '6.1.0-56-cloud' -> (upstream or None, abi or None, flavour)."""
    old = re.fullmatch(rf"(\d+\.\d+\.\d+-\d+)(?:-((?:\w+-)?(?:{ARCH_NAMES})|\w+))?", text)
    if old:
        return None, old.group(1), _flavour(old.group(2))
    m = re.fullmatch(rf"(\d+\.\d+(?:\.\d+)?)(\+deb\d+(?:\.\d+)?)?(?:-((?:\w+-)?(?:{ARCH_NAMES})|\w+))?", text)
    if not m:
        raise SpecError(f"debian:{text}: expected debian:VERSION such as debian:6.16.12, "
                        "debian:6.12.94+deb12, debian:6.16.12-rt or debian:6.1.0-56")
    abi = m.group(1) + m.group(2) if m.group(2) else None
    return m.group(1), abi, _flavour(m.group(3))


def _flavour(given: str | None) -> str:
    """'rt' -> 'rt-amd64': a flavour without an architecture is the default architecture's."""
    if not given:
        return DEFAULT_FLAVOUR
    return given if given.endswith(DEBIAN_ARCHES) else f"{given}-{DEFAULT_FLAVOUR}"


def with_arch(text: str, flavour: str) -> str:
    """A query for another architecture's kernel (flavour: its Arch.flavour):
    '6.16.12' -> '6.16.12-arm64', '6.16.12-rt' -> '6.16.12-rt-arm64'; a query
    naming its architecture stays."""
    return text if text.endswith(DEBIAN_ARCHES) else f"{text}-{flavour}"


def arch_of(name: str) -> str:
    """Debian's architecture a flavour or package name ends with (rt-arm64,
    linux-image-6.1.0-56-arm64, powerpc64le: ppc64el); the first architecture's when none."""
    return next((arch.by_debian(f).debian for f in DEBIAN_ARCHES if name.endswith(f)), DEFAULT_ARCH)


def archive_for(name: str) -> Archive:
    """The private apt state of the architecture a flavour or package name is for."""
    return Archive(arch=arch_of(name))


def nearest(kernels: list[DebKernel], upstream: str, n: int = 3) -> list[str]:
    versions = sorted({k.upstream for k in kernels}, key=version_key)
    key = version_key(upstream)
    below = [v for v in versions if version_key(v) < key][-n:]
    above = [v for v in versions if version_key(v) > key][:n]
    return below + above


def find(kernels: list[DebKernel], text: str) -> DebKernel:
    upstream, abi, flavour = parse_query(text)
    hits = [k for k in kernels if (upstream is None or k.upstream == upstream) and k.flavour == flavour
            and (abi is None or k.abi == abi)]
    if not hits:
        near = nearest([k for k in kernels if k.flavour == flavour], upstream or abi or "")
        newest = kernels[-1].upstream if kernels else "none"
        raise SpecError(f"no Debian kernel {text} ({flavour}) in the suites of images/debian-suites.list; "
                        f"nearest: {', '.join(near) or 'none'}; newest: {newest}. "
                        f"List them all with `{paths.COMMAND} kernels --available`.")
    # the same upstream in several suites (+deb12, +deb13): the newest packaging
    return max(hits, key=lambda k: (version_key(k.abi), version_key(k.version)))


def kernel_dir(k: DebKernel) -> Path:
    return paths.cache_dir() / "kernels" / "debian" / f"{k.release}_{k.version}"


def download(k: DebKernel, archive: Archive, progress: Progress | None = None) -> Path:
    """Download and extract k (once; later calls hit the cache)."""
    d = kernel_dir(k)
    work = d / "download"

    def fetch(pkg: str):
        def get() -> Path:
            url, fname, size, sha = archive.uris(pkg)
            for old in work.iterdir():  # one package on disk at a time
                old.unlink()
            fetch_file(url, work / fname, size, sha, pkg, progress)
            return work / fname
        return get

    def make() -> None:
        work.mkdir(exist_ok=True)
        try:
            # the config first: it tells whether the modules package is needed at all
            order = dict.fromkeys([k.config_package, k.image_package, k.modules_package or k.image_package])
            c = packages.collect([fetch(p) for p in order], d, k.package)
            if c.changelog is None:
                _no_changelog(d, list(order))
            cached.write_meta(d, packages.kernel_from(c, k.canonical, k.canonical, k.upstream,
                                                      {"package": k.package, "image_package": k.image_package,
                                                       "version": k.version, "suite": k.suite}))
        except OSError as e:  # no half-unpacked kernel holds the space a full disk needs: make_once clears it
            raise SpecError(f"cannot unpack {k.package} into {d}: {why_failed(e)}") from None
        finally:
            shutil.rmtree(work, ignore_errors=True)
    cached.make_once(d, make)
    return d


def resolve(spec: str, text: str, fetch: bool = True, progress: Progress | None = None) -> Kernel:
    archive = archive_for(parse_query(text)[2])
    k = find(archive.kernels(progress), text)
    d = kernel_dir(k)
    why = cached.drop_if_damaged(d)
    if why and progress:
        progress(f"cached {k.package} is damaged ({why}): fetching it again")
    if not (d / cached.META).exists():
        if not fetch:
            raise SpecError(f"{spec} ({k.package}) is not downloaded yet")
        download(k, archive, progress)
    return cached.load_meta(d, spec)


def available(progress: Progress | None = None, arch: str = DEFAULT_ARCH) -> list[tuple[DebKernel, bool]]:
    """Every kernel of arch (Debian's name) debian: can fetch, and whether it is cached."""
    return [(k, (kernel_dir(k) / cached.META).exists()) for k in Archive(arch=arch).kernels(progress)]



def fetch_modules_package(kernel: Kernel, work: Path, progress: Progress | None = None) -> Path:
    """The package that holds a debian: kernel's modules, downloaded into work
    (images/kernels/module_tree.py reads every module from it)."""
    text = kernel.canonical.removeprefix("debian:")
    archive = archive_for(parse_query(text)[2])
    k = find(archive.kernels(progress), text)
    pkg = k.modules_package or k.image_package
    url, fname, size, sha = archive.uris(pkg)
    work.mkdir(parents=True, exist_ok=True)
    fetch_file(url, work / fname, size, sha, pkg, progress)
    return work / fname


NO_CHANGELOG = "changelog.none"  # the packages were read and hold none: not fetched again to find out


def _no_changelog(d: Path, packages_read: list[str]) -> None:
    paths.write_atomic(d / NO_CHANGELOG, "no changelog in " + ", ".join(packages_read) + "\n")


def changelog_of(kernel: Kernel, progress: Progress | None = None) -> Path | None:
    """A debian: kernel's package changelog. One cached before kstall kept
    changelogs gets it now, from its image package (read only up to it).
    Some hold none (6.18.15's doc directory links to a linux-base package
    the archive no longer has): that is kept too, or every prediction would
    fetch the 167 MB package again."""
    if kernel.changelog and kernel.changelog.exists():
        return kernel.changelog
    package = kernel.origin.get("image_package")
    d = kernel.vmlinuz.parent
    if not package or not (d / cached.META).exists() or (d / NO_CHANGELOG).exists():
        return None
    with cached.locked(d):
        k = cached.load_meta(d, kernel.spec)
        if k.changelog and k.changelog.exists():
            return k.changelog
        if (d / NO_CHANGELOG).exists():
            return None
        if progress:
            progress(f"{package}: fetching its changelog (kept with the kernel from now on)")
        work = d / "changelog-download"
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir()
        try:
            url, fname, size, sha = archive_for(package).uris(package)
            fetch_file(url, work / fname, size, sha, package, progress)
            c = packages.Collector(work, changelog_only=True)
            c.feed(work / fname)
            if c.changelog is None:
                _no_changelog(d, [package])
                return None
            c.changelog.rename(d / "changelog.gz")
            k.changelog = d / "changelog.gz"
            cached.write_meta(d, k)
            return k.changelog
        finally:
            shutil.rmtree(work, ignore_errors=True)
