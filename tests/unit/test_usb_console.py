# SPDX-License-Identifier: GPL-2.0
"""What a syzkaller program's emulated USB device became in the kernel, from
recorded consoles of syzbot's USB reproducers on Debian's kernels
(harness/analysis/usb_console.py)."""
from __future__ import annotations

from recorded import FIXTURES

from harness.analysis import usb_console
from harness.analysis.reach import HOST, need_kind

CONSOLES = FIXTURES / "consoles"


def test_a_device_a_driver_took_is_named_with_its_ids_and_driver():
    seen = usb_console.from_log(CONSOLES / "6.12.118-usb-yealink.log")
    assert seen is not None and seen.connects == 2 and seen.ids == ["idVendor=6993, idProduct=b001"]
    assert seen.drivers == ["yealink"] and not seen.need()
    assert seen.text() == ("its USB device connected 2 times on dummy_hcd as idVendor=6993, idProduct=b001; "
                           "the kernel's drivers that took it: yealink")


def test_a_driver_that_stopped_for_want_of_firmware_is_a_need_of_the_guest_never_a_clean_run():
    """ath9k_htc asks for htc_9271 firmware, which syzbot's images carry and
    this guest lacks: its driver stops before the code the bug is in."""
    seen = usb_console.from_log(CONSOLES / "6.1.170-usb-ath9k-htc-no-firmware.log")
    assert seen is not None and seen.connects == 3 and "idVendor=0cf3, idProduct=9271" in seen.ids
    assert seen.missing_firmware == ["ath9k_htc/htc_9271-1.4.0.fw", "htc_9271.fw"]
    assert seen.text().endswith("its driver stopped for want of firmware ath9k_htc/htc_9271-1.4.0.fw")
    need = seen.need()
    assert need.startswith("firmware ath9k_htc/htc_9271-1.4.0.fw or htc_9271.fw: ") and need_kind(need) == HOST
    # a root hub's lines are the boot's, no device of the program's
    assert "hub" not in seen.drivers


def test_a_firmware_the_guest_had_is_no_need_and_no_device_is_said():
    seen = usb_console.read(["[ 5.1] usb 1-1: new high-speed USB device number 2 using dummy_hcd",
                             "[ 5.2] usb 1-1: firmware: failed to load a.fw (-2)",
                             "[ 5.3] usb 1-1: firmware: direct-loading firmware b.fw"])
    assert not seen.need()
    assert usb_console.read([]).text().startswith("its USB device never connected")
