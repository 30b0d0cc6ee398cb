# SPDX-License-Identifier: GPL-2.0
"""What a program's emulated USB device became in the kernel, from the
console (patterns in usb-console.toml): how often it connected, what it said
it was, which of the kernel's drivers took it, or where its enumeration
stopped. A syzkaller program's syz_usb_* calls are pseudo-calls the agent
does not count: this is the evidence that they reached the kernel."""
from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from harness.base import paths

PATTERNS = paths.data_file("harness", "analysis", "usb-console.toml")
TIMESTAMP = re.compile(r"^\[\s*\d+\.\d+\]\s*")


@dataclass
class UsbSeen:
    connects: int = 0
    ids: list[str] = field(default_factory=list)      # each identity once, first seen first
    drivers: list[str] = field(default_factory=list)  # interface drivers that spoke of it
    failures: list[str] = field(default_factory=list)
    firmware: list[str] = field(default_factory=list)  # files its driver asked for and never got
    loaded: list[str] = field(default_factory=list)    # files it got

    @property
    def missing_firmware(self) -> list[str]:
        return [] if self.loaded else self.firmware

    def text(self) -> str:
        if not self.connects:
            return "its USB device never connected: the kernel's console names no device on dummy_hcd"
        said = f"its USB device connected {self.connects} time{'s' * (self.connects != 1)} on dummy_hcd"
        if self.ids:
            said += " as " + "; ".join(self.ids[:3]) + (f" (and {len(self.ids) - 3} more)" if len(self.ids) > 3 else "")
        if self.missing_firmware:
            return said + f"; its driver stopped for want of firmware {self.missing_firmware[0]}"
        if self.drivers:
            return said + "; the kernel's drivers that took it: " + ", ".join(self.drivers[:6])
        if self.failures:
            return said + f"; no driver took it, its enumeration stopped: {self.failures[-1]}"
        return said + "; no interface driver spoke of it"

    def to_json(self) -> dict:
        return {"connects": self.connects, "ids": self.ids, "drivers": self.drivers, "failures": self.failures[-5:],
                "firmware_missing": self.missing_firmware}

    def need(self) -> str:
        """The firmware its driver stopped for, as a need of the guest ('' when none)."""
        names = self.missing_firmware
        return (f"firmware {' or '.join(names[:3])}: the kernel's driver for its USB device asked for it; this guest "
                "has no such file (syzbot's images carry linux-firmware)") if names else ""


def _patterns() -> dict[str, re.Pattern]:
    return {k: re.compile(v) for k, v in tomllib.loads(PATTERNS.read_text()).items()}


def read(lines: list[str]) -> UsbSeen:
    pats, seen = _patterns(), UsbSeen()
    for raw in lines:
        line = TIMESTAMP.sub("", raw.rstrip("\n"))
        if (m := pats["firmware_missing"].match(line)):
            if m["name"] not in seen.firmware:
                seen.firmware.append(m["name"])
        elif (m := pats["firmware_loaded"].match(line)):
            if m["name"] not in seen.loaded:
                seen.loaded.append(m["name"])
        elif pats["connected"].match(line):
            seen.connects += 1
        elif (m := pats["identified"].match(line)) and m["ids"] not in seen.ids:
            seen.ids.append(m["ids"])
        elif (m := pats["failed"].match(line)):
            seen.failures.append(m["why"].strip())
        elif (m := pats["driver"].match(line)) and m["driver"] != "usb" and m["driver"] not in seen.drivers:
            seen.drivers.append(m["driver"])
    return seen


def from_log(path: Path) -> UsbSeen | None:
    try:
        return read(path.read_text(errors="replace").splitlines())
    except OSError:
        return None
