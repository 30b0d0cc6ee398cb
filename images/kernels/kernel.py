# SPDX-License-Identifier: GPL-2.0
"""What kstall boots: a vmlinuz, its config, a content hash, the modules the
guest needs. The schemes that make one from what a user names are in
images/kernels/schemes.py."""
from __future__ import annotations

import functools
import hashlib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from harness.base import arch as arches
from harness.base.kernel_cache import KernelKey

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
    # modules the guest may need (images.kernels.modules): name -> load sequence
    # ([] when built in), the files as NAME.ko in modules_dir
    modules: dict[str, list[str]] = field(default_factory=dict)
    modules_dir: Path | None = None
    changelog: Path | None = None  # the package's changelog.gz, when it has one (images/kernels/changelog.py)
    arch: str = arches.DEFAULT  # its architecture (harness/base/arches.toml)

    def to_json(self) -> dict:
        d = asdict(self)
        for k in ("vmlinuz", "config", "vmlinux", "modules_dir", "changelog"):
            d[k] = str(d[k]) if d[k] else None
        return d

    @property
    def key(self) -> KernelKey:
        """What its cached artefacts are kept under (harness/base/kernel_cache.py)."""
        return KernelKey(self.sha256, self.arch)

    def config_value(self, option: str) -> str | None:
        """CONFIG_FOO's value in the kernel's config, if kstall has the config."""
        try:
            stamp = self.config.stat().st_mtime_ns if self.config else None
        except OSError:
            return None
        return None if stamp is None else _config(self.config, stamp).get(option)

    def machine(self) -> str:
        """The machine it needs: the first of its architecture's machines
        whose `when` its config meets (harness/base/arches.toml), else the
        architecture's default."""
        a = arches.get(self.arch)
        for name, m in a.table["machine"].items():
            when = m.get("when")
            if when and all((self.config_value(k) or "") == v for k, v in when.items()):
                return name
        return a.default_machine


def image_arch(path: Path) -> str:
    """The architecture a kernel image is for, read from its header
    (harness/base/arches.toml `image_magic`): a kernel is never booted as
    another architecture's."""
    with open(path, "rb") as f:
        head = f.read(arches.IMAGE_HEAD)
    a = arches.of_image(head)
    if a is None:
        known = ", ".join(f"{arches.get(n).image} ({n})" for n in arches.names())
        raise SpecError(f"{path}: not a kernel image kstall can boot: it knows {known}")
    return a.name


@functools.lru_cache(maxsize=4)
def _config(path: Path, mtime_ns: int) -> dict[str, str]:
    """A config's options, read once per run (a run asks for a dozen, and a
    config is 300 KB); mtime_ns keys it, so a rewritten config is read again."""
    out: dict[str, str] = {}
    for line in path.read_text(errors="replace").splitlines():
        name, eq, value = line.partition("=")
        if eq and not name.startswith("#"):
            out.setdefault(name, value.strip('"'))
    return out


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()
