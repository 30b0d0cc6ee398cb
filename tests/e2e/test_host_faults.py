# SPDX-License-Identifier: GPL-2.0
"""Faults of the host around kstall: Debian's mirror unreachable, a download
cut off mid-way, a full disk under the cache or the results. Each ends in an
ERROR that names the fault, leaves nothing half-written, and the next run
on the same cache gets the right verdict."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from harness.base import paths
from helpers import KSTALL, SERVES, children_using, kstall_processes, verify_with_fault, wait_for
from netfault import CuttingProxy, closed_port

pytestmark = pytest.mark.e2e

KERNEL = "debian:6.17.8"
PACKAGE = "linux-image-6.17.8+deb13-amd64"
root_only = pytest.mark.skipif(os.geteuid() != 0, reason="mounts a small tmpfs")


def verify(cache: Path, results: Path, **env: str) -> tuple[int, dict, str]:
    p = subprocess.run([*KSTALL, "verify", KERNEL, SERVES, "--json", "--results", str(results)],
                       capture_output=True, text=True, timeout=900,
                       env={**os.environ, "KSTALL_CACHE": str(cache), **env})
    assert not [l for l in p.stderr.splitlines() if l.startswith("Traceback")], p.stderr[-3000:]
    return p.returncode, json.loads(p.stdout) if p.stdout.strip().startswith("{") else {}, p.stderr


def with_lists(cache: Path, age_s: float = 0) -> None:
    """The apt lists of the shared cache, as old as age_s (fresh lists are not updated)."""
    shutil.copytree(paths.cache_dir() / "apt", cache / "apt", symlinks=True, dirs_exist_ok=True)
    t = time.time() - age_s
    (cache / "apt" / "refreshed").touch()
    os.utime(cache / "apt" / "refreshed", (t, t))
    (cache / "apt" / "refresh-failed").unlink(missing_ok=True)  # the shared cache's own pause is not this test's


def kernel_leftovers(cache: Path) -> list[str]:
    """What a failed download left in the kernel's cache directory (its lock may stay)."""
    return sorted(p.name for d in (cache / "kernels" / "debian").glob("6.17.8*") for p in d.iterdir()
                  if p.name != "lock")


def test_an_unreachable_mirror_or_a_cut_download_is_an_error_naming_it_and_the_cache_recovers(tmp_path):
    cache, results = tmp_path / "cache", tmp_path / "results"
    nowhere = f"http://127.0.0.1:{closed_port()}"
    # a cold cache and no way to Debian: nothing to fall back on
    rc, doc, err = verify(cache, results, http_proxy=nowhere)
    assert rc == 4 and doc["verdict"] == "ERROR" and "cannot reach Debian's suites" in doc["reason"], err[-2000:]
    assert children_using(cache) == []
    # old lists, mirror gone: the lists serve, the download says why it failed
    with_lists(cache, age_s=7 * 3600)
    rc, doc, err = verify(cache, results, http_proxy=nowhere)
    assert "could not refresh 7 Debian suite(s)" in err and "using the package lists kstall already has" in err, \
        err[-2000:]
    assert rc == 4 and f"cannot download {PACKAGE} from deb.debian.org" in doc["reason"], doc
    assert (cache / "apt" / "refreshed").stat().st_mtime < time.time() - 6 * 3600, \
        "a failed refresh must not mark the lists fresh"
    assert kernel_leftovers(cache) == []
    # at once again: a mirror that just failed is not asked again for a while (a matrix asked once a cell)
    rc, doc, err = verify(cache, results, http_proxy=nowhere)
    assert "could not refresh" not in err and "Debian's suites failed to refresh 0 min ago" in err, err[-2000:]
    assert rc == 4 and f"cannot download {PACKAGE} from deb.debian.org" in doc["reason"], doc
    # the connection drops 4 MiB into the package
    with_lists(cache)
    with CuttingProxy(4 << 20) as proxy:
        rc, doc, err = verify(cache, results, http_proxy=proxy.url)
    assert proxy.cut, "the download did not go through the proxy"
    assert rc == 4 and f"download of {PACKAGE} from deb.debian.org broke off after 4194304 of" in doc["reason"], \
        doc.get("reason", err[-2000:])
    assert kernel_leftovers(cache) == [] and not (results.exists() and list(results.iterdir()))
    # the network is back: the same cache serves a whole run
    rc, doc, err = verify(cache, results)
    assert rc == 0 and doc["verdict"] == "NOT_REPRODUCED", err[-2000:]
    assert kstall_processes() == []


def test_a_suite_whose_answer_comes_half_is_fetched_again_not_left_without_its_kernels(tmp_path):
    # CI once met this: an apt-get killed mid-update had kept the suites' InRelease
    # but not yet their package lists; the next update's InRelease for two suites
    # failed its signature split, apt kept the old ones with a warning, and a whole
    # run then said there was no such kernel
    cache = tmp_path / "cache"
    with_lists(cache, age_s=7 * 3600)
    for f in (cache / "apt" / "lists").glob("*_Packages*"):
        f.unlink()
    with CuttingProxy(garble="/dists/trixie-backports/InRelease") as proxy:
        p = subprocess.run([*KSTALL, "kernels", "--available"], capture_output=True, text=True, timeout=600,
                           env={**os.environ, "KSTALL_CACHE": str(cache), "http_proxy": proxy.url})
    assert proxy.garbled, "apt did not go through the proxy"
    assert p.returncode == 0 and "trying once more" in p.stderr, p.stderr[-2000:]
    assert "could not refresh" not in p.stderr and KERNEL in p.stdout.split(), p.stderr[-2000:]
    assert children_using(cache) == []


@contextmanager
def small_disk(where: Path, size: str):
    where.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "kstall-test", str(where)], check=True)
    try:
        yield lambda new: subprocess.run(["mount", "-o", f"remount,size={new}", str(where)], check=True)
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


@root_only
def test_a_full_cache_disk_is_an_error_naming_it_and_leaves_no_half_kernel(tmp_path):
    cache, results = tmp_path / "cache", tmp_path / "results"
    lists = sum(f.stat().st_size for f in (paths.cache_dir() / "apt").rglob("*") if f.is_file())
    with small_disk(cache, str(lists + (40 << 20))) as grow:
        with_lists(cache)  # then 40 MiB are left for a 169 MB package
        rc, doc, err = verify(cache, results)
        assert rc == 4 and doc["verdict"] == "ERROR", err[-2000:]
        assert f"cannot store {PACKAGE} in" in doc["reason"] and "No space left on device" in doc["reason"], doc
        assert kernel_leftovers(cache) == [] and children_using(cache) == []
        grow("1g")
        rc, doc, err = verify(cache, results)
        assert rc == 0 and doc["verdict"] == "NOT_REPRODUCED", err[-2000:]


def fill(disk: Path) -> None:
    with open(disk / "filler", "wb", buffering=0) as f:
        try:
            while f.write(b"\0" * 4096):
                pass
        except OSError:  # ENOSPC: full
            pass


@root_only
def test_a_full_results_disk_is_an_error_naming_it_and_leaves_no_half_run(tmp_path):
    results = tmp_path / "results"
    with small_disk(results, "16m"):
        def fill_mid_run(proc):  # the disk fills up while the guest runs (something else wrote to it)
            assert wait_for(lambda: list(results.glob(".*.incomplete/attempt-1/console.log")), 120)
            fill(results)
        rc, doc, err = verify_with_fault(results, [KERNEL, "perf-refresh"], fault=fill_mid_run)
        assert rc == 4 and doc["verdict"] == "ERROR", err[-2000:]
        # what the run had said: its verdict, or the full disk itself when one of its
        # own writes (console.log, the agent's log) met it first
        assert doc["reason"].startswith(f"no space left for the results in {results}") and \
            ("it said NOT_REPRODUCED" in doc["reason"] or "it said ERROR: no space left" in doc["reason"]), \
            doc["reason"]
        assert [p.name for p in results.iterdir()] == ["filler"], "a half-written run was left"
        assert kstall_processes() == []
        (results / "filler").unlink()
        rc, doc, err = verify(paths.cache_dir(), results)
        assert rc == 0 and (results / Path(doc["results_dir"]).name / "run.json").exists(), err[-2000:]


def test_a_killed_qemu_leaves_no_overlay_of_a_throwaway_disk(tmp_path):
    """A work disk's snapshot=on overlay (up to 2 GiB) lives in TMPDIR while
    its guest writes: QEMU unlinks it as soon as it has it open (measured:
    within 0.5 s of its start, the guest not yet running), so a QEMU killed
    outright leaves nothing there for the leftover sweep to find."""
    from harness.guest import machine
    from images.guest.disks import Disk, qemu_args
    image, tmp = tmp_path / "work.ext4", tmp_path / "tmp"
    image.write_bytes(bytes(1 << 20))
    tmp.mkdir()
    p = subprocess.Popen([machine.qemu("x86_64"), "-S", "-display", "none", "-nodefaults", "-machine", "q35",
                          *qemu_args((Disk(image, "kstall-work", throwaway=True),))],
                         env={**os.environ, "TMPDIR": str(tmp)}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        def link(fd: Path) -> str:
            try:
                return os.readlink(fd)
            except OSError:  # closed since the listing (a busy host widens that window: a flake seen)
                return ""

        def open_and_unlinked() -> bool:
            links = [link(f) for f in Path(f"/proc/{p.pid}/fd").iterdir()]
            return any(s.startswith(str(tmp)) for s in links) and not list(tmp.iterdir())
        assert wait_for(open_and_unlinked, 30), list(tmp.iterdir())
    finally:
        p.kill()
        p.wait(30)
    assert list(tmp.iterdir()) == []
