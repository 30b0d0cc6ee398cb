# SPDX-License-Identifier: GPL-2.0
"""A /dev/kvm whose VMs start but never run their guest is decided TCG once,
in seconds, and libguestfs is then told to use TCG.

The stand-in for such a KVM is real QEMU given firmware that spins at the
reset vector (`jmp $`): the VM is up, its vCPU runs at 100%, and not one
instruction of the kernel ever executes, as on the shims of this project's
machines.
"""
from __future__ import annotations

import stat
import time
from pathlib import Path

import pytest

from harness.guest import accel
from harness.base import kvm_decisions, paths
from images.kernels import appliance
from images.guest import initramfs
from images.kernels.schemes import resolve

pytestmark = pytest.mark.e2e


def _kvm_that_runs_nothing(tmp: Path) -> str:
    firmware = tmp / "spin.bin"
    firmware.write_bytes(b"\xeb\xfe" * 32768)  # 64 KiB of `jmp $`, reset vector included
    wrapper = tmp / "qemu-kvm-stand-in"
    wrapper.write_text("#!/bin/sh\n"
                       "for a; do shift; case \"$a\" in kvm) a=tcg;; host) a=max;; esac; set -- \"$@\" \"$a\"; done\n"
                       f"exec qemu-system-x86_64 \"$@\" -bios {firmware}\n")
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    return str(wrapper)


def test_a_kvm_whose_guests_never_run_is_decided_tcg_once_within_seconds(tmp_path, monkeypatch):
    kernels = [resolve(f"debian:{v}") for v in ("7.3.4", "6.17.8")]
    initrd = initramfs.build(paths.guest_dir(kernels[0].arch))
    monkeypatch.setenv("KSTALL_CACHE", str(tmp_path / "cache"))  # no decision made yet
    monkeypatch.setenv("KSTALL_QEMU", _kvm_that_runs_nothing(tmp_path))
    monkeypatch.setattr(accel, "kvm_available", lambda: (True, "/dev/kvm opens (stand-in)"))
    said: list[str] = []
    t0 = time.monotonic()
    chosen = [accel.choose("auto", k, initrd, said.append) for k in kernels]
    took = time.monotonic() - t0
    print(f"decided in {took:.2f}s: {said}")
    assert chosen == ["tcg", "tcg"]
    # within seconds: the probe's own bound ended it, whatever else the host runs (a busy host starts
    # QEMU slower, and 3.9 s became over 5 beside another kstall's guests); the wall time is a guard
    # against waiting for a whole boot's timeout (120 s), not a speed goal
    assert sum(s.startswith("probing") for s in said) == 1, said  # once per host boot, not per kernel
    assert any(f"did not reach its agent within {accel.PROBE_BOUND_S:g}s" in s for s in said), said
    assert took < 60, f"deciding took {took:.1f}s: {said}"
    assert not kvm_decisions.guest_ran_under_kvm()
    with pytest.raises(Exception, match="KVM did not run a guest"):
        accel.choose("kvm", kernels[0], initrd, said.append)
    # libguestfs, which would start its own QEMU with KVM because /dev/kvm opens, gets TCG
    monkeypatch.setattr(appliance, "_kernel_dir", lambda progress: (tmp_path, "6.1.0-0-amd64"))
    assert "force_tcg" in appliance.environment()["LIBGUESTFS_BACKEND_SETTINGS"].split(":")
    assert paths.cache_dir() == tmp_path / "cache"
