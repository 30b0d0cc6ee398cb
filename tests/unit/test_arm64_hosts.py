# SPDX-License-Identifier: GPL-2.0
"""kstall on an arm64 host (not runnable here, an x86-64 host without KVM):
the host's architecture and the guest's are separate rows of the table, and
the choices that follow from the pair are unit-tested."""
import platform
from pathlib import Path

import pytest

from harness.base import arch
from harness.guest import accel, machine
from harness.guest.vm import VMError
from images.kernels.kernel import Kernel


@pytest.fixture
def arm64_host(monkeypatch):
    monkeypatch.setattr(platform, "machine", lambda: "aarch64")


def kernel(a: str) -> Kernel:
    return Kernel("x", "x", Path("/nonexistent"), "0" * 64, arch=a)


def test_on_an_arm64_host_arm64_guests_build_natively_and_x86_ones_cross(arm64_host):
    assert arch.host().name == "aarch64"
    assert arch.get("aarch64").compiler() == "gcc"
    assert arch.get("x86_64").compiler() == "x86_64-linux-gnu-gcc"
    assert arch.make_vars("x86_64") == ("GUEST_CC=x86_64-linux-gnu-gcc TRIPLET=x86_64-linux-gnu BPF_TARGET=x86 "
                                        "BPF_ENDIAN=bpfel")


def test_kvm_runs_only_the_hosts_own_architecture(arm64_host):
    said: list[str] = []
    assert accel.choose("auto", kernel("x86_64"), Path("/nonexistent"), said.append) == "tcg"
    with pytest.raises(VMError, match="x86_64 kernel on an aarch64 host runs under TCG only"):
        accel.choose("kvm", kernel("x86_64"), Path("/nonexistent"), said.append)
    assert said == []  # no probe: KVM cannot run another architecture


def test_each_guest_architecture_has_its_own_kvm_and_tcg_arguments():
    assert machine.accel_args("kvm", "aarch64") == ["-accel", "kvm", "-cpu", "host"]
    assert machine.accel_args("tcg", "aarch64")[-1] == "max,pauth=off"
    assert machine.qemu("aarch64") == "qemu-system-aarch64" and machine.get("virt", "aarch64").console == "ttyAMA0"
    assert machine.get("q35", "x86_64").console == "ttyS0"


def test_the_host_package_list_skips_a_cross_compiler_for_the_hosts_own_architecture():
    lines = (Path(__file__).resolve().parents[2] / "ci" / "debian-packages.txt").read_text().splitlines()
    restricted = {l.split()[0]: l.split()[1] for l in lines if "[!" in l}
    assert restricted["gcc-aarch64-linux-gnu"] == "[!arm64]" and restricted["gcc-x86-64-linux-gnu"] == "[!amd64]"
    for a in arch.names():  # every guest architecture's QEMU is listed
        assert arch.get(a).qemu_package in {l.split()[0] for l in lines if l and not l.startswith("#")}


def test_tcg_single_asked_for_by_name_is_given_without_a_probe_for_every_architecture():
    # --accel tcg-single: one host thread runs the vCPUs in turn, holding one
    # off inside a race's window as a busy host does (repro/README.md, find_inode_fast)
    said: list[str] = []
    for a in ("x86_64", "aarch64", "ppc64le", "s390x", "riscv64"):
        assert accel.choose("tcg-single", kernel(a), Path("/nonexistent"), said.append) == "tcg-single"
        assert machine.accel_args("tcg-single", a)[:2] == ["-accel", "tcg,thread=single"]
    assert said == [] and accel.likely("tcg-single") == "tcg-single"
