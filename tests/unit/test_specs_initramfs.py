# SPDX-License-Identifier: GPL-2.0
"""Kernel spec parsing, version matching and the initramfs format."""
import os
import subprocess

import pytest

from images.kernels import debian, filekernel
from images.guest import initramfs
from images.kernels.kernel import SpecError
from images.kernels.schemes import resolve


def k(upstream, abi_suffix="deb13", flavour="amd64", version=None):
    abi = f"{upstream}+{abi_suffix}"
    return debian.DebKernel(upstream, abi, flavour, f"linux-image-{abi}-{flavour}", version or f"{upstream}-1",
                            "trixie", f"linux-image-{abi}-{flavour}", f"linux-image-{abi}-{flavour}")


INDEX = [k("6.12.94", "deb12"), k("6.12.94"), k("6.12.107"), k("6.16.12"), k("6.16.12", flavour="rt-amd64"),
         k("6.17.8"), k("7.3.4")]


def test_parse_query_forms():
    assert debian.parse_query("6.16.12") == ("6.16.12", None, "amd64")
    assert debian.parse_query("6.12.94+deb12") == ("6.12.94", "6.12.94+deb12", "amd64")
    assert debian.parse_query("6.16.12-rt") == ("6.16.12", None, "rt-amd64")
    assert debian.parse_query("6.16.12+deb13-cloud-amd64") == ("6.16.12", "6.16.12+deb13", "cloud-amd64")
    with pytest.raises(SpecError):
        debian.parse_query("latest")


def test_find_prefers_newest_packaging_and_honours_flavour():
    assert debian.find(INDEX, "6.12.94").abi == "6.12.94+deb13"
    assert debian.find(INDEX, "6.12.94+deb12").abi == "6.12.94+deb12"
    assert debian.find(INDEX, "6.16.12-rt").flavour == "rt-amd64"


def test_unknown_version_names_the_nearest():
    with pytest.raises(SpecError) as e:
        debian.find(INDEX, "9.9.9")
    assert "nearest: 6.16.12, 6.17.8, 7.3.4" in str(e.value)
    with pytest.raises(SpecError) as e:
        debian.find(INDEX, "6.16.13")
    assert "6.16.12" in str(e.value) and "6.17.8" in str(e.value)


def test_spec_schemes():
    with pytest.raises(SpecError, match="no scheme"):
        resolve("6.16.12")
    with pytest.raises(SpecError, match="unknown kernel scheme"):
        resolve("ova:foo")
    with pytest.raises(SpecError, match="no such file"):
        resolve("file:/nonexistent/bzImage")


def test_bzimage_release_from_setup_header():
    blob = bytearray(0x1000)
    blob[0x202:0x206] = b"HdrS"
    blob[0x20E:0x210] = (0x300).to_bytes(2, "little")
    ver = b"6.17.8+deb13-amd64 (debian-kernel@lists.debian.org) #1 SMP\0"
    blob[0x500:0x500 + len(ver)] = ver
    assert filekernel.bzimage_release(bytes(blob)) == "6.17.8+deb13-amd64"
    assert filekernel.bzimage_release(b"\0" * 0x1000) is None


def test_initramfs_is_a_valid_newc_archive_with_a_console_node(tmp_path):
    blob = initramfs.newc_archive({"init": b"\x7fELF...", "bin/perf-refresh": b"x" * 5})
    p = tmp_path / "i.cpio"
    p.write_bytes(blob)
    out = subprocess.run(["cpio", "-itv"], stdin=open(p, "rb"), capture_output=True, text=True, check=True).stdout
    assert "dev/console" in out and "init" in out and "bin/perf-refresh" in out
    assert any(l.startswith("crw") and "5,   1" in l for l in out.splitlines())
    assert initramfs.newc_archive({"init": b"a"}) == initramfs.newc_archive({"init": b"a"})


def test_every_reproducer_data_file_loads():
    from harness.base import reproducers
    names = reproducers.names()
    assert {"perf-refresh", "bpf-ringbuf", "signal-malloc", "console-trigger"} <= set(names)
    for n in names:
        assert reproducers.load(n).name == n


def test_the_guest_binaries_do_not_name_the_clone_they_were_built_in():
    # the initramfs (and so every snapshot) is keyed on their bytes: a build
    # that named its directory would boot every kernel afresh in each new clone
    from harness.base import arch, paths
    where = str(paths.REPO.resolve()).encode()
    binaries = [p for p in paths.guest_dir(arch.DEFAULT).iterdir() if p.is_file()]
    assert binaries, "run `make guest`"
    named = [p.name for p in binaries if where in p.read_bytes()]
    assert named == [], f"{named} name {where.decode()}: built before the Makefile mapped it? `make clean guest`"


def test_a_cached_kernel_is_hashed_again_only_when_its_file_was_written(tmp_path, monkeypatch):
    from images.kernels import cached, kernel
    d = tmp_path / "k"
    d.mkdir()
    vmlinuz = d / "vmlinuz"
    vmlinuz.write_bytes(b"A" * 4096)
    cached.write_meta(d, kernel.Kernel(spec="file:x", canonical="file:x", vmlinuz=vmlinuz,
                                       sha256=kernel.sha256_file(vmlinuz)))
    hashed = []
    real = kernel.sha256_file
    monkeypatch.setattr(cached, "sha256_file", lambda p: hashed.append(p) or real(p))
    assert cached.damage(d) is None and cached.damage(d) is None
    assert len(hashed) == 1  # the second look trusts the stat the first one noted
    vmlinuz.write_bytes(b"B" * 4096)  # same size, new content: its ctime moved
    assert "sha256 mismatch" in (cached.damage(d) or "")
    assert len(hashed) == 2


def test_a_kernels_config_is_read_once_and_again_when_rewritten(tmp_path):
    from images.kernels import kernel
    config = tmp_path / "config"
    config.write_text('# CONFIG_A is not set\nCONFIG_B=m\nCONFIG_C="x y"\n')
    k = kernel.Kernel(spec="file:x", canonical="file:x", vmlinuz=tmp_path / "v", sha256="0", config=config)
    assert (k.config_value("CONFIG_A"), k.config_value("CONFIG_B"), k.config_value("CONFIG_C")) == (None, "m", "x y")
    config.write_text("CONFIG_B=y\n")
    os.utime(config, ns=(1, 1))  # a rewrite within one tick of the clock is still seen: mtime moved
    assert k.config_value("CONFIG_B") == "y"
