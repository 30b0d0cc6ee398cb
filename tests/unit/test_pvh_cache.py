# SPDX-License-Identifier: GPL-2.0
"""The PVH ELF cache: bounded, most recently booted kept, no half files left."""
import os
import subprocess
import sys

from harness.base.kernel_cache import KernelKey
from images.guest import pvh


def _elf(d, name, size, mtime):
    p = d / f"{name}.elf"
    p.write_bytes(b"\x01" * size)
    os.utime(p, (mtime, mtime))
    return p


def test_prune_drops_the_least_recently_booted_beyond_the_cap(tmp_path):
    old, mid, new = (_elf(tmp_path, n, 8192, t) for n, t in (("old", 100), ("mid", 200), ("new", 300)))
    assert pvh.prune(tmp_path, keep_bytes=16384) == [old]
    assert mid.exists() and new.exists()


def test_prune_keeps_the_newest_even_over_the_cap(tmp_path):
    new = _elf(tmp_path, "new", 8192, 300)
    old = _elf(tmp_path, "old", 8192, 100)
    assert pvh.prune(tmp_path, keep_bytes=0) == [old]
    assert new.exists()


def test_prune_removes_half_files_of_dead_processes_only(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", ""])
    dead.wait()
    orphan = tmp_path / f"a.elf.{dead.pid}.part"
    live = tmp_path / f"b.elf.{os.getpid()}.part"
    orphan.write_bytes(b"x")
    live.write_bytes(b"x")
    assert pvh.prune(tmp_path) == [orphan]
    assert live.exists()


def test_a_file_that_is_no_bzimage_boots_as_given_and_is_remembered(tmp_path, monkeypatch):
    monkeypatch.setenv("KSTALL_CACHE", str(tmp_path / "cache"))
    kernel = tmp_path / "vmlinuz"
    kernel.write_bytes(b"\0" * 4096)
    assert pvh.boot_file(kernel, KernelKey("ab" * 32, "x86_64")) == kernel
    assert (tmp_path / "cache" / "pvh" / f"x86_64-{'ab' * 32}.none").is_file()
