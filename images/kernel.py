# SPDX-License-Identifier: GPL-2.0
"""What kstall boots: a vmlinuz, its config, a content hash, the modules the
guest needs. The schemes that make one from what a user names are in
images/schemes.py."""
from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

Progress = Callable[[str], None]


class SpecError(ValueError):
    """A kernel spec that cannot be resolved: the message says what to use."""


@dataclass
class Kernel:
    spec: str                 # as the user wrote it
    canonical: str            # unambiguous spec, e.g. debian:6.16.12+deb13-amd64
    vmlinuz: Path
    sha256: str
    release: str | None = None   # expected `uname -r`
    upstream: str | None = None  # upstream version, e.g. 6.16.12
    config: Path | None = None
    vmlinux: Path | None = None  # with DWARF, when there is one
    origin: dict = field(default_factory=dict)
    # modules the guest may need (images.modules): name -> load sequence
    # ([] when built in), the files as NAME.ko in modules_dir
    modules: dict[str, list[str]] = field(default_factory=dict)
    modules_dir: Path | None = None
    changelog: Path | None = None  # the package's changelog.gz, when it has one (images/changelog.py)

    def to_json(self) -> dict:
        d = asdict(self)
        for k in ("vmlinuz", "config", "vmlinux", "modules_dir", "changelog"):
            d[k] = str(d[k]) if d[k] else None
        return d

    def config_value(self, option: str) -> str | None:
        """CONFIG_FOO's value in the kernel's config, if kstall has the config."""
        if not self.config or not self.config.exists():
            return None
        prefix = option + "="
        for line in self.config.read_text(errors="replace").splitlines():
            if line.startswith(prefix):
                return line[len(prefix):].strip('"')
        return None

    def machine(self) -> str:
        """The machine it needs (harness/guest/machines.toml): q35 lists the
        CPUs in ACPI tables only, so a kernel built without ACPI (build:, for a
        quicker build) boots on pc, whose firmware also lists them in MP
        tables (CONFIG_X86_MPPARSE)."""
        return "pc" if self.config_value("CONFIG_ACPI") is None and self.config_value("CONFIG_X86_MPPARSE") == "y" \
            else "q35"


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()
