# SPDX-License-Identifier: GPL-2.0
"""Distro kernels as shipped, booted for real: bookworm's 6.1 (virtio as
modules), .deb and Fedora-layout .rpm files, qcow2 disk images read by
libguestfs (and booted with their own userspace), the kernel-config
preflight, and bad input. The artefacts are made from Debian's packages by
tests/distro_assets.py and cached."""
from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

import distro_assets
from helpers import kstall, kstall_processes, verify_json

pytestmark = pytest.mark.e2e
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="building the test disk images needs root (chroot)")


@pytest.fixture(autouse=True)
def no_leftover_processes():
    yield
    assert kstall_processes() == [], "a qemu or gdb outlived its run"


def joined(paths: list[Path]) -> str:
    return ",".join(str(p) for p in paths)


def sha256(path: Path) -> str:
    from images.kernels.kernel import sha256_file
    return sha256_file(path)


# -- bookworm's own 6.1: the agent's channel over loaded modules ---------------

@pytest.mark.parametrize("repro", ["perf-refresh", "bpf-ringbuf"])
def test_bookworm_61_loads_its_virtio_modules_and_reaches_a_verdict(tmp_path, repro):
    rc, doc, err = verify_json(tmp_path, "debian:6.1.192", repro)
    # 6.1 has neither the perf culprit (18dbcbfabfff) nor the rqspinlock ringbuf (6.15)
    assert rc == 0 and doc["verdict"] == "NOT_REPRODUCED", err[-2000:]
    assert doc["kernel"]["release"].startswith("6.1.0-") and "virtio_console" in doc["kernel"]["modules"]
    assert doc["guest"]["uname"] == doc["kernel"]["release"]  # the agent talked over the loaded virtio console
    console = (Path(doc["results_dir"]) / "console.log").read_text(errors="replace")
    assert "kstall-agent: loaded 6 module(s)" in console


# -- package files -----------------------------------------------------------

def test_deb_of_an_affected_kernel_is_vulnerable(tmp_path):
    rc, doc, err = verify_json(tmp_path, f"deb:{joined(distro_assets.debian_debs('6.16.12'))}", "perf-refresh",
                               "--cpus", "4")
    assert rc == 1 and doc["signature"] == "hrtimer_cancel_self_deadlock", err[-2000:]
    assert doc["kernel"]["canonical"] == "deb:6.16.12+deb13-amd64" and doc["kernel"]["upstream"] == "6.16.12"


def test_deb_of_a_fixed_kernel_is_not_reproduced(tmp_path):
    rc, doc, err = verify_json(tmp_path, f"deb:{joined(distro_assets.debian_debs('6.17.8'))}", "perf-refresh")
    assert rc == 0 and doc["verdict"] == "NOT_REPRODUCED", err[-2000:]


def test_fedora_layout_rpm_of_6_16_12_is_vulnerable(tmp_path):
    rpms = distro_assets.fedora_rpms("6.16.12", "xz")
    rc, doc, err = verify_json(tmp_path, f"rpm:{joined(rpms)}", "perf-refresh", "--cpus", "4")
    assert rc == 1 and doc["signature"] == "hrtimer_cancel_self_deadlock", err[-2000:]


def test_fedora_layout_rpm_of_6_1_with_zstd_modules_loads_them(tmp_path):
    rpms = distro_assets.fedora_rpms("6.1.192", "zst")
    rc, doc, err = verify_json(tmp_path, f"rpm:{joined(rpms)}", "perf-refresh")
    assert rc == 0 and doc["verdict"] == "NOT_REPRODUCED", err[-2000:]  # as debian:6.1.192
    assert doc["kernel"]["modules"]["virtio_console"][-1] == "virtio_console"


# -- disk images -------------------------------------------------------------

@needs_root
def test_image_default_mode_then_cached_and_unchanged(tmp_path):
    img = distro_assets.disk_image("6.16.12")
    before = sha256(img)
    rc, doc, err = verify_json(tmp_path, f"image:{img}", "perf-refresh", "--cpus", "4")
    assert rc == 1 and doc["signature"] == "hrtimer_cancel_self_deadlock", err[-2000:]
    origin = doc["kernel"]["origin"]
    assert doc["kernel"]["release"] == "6.16.12+deb13-amd64" and "grub's default" in origin["why"]
    assert origin["image"] == str(img) and origin["format"] == "qcow2" and len(origin["identity"]) == 64
    t0 = time.monotonic()
    p = kstall("symbols", f"image:{img}")  # from the cache: no libguestfs
    assert p.returncode == 0 and time.monotonic() - t0 < 10 and "reading" not in p.stderr, p.stderr
    assert sha256(img) == before


@needs_root
def test_image_boot_image_mode_runs_the_images_own_init(tmp_path):
    img = distro_assets.disk_image("6.16.12")
    before = sha256(img)
    rc, doc, err = verify_json(tmp_path, f"image:{img}", "perf-refresh", "--cpus", "4", "--boot-image")
    assert rc == 1 and doc["signature"] == "hrtimer_cancel_self_deadlock", err[-2000:]
    assert doc["guest"]["init"] == "systemd" and doc["vm"]["boot_image"]
    assert "root=UUID=" in doc["vm"]["cmdline"] and "nokaslr" in doc["vm"]["cmdline"]
    assert sha256(img) == before
    assert not list(Path("/tmp").glob("kstall-boot-image-*")), "the run's overlay was not removed"


@needs_root
def test_image_with_a_fixed_kernel_is_not_reproduced(tmp_path):
    img = distro_assets.disk_image("6.17.8")
    before = sha256(img)
    rc, doc, err = verify_json(tmp_path, f"image:{img}", "perf-refresh")
    assert rc == 0 and doc["verdict"] == "NOT_REPRODUCED", err[-2000:]
    assert sha256(img) == before


# -- preflight and the agent's own diagnosis ---------------------------------

def test_kernel_without_bpf_syscall_is_inconclusive_before_booting(tmp_path):
    from images.kernels.schemes import resolve
    k = resolve("debian:6.16.12")
    d = tmp_path / "kernel"
    d.mkdir()
    shutil.copy(k.vmlinuz, d / "bzImage")
    config = k.config.read_text().replace("CONFIG_BPF_SYSCALL=y", "# CONFIG_BPF_SYSCALL is not set")
    (d / ".config").write_text(config)
    t0 = time.monotonic()
    rc, doc, err = verify_json(tmp_path / "r", f"file:{d / 'bzImage'}", "bpf-ringbuf")
    assert time.monotonic() - t0 < 5
    assert rc == 3 and doc["verdict"] == "INCONCLUSIVE" and "CONFIG_BPF_SYSCALL" in doc["reason"], err
    assert doc["outcome"]["kind"] == "preflight"


def test_modular_kernel_without_its_modules_gets_the_agents_diagnosis(tmp_path):
    from images.kernels.schemes import resolve
    bare = tmp_path / "vmlinuz-6.1"
    shutil.copy(resolve("debian:6.1.192").vmlinuz, bare)  # no config, no modules beside it
    rc, doc, err = verify_json(tmp_path / "r", f"file:{bare}", "perf-refresh")
    assert rc == 4 and doc["verdict"] == "ERROR", err
    assert "guest agent could not run: no virtio port org.kstall.agent" in doc["reason"]


# -- bad input: a clear error, exit 4, nothing left behind --------------------

def assert_clean_error(tmp_path: Path, spec: str, words: str) -> None:
    from harness.base import paths

    def entries() -> set[Path]:
        return set((paths.cache_dir() / "kernels").glob("*/*"))
    before = entries()
    rc, doc, err = verify_json(tmp_path / "r", spec, "perf-refresh")
    assert rc == 4 and doc.get("verdict") == "ERROR" and words in err, err[-1500:]
    assert not (tmp_path / "r").exists() or not list((tmp_path / "r").iterdir()), "a run directory was left"
    left = {p for p in entries() - before if p.name != "identity.json"}
    assert left == set(), f"left in the cache: {left}"


def test_bad_input_is_a_clear_error(tmp_path):
    assert_clean_error(tmp_path, f"deb:{distro_assets.empty_deb(tmp_path)}", "holds no kernel")
    rpms = distro_assets.fedora_rpms("6.1.192", "zst")
    core = [r for r in rpms if "kernel-core" in r.name]
    assert_clean_error(tmp_path, f"rpm:{joined(core)}", "needs module virtio_pci")
    corrupt = tmp_path / "corrupt.qcow2"
    corrupt.write_bytes(b"QFI\xfb" + b"\x00\x00\x00\x03" + os.urandom(4096))
    assert_clean_error(tmp_path, f"image:{corrupt}", "not a disk image qemu-img can read")


@needs_root
def test_image_with_no_kernel_on_lvm_and_xfs_is_a_clear_error(tmp_path):
    assert_clean_error(tmp_path, f"image:{distro_assets.no_kernel_image()}", "the image has no kernel")


def test_unknown_scheme_lists_the_new_ones():
    p = kstall("verify", "ova:/x", "perf-refresh")
    assert p.returncode == 4 and "deb:PATH" in p.stderr and "image:PATH" in p.stderr and "rpm:PATH" in p.stderr


def test_module_that_fails_to_load_is_an_error_naming_it(tmp_path):
    """bookworm's 6.1 installed under a root (/boot and /lib/modules, as file:
    reads a machine's own kernel), with virtio_ring.ko damaged."""
    from images.kernels.schemes import resolve
    k = resolve("debian:6.1.192")
    root = tmp_path / "root"
    (root / "boot").mkdir(parents=True)
    shutil.copy(k.vmlinuz, root / "boot" / f"vmlinuz-{k.release}")
    shutil.copy(k.config, root / "boot" / f"config-{k.release}")
    tree = root / "lib" / "modules" / k.release
    deps = (Path(__file__).parents[1] / "fixtures" / "distro" / "modules.dep-6.1.0-56-virtio").read_text()
    for line in deps.splitlines():
        rel = line.split(":")[0]
        (tree / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(k.modules_dir / Path(rel).name, tree / rel)
    (tree / "modules.dep").write_text(deps)
    (tree / "kernel" / "drivers" / "virtio" / "virtio_ring.ko").write_bytes(b"\x7fELF" + b"\x00" * 4096)
    rc, doc, err = verify_json(tmp_path / "r", f"file:{root / 'boot' / f'vmlinuz-{k.release}'}", "perf-refresh")
    assert rc == 4 and doc["verdict"] == "ERROR", err[-1500:]
    assert "module virtio_ring failed to load" in doc["reason"] and doc["outcome"]["kind"] == "agent-error"
