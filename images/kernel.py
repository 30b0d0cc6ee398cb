# SPDX-License-Identifier: GPL-2.0
"""Kernel specs: what a user names ('debian:6.16.12', 'file:bzImage') and what
kstall boots (a vmlinuz, its config, a content hash)."""
from __future__ import annotations

import hashlib
import json
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

    def to_json(self) -> dict:
        d = asdict(self)
        for k in ("vmlinuz", "config", "vmlinux", "modules_dir"):
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


    def boot_file(self) -> Path:
        """QEMU's -kernel: the uncompressed ELF for a PVH boot where it has one.
        Kernels without ACPI (build:, on pc) keep their bzImage: they find
        their CPUs in SeaBIOS's MP table, not yet tried with a PVH entry."""
        from images import pvh
        return pvh.boot_file(self.vmlinuz, self.sha256) if self.machine() == "q35" else self.vmlinuz

    def machine(self) -> str:
        """QEMU's machine type for it: q35 lists the CPUs in ACPI tables only,
        so a kernel built without ACPI (build:, for a quicker build) boots on
        pc, whose firmware also lists them in MP tables (CONFIG_X86_MPPARSE)."""
        return "pc" if self.config_value("CONFIG_ACPI") is None and self.config_value("CONFIG_X86_MPPARSE") == "y" \
            else "q35"


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def write_meta(directory: Path, kernel: Kernel) -> None:
    from harness.base.paths import write_atomic
    write_atomic(directory / "kernel.json", json.dumps(kernel.to_json(), indent=2) + "\n")


def damage(d: Path) -> str | None:
    """Why the kernel cached in d cannot be used as it is (a truncated or
    changed vmlinuz, unreadable metadata); None when it is intact."""
    try:
        k = load_meta(d, "")
    except (OSError, ValueError, KeyError) as e:
        return f"kernel.json unreadable ({e})"
    if not k.vmlinuz or not k.vmlinuz.is_file():
        return "vmlinuz missing"
    if sha256_file(k.vmlinuz) != k.sha256:
        return f"vmlinuz sha256 mismatch ({k.vmlinuz.stat().st_size} bytes)"
    return None


def load_meta(d: Path, spec: str) -> Kernel:
    """The Kernel write_meta stored in d, named as the user named it."""
    meta = json.loads((d / "kernel.json").read_text())

    def here(recorded: str | None) -> Path | None:
        """A recorded path, or the same name in d when the cache was moved."""
        if not recorded:
            return None
        p = Path(recorded)
        return d / p.name if not p.exists() and (d / p.name).exists() else p
    opt = {k: here(meta.get(k)) for k in ("config", "vmlinux", "modules_dir")}
    origin = meta.get("origin", {})
    if origin.get("initrd"):
        origin["initrd"] = str(here(origin["initrd"]))
    return Kernel(spec=spec, canonical=meta["canonical"], vmlinuz=here(meta["vmlinuz"]), sha256=meta["sha256"],
                  release=meta.get("release"), upstream=meta.get("upstream"), origin=origin,
                  modules=meta.get("modules", {}), **opt)


SCHEMES = "debian:VERSION, deb:PATH[,PATH…], rpm:PATH[,PATH…], image:PATH[#RELEASE], file:PATH or build:TREE[@REV]"


def resolve(spec: str, fetch: bool = True, progress: Progress | None = None, build=None,
            boot_image: bool = False) -> Kernel:
    """A bootable Kernel for spec; downloads or builds it when fetch (cached
    after). build: images.build.BuildOptions for build: specs; boot_image:
    image: specs that verify --boot-image will boot."""
    scheme, sep, rest = spec.partition(":")
    if not sep or not rest:
        raise SpecError(f"kernel spec {spec!r} has no scheme: use {SCHEMES}")
    if scheme == "debian":
        from images import debian
        return debian.resolve(spec, rest, fetch=fetch, progress=progress)
    if scheme == "image":
        from images import image
        return image.resolve(spec, rest, fetch=fetch, progress=progress, boot_layer=boot_image)
    if scheme in ("deb", "rpm"):
        import importlib
        return importlib.import_module(f"images.{scheme}").resolve(spec, rest)
    if scheme == "file":
        from images import filekernel
        return filekernel.resolve(spec, rest)
    if scheme == "build":
        from images import build as kbuild
        if not fetch:
            raise SpecError(f"{spec} is built on demand, not fetched")
        return kbuild.build(rest, build or kbuild.BuildOptions(), progress)
    raise SpecError(f"unknown kernel scheme {scheme!r} in {spec!r}: use {SCHEMES}")
