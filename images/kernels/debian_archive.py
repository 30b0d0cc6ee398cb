# SPDX-License-Identifier: GPL-2.0
"""Debian's archive as kstall reads it: a private apt state per architecture
(the suites of images/debian-suites.list, apt's lists under ~/.cache/kstall,
every apt call bounded), the index of kernel packages kstall derives from
them (package names by version and flavour, DebKernel) and the downloads.
images/kernels/debian.py resolves debian:VERSION over it."""
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
from images.kernels import packages
from images.kernels.kernel import Progress, SpecError

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
ARCH_NAMES = "|".join(re.escape(a) for a in DEBIAN_ARCHES)
_NAME = re.compile(rf"^linux-(image|binary|base|modules)-(\d+\.\d+(?:\.\d+)?)\+(deb\d+(?:\.\d+)?)"
                   rf"-((?:\w+-)?(?:{ARCH_NAMES}))$")
# bookworm's stock kernel: linux-image-6.1.0-56-amd64, upstream version in Version
_OLD_NAME = re.compile(rf"^linux-image-(\d+\.\d+\.\d+-\d+)-((?:\w+-)?(?:{ARCH_NAMES}))$")
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


def _age(stamp: Path) -> float:
    """Seconds since the stamp was touched (forever when there is none)."""
    try:
        return time.time() - stamp.stat().st_mtime
    except OSError:
        return float("inf")
