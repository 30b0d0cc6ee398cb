# SPDX-License-Identifier: GPL-2.0
"""Device firmware the guest carries for an emulated device (images/guest/firmware.py):
which programs ask for it, what is taken out of a Debian package, and how a run says so."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from recorded import FIXTURES

from harness.reports import bug_report
from images.guest import firmware
from images.kernels.kernel import SpecError


def test_only_a_program_that_emulates_the_device_carries_its_firmware():
    assert [r.driver for r in firmware.wanted("r0 = syz_usb_connect_ath9k(0x3, 0x5a, &(0x7f0000000080)=")] \
        == ["ath9k_htc"]
    assert firmware.wanted("syz_usb_connect(0x0, 0x24, &(0x7f0000000000)=") == []
    for r in firmware.table():  # each row says why, and what the driver asks for
        assert r.reason and r.files and r.when and "/" in r.package


def _deb(tmp: Path, files: dict[str, bytes], prefix: str = "lib/firmware") -> Path:
    root = tmp / "pkg"
    (root / "DEBIAN").mkdir(parents=True)
    (root / "DEBIAN" / "control").write_text("Package: firmware-test\nVersion: 1\nArchitecture: all\n"
                                             "Maintainer: kstall <k@example.org>\nDescription: test\n")
    for name, data in files.items():
        (root / prefix / name).parent.mkdir(parents=True, exist_ok=True)
        (root / prefix / name).write_bytes(data)
    deb = tmp / "firmware-test_1_all.deb"
    subprocess.run(["dpkg-deb", "-Zgzip", "-b", "--root-owner-group", str(root), str(deb)], check=True,
                   capture_output=True, timeout=60)
    return deb


@pytest.mark.parametrize("prefix", ["lib/firmware", "usr/lib/firmware"])
def test_the_files_the_driver_asks_for_come_out_of_the_package(tmp_path, prefix):
    deb = _deb(tmp_path, {"ath9k_htc/htc_9271-1.4.0.fw": b"\x01fw", "other.fw": b"x"}, prefix)
    firmware._extract(deb, ("ath9k_htc/htc_9271-1.4.0.fw",), tmp_path / "out")
    assert (tmp_path / "out" / "ath9k_htc" / "htc_9271-1.4.0.fw").read_bytes() == b"\x01fw"
    assert not (tmp_path / "out" / "other.fw").exists()


def test_a_package_without_the_file_says_which_file(tmp_path):
    deb = _deb(tmp_path, {"htc_9271.fw": b"x"})
    with pytest.raises(SpecError, match=r"has no lib/firmware/ath9k_htc/htc_7010-1.4.0.fw"):
        firmware._extract(deb, ("ath9k_htc/htc_7010-1.4.0.fw",), tmp_path / "out")


def test_a_run_that_carried_firmware_says_so_in_its_bug_report():
    run = json.loads((FIXTURES / "perf-refresh-6.16.12-4cpu" / "run.json").read_text())
    carried = firmware.Carried("ath9k_htc", "firmware-ath9k-htc_1.4.0_all.deb", ("ath9k_htc/htc_9271-1.4.0.fw",))
    doc = run | {"vm": run["vm"] | {"firmware": [carried.to_json()]}}
    text = bug_report.render(doc, ["console.log", "run.json"])
    assert "- the guest carried device firmware, as syzbot's images do: ath9k_htc/htc_9271-1.4.0.fw" in text
    assert "from Debian's firmware-ath9k-htc" in text


def test_without_apt_the_newest_kept_package_serves(tmp_path, monkeypatch):
    monkeypatch.setenv("KSTALL_CACHE", str(tmp_path))
    [row] = firmware.table()
    for version in ("1.4.0-1", "1.4.0-1.3+deb12u1"):
        d = tmp_path / "firmware" / f"firmware-ath9k-htc_{version}_all"
        for name in row.files:
            (d / name).parent.mkdir(parents=True, exist_ok=True)
            (d / name).write_bytes(version.encode())

    def offline(r, progress):
        raise SpecError("apt gave no download address for firmware-ath9k-htc/bookworm")
    monkeypatch.setattr(firmware, "_fetched", offline)
    files, [carried] = firmware.files([row])
    assert carried.package == "firmware-ath9k-htc_1.4.0-1.3+deb12u1_all.deb"
    assert files[f"lib/firmware/{row.files[0]}"] == b"1.4.0-1.3+deb12u1"
    (tmp_path / "firmware" / "firmware-ath9k-htc_1.4.0-1.3+deb12u1_all" / row.files[1]).unlink()
    assert firmware.files([row])[1][0].package == "firmware-ath9k-htc_1.4.0-1_all.deb"  # the one with every file


def test_a_package_that_cannot_be_read_leaves_the_kept_one_serving(tmp_path, monkeypatch):
    import tarfile
    monkeypatch.setenv("KSTALL_CACHE", str(tmp_path))
    [row] = firmware.table()
    d = tmp_path / "firmware" / "firmware-ath9k-htc_1.4.0-1_all"
    for name in row.files:
        (d / name).parent.mkdir(parents=True, exist_ok=True)
        (d / name).write_bytes(b"kept")

    def damaged(r, progress):
        raise tarfile.ReadError("truncated header")
    monkeypatch.setattr(firmware, "_fetched", damaged)
    assert firmware.files([row])[1][0].package == "firmware-ath9k-htc_1.4.0-1_all.deb"


def test_a_run_goes_on_without_firmware_it_cannot_have(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from harness.drivers import case
    src = tmp_path / "p.c"
    src.write_text("syz_usb_connect_ath9k(0x3, 0x5a, 0, 0);\n")
    said: list[str] = []

    def broken(rows, progress=None):
        raise SpecError("firmware-ath9k-htc_9_all.deb has no lib/firmware/ath9k_htc/htc_9271-1.4.0.fw")
    monkeypatch.setattr(firmware, "files", broken)
    assert case.firmware_for(SimpleNamespace(source=str(src), name="syz-x"), said.append) == ({}, [])
    assert said and "no firmware for ath9k_htc" in said[0] and "runs without it" in said[0]
