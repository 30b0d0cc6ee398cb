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

import fcntl
import json
import re
import shutil
import subprocess
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterator

from harness.base import arch, paths, procs
from images.kernels import cached, packages
from images.kernels.download import download as fetch_file, why_failed
from images.kernels.kernel import Kernel, Progress, SpecError

SUITES = paths.data_file("images", "debian-suites.list")
LISTS_MAX_AGE = 6 * 3600
# a mirror that failed to refresh (one syncing answers with wrong sizes for a while) is
# not asked again for this long: each ask took 12 s, and a matrix asked once a cell
RETRY_FAILED_AFTER = 15 * 60
# Debian's kernel flavours of the architectures kstall knows (harness/base/arches.toml:
# an architecture's name, or its flavour's where they differ: powerpc64le), and the default's
DEBIAN_ARCHES = tuple(arch.get(n).flavour for n in arch.names())
DEFAULT_FLAVOUR = arch.get().flavour
DEFAULT_ARCH = arch.get().debian
_ARCHES = "|".join(re.escape(a) for a in DEBIAN_ARCHES)
_NAME = re.compile(rf"^linux-(image|binary|base|modules)-(\d+\.\d+(?:\.\d+)?)\+(deb\d+(?:\.\d+)?)"
                   rf"-((?:\w+-)?(?:{_ARCHES}))$")
# bookworm's stock kernel: linux-image-6.1.0-56-amd64, upstream version in Version
_OLD_NAME = re.compile(rf"^linux-image-(\d+\.\d+\.\d+-\d+)-((?:\w+-)?(?:{_ARCHES}))$")
# apt-get update's word on a suite it could not fetch: a warning when it could not
# reach it (it exits 0), an error when a mirror in mid-sync served a list of the
# wrong size or hash (it exits 100, having fetched the others)
FETCH_FAILED = re.compile(r"^[WE]: Failed to fetch (\S+)\s+(.*)$", re.M)
# a failure to reach the mirror at all: apt tried again itself (Acquire::Retries,
# 1+2+4 s apart), and one more update would only wait as long again for the same
UNREACHABLE = re.compile(r"Could not connect|Unable to connect|Connection refused|Could not resolve|Temporary "
                         r"failure resolving|Connection timed out|Network is unreachable|No route to host")


def worth_retrying(failed: list[tuple[str, str]]) -> bool:
    """Whether an update whose suites failed so is worth one more go: not
    when every one failed to reach the mirror (apt retried those already)."""
    return any(not UNREACHABLE.search(why) for _, why in failed)


def version_key(v: str) -> tuple[int, ...]:
    """'6.16.12-1~bpo13+1' -> (6, 16, 12, 1, 13, 1). Also sorts versions an
    image's boot entries give: runs of digits are cut at 18, so no text makes
    an integer too long to convert."""
    return tuple(int(x) for x in re.findall(r"\d{1,18}", v))


@dataclass(frozen=True)
class DebKernel:
    upstream: str      # 6.16.12
    abi: str           # 6.16.12+deb13, or 6.1.0-56 in the older naming
    flavour: str       # amd64, cloud-amd64, rt-amd64
    package: str       # linux-image-6.16.12+deb13-amd64
    version: str       # Debian version 6.16.12-1~bpo13+1
    suite: str         # trixie-backports
    image_package: str  # where vmlinuz is: the linux-image or linux-binary package
    config_package: str
    modules_package: str = ""  # where the modules are, when that is another package

    @property
    def release(self) -> str:
        return f"{self.abi}-{self.flavour}"

    @property
    def canonical(self) -> str:
        return f"debian:{self.release}"

    @property
    def short_spec(self) -> str:
        """debian:6.16.12, or with its flavour when not the default's: debian:6.16.12-arm64"""
        return f"debian:{self.upstream}" + ("" if self.flavour == DEFAULT_FLAVOUR else f"-{self.flavour}")


class Archive:
    """Private apt state of one architecture's packages: <cache>/apt for the
    first one's, <cache>/apt-ARCH for another's (so its lists are fetched only
    by whoever asks for its kernels); every apt call is bounded in time."""

    def __init__(self, root: Path | None = None, arch: str = DEFAULT_ARCH) -> None:
        self.arch = arch  # Debian's name
        self.root = root or paths.cache_dir() / ("apt" if arch == DEFAULT_ARCH else f"apt-{arch}")
        self.lists = self.root / "lists"
        self.index_path = self.root / "kernels.json"
        # when every suite last answered: a stamp of kstall's own, since touching
        # apt's files would make apt parse all the lists again at its next call
        self.refreshed = self.root / "refreshed"
        self.refresh_failed = self.root / "refresh-failed"  # when a suite last did not answer

    def opts(self) -> list[str]:
        return ["-o", f"Dir::Etc::SourceList={self.root / 'sources.list'}",
                "-o", f"Dir::Etc::SourceParts={self.root / 'sources.list.d'}",
                "-o", f"Dir::Etc::Preferences={self.root / 'preferences'}",
                "-o", f"Dir::Etc::PreferencesParts={self.root / 'preferences.d'}",
                "-o", f"Dir::State::Lists={self.lists}",
                "-o", f"Dir::Cache={self.root / 'cache'}",
                "-o", "Dir::State::status=/dev/null",
                "-o", "Debug::NoLocking=1",
                "-o", f"APT::Architecture={self.arch}", "-o", f"APT::Architectures={self.arch}",
                "-o", "Acquire::Languages=none", "-o", "Acquire::Retries=3"]

    @contextmanager
    def locked(self) -> Iterator[None]:
        self.root.mkdir(parents=True, exist_ok=True)
        with open(self.root / "lock", "w") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            yield

    def sources_text(self) -> str:
        return "".join(l + "\n" for l in SUITES.read_text().splitlines() if l.strip() and not l.startswith("#"))

    def _prepare(self) -> None:
        for d in (self.lists / "partial", self.root / "cache" / "archives" / "partial",
                  self.root / "sources.list.d", self.root / "preferences.d"):
            d.mkdir(parents=True, exist_ok=True)
        src = self.sources_text()
        target = self.root / "sources.list"
        if not target.exists() or target.read_text() != src:
            target.write_text(src)
            self.index_path.unlink(missing_ok=True)
            for f in self.lists.glob("*_Packages*"):
                f.unlink()

    def _run(self, tool: str, args: list[str], timeout: float) -> str:
        return self._exec(tool, args, timeout).stdout

    def _exec(self, tool: str, args: list[str], timeout: float, fails_ok: re.Pattern | None = None
              ) -> subprocess.CompletedProcess:
        # apt's binary cache of the lists, which Debian's container images turn
        # off (docker-clean): without it every apt call parses all 7 suites again
        # (3.4 s each here), with it 0.1 s. It is a speed-up only: on a disk too
        # full for its 95 MB the call runs again without it.
        pkgcache = self.root / "cache" / "pkgcache.bin"
        what = f"{tool} {' '.join(args)}"
        p = self._bounded([tool, *self.opts(), "-o", f"Dir::Cache::pkgcache={pkgcache}", *args], what, timeout)
        if p.returncode != 0 and "IO Error saving" in p.stderr:
            pkgcache.unlink(missing_ok=True)
            p = self._bounded([tool, *self.opts(), "-o", "Dir::Cache::pkgcache=", *args], what, timeout)
        if p.returncode != 0 and not (fails_ok and fails_ok.search(p.stderr)):
            raise SpecError(f"{what} failed: {p.stderr.strip()[-500:]}")
        return p

    @staticmethod
    def _bounded(cmd: list[str], what: str, timeout: float) -> subprocess.CompletedProcess:
        try:  # dies with kstall, even a SIGKILLed one
            return procs.run_bounded(cmd, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise SpecError(f"{what} took longer than {timeout:.0f}s (network?)") from None

    def _apt_update(self) -> list[tuple[str, str]]:
        """apt-get update; the suites it could not fetch.
        partial/ is emptied first: apt resumes what it finds there, and a file
        that failed its check or a killed update left there is kept as it is."""
        shutil.rmtree(self.lists / "partial", ignore_errors=True)
        (self.lists / "partial").mkdir(parents=True, exist_ok=True)
        return FETCH_FAILED.findall(self._exec("apt-get", ["update", "-q"], timeout=300, fails_ok=FETCH_FAILED).stderr)

    def _unlisted(self, failed: list[tuple[str, str]]) -> list[str]:
        """The failed suites without a package list of their own (apt names a
        list after its URL, '/' turned to '_')."""
        out = []
        for url, _ in failed:
            prefix = url.split("://", 1)[-1].rsplit("/", 1)[0].replace("/", "_")
            if not any(f.name.startswith(prefix + "_") for f in self.lists.glob("*_Packages*")):
                out.append(url.split("/dists/")[-1].split("/")[0])
        return out

    def update(self, force: bool = False, progress: Progress | None = None) -> None:
        with self.locked():
            self._prepare()
            fresh = _age(self.refreshed) < LISTS_MAX_AGE
            failed_lately = _age(self.refresh_failed) < RETRY_FAILED_AFTER
            if (fresh or failed_lately) and not force and self.index_path.exists():
                if not fresh and progress:
                    progress(f"Debian's suites failed to refresh {_age(self.refresh_failed) / 60:.0f} min ago: "
                             f"using the package lists kstall has (it asks again {RETRY_FAILED_AFTER // 60} min "
                             "after the failure)")
                return
            if progress:
                progress("updating Debian package lists (private apt state)")
            try:
                failed = self._apt_update()
            except SpecError as e:
                # an apt-get killed mid-update (kstall was) leaves lists apt cannot read again
                if progress:
                    progress(f"the private apt lists are damaged ({str(e)[-120:]}): fetching them afresh")
                shutil.rmtree(self.lists, ignore_errors=True)
                self._prepare()
                failed = self._apt_update()
            if worth_retrying(failed):  # a mirror's passing glitch: one more go (suites already current answer 304)
                if progress:
                    progress(f"{len(failed)} Debian suite(s) failed to refresh ({failed[0][0]}): trying once more")
                failed = self._apt_update()
            if failed:
                url, why = failed[0]
                if not any(self.lists.glob("*_Packages*")):
                    raise SpecError(f"cannot reach Debian's suites ({len(failed)} failed; {url}: {why.strip()}): "
                                    "check the network, or http_proxy")
                self.refresh_failed.touch()  # the lists stay unstamped: a run after the pause retries
                if progress:  # old lists still name the kernels
                    unlisted = self._unlisted(failed)
                    progress(f"could not refresh {len(failed)} Debian suite(s) ({url}: {why.strip()}): "
                             "using the package lists kstall already has"
                             + (f" (none for {', '.join(unlisted)}: its kernels are missing)" if unlisted else ""))
            else:
                self.refreshed.touch()
                self.refresh_failed.unlink(missing_ok=True)
            self._write_index()

    def _write_index(self) -> None:
        names = self._run("apt-cache", ["pkgnames", "linux-"], timeout=120).split()
        wanted = sorted(n for n in names if _NAME.match(n) or _OLD_NAME.match(n))
        out = self._run("apt-cache", ["madison", *wanted], timeout=120) if wanted else ""
        rows: dict[str, tuple[str, str]] = {}
        for line in out.splitlines():
            parts = [p.strip() for p in line.split("|")]
            if len(parts) < 3:
                continue
            name, version, where = parts[0].split(":")[0], parts[1], parts[2].split()  # name:arm64: a foreign one
            suite = where[1].split("/")[0] if len(where) > 1 else "?"
            if name not in rows or version_key(version) > version_key(rows[name][0]):
                rows[name] = (version, suite)
        kernels = []
        for name, (version, suite) in rows.items():
            if old := _OLD_NAME.match(name):
                if upstream := packages.upstream_of(version):
                    kernels.append(DebKernel(upstream, old.group(1), old.group(2), name, version, suite,
                                             name, name, name))
                continue
            m = _NAME.match(name)
            if not m or m.group(1) != "image":
                continue
            upstream, abi, flavour = m.group(2), f"{m.group(2)}+{m.group(3)}", m.group(4)
            split = {part: f"linux-{part}-{abi}-{flavour}" for part in ("binary", "base", "modules")}
            if split["binary"] in rows:
                kernels.append(DebKernel(upstream, abi, flavour, name, version, suite, split["binary"],
                                         split["base"] if split["base"] in rows else split["binary"],
                                         split["modules"] if split["modules"] in rows else split["binary"]))
            else:
                kernels.append(DebKernel(upstream, abi, flavour, name, version, suite, name, name, name))
        kernels.sort(key=lambda k: (version_key(k.upstream), version_key(k.abi), k.flavour))
        paths.write_atomic(self.index_path, json.dumps([asdict(k) for k in kernels], indent=1))

    def kernels(self, progress: Progress | None = None) -> list[DebKernel]:
        self.update(progress=progress)
        return [DebKernel(**d) for d in json.loads(self.index_path.read_text())]

    def uris(self, package: str) -> tuple[str, str, int, str]:
        """(url, file name, size, sha256) of a package's .deb."""
        out = self._run("apt-get", ["--print-uris", "download", package], timeout=120)
        m = re.search(r"^'([^']+)'\s+(\S+)\s+(\d+)\s+SHA256:([0-9a-f]{64})", out, re.M)
        if not m:
            raise SpecError(f"apt gave no download address for {package}")
        return m.group(1), m.group(2), int(m.group(3)), m.group(4)


def parse_query(text: str) -> tuple[str | None, str | None, str]:
    """'6.16.12' | '6.16.12+deb13' | '6.16.12-rt' | '6.16.12+deb13-cloud-amd64' |
    '6.1.0-56' | '6.1.0-56-cloud' -> (upstream or None, abi or None, flavour)."""
    old = re.fullmatch(rf"(\d+\.\d+\.\d+-\d+)(?:-((?:\w+-)?(?:{_ARCHES})|\w+))?", text)
    if old:
        return None, old.group(1), _flavour(old.group(2))
    m = re.fullmatch(rf"(\d+\.\d+(?:\.\d+)?)(\+deb\d+(?:\.\d+)?)?(?:-((?:\w+-)?(?:{_ARCHES})|\w+))?", text)
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


def _age(stamp: Path) -> float:
    """Seconds since the stamp was touched (forever when there is none)."""
    try:
        return time.time() - stamp.stat().st_mtime
    except OSError:
        return float("inf")
