# SPDX-License-Identifier: GPL-2.0
"""rpm:PATH[,PATH…] kernels: Fedora/RHEL-layout package files.

kernel-core (lib/modules/<release>/vmlinuz with its config beside it) plus
kernel-modules (and -extra) when the guest needs a module from them; modules
compressed as .ko.xz or .ko.zst are fine. bsdtar reads the payload through
images/kernels/packages.py; the version comes from `rpm -qp`. Cached by content.
"""
from __future__ import annotations

from pathlib import Path

from images.kernels import cached, packages
from images.kernels.kernel import Kernel
from harness.base import paths


def upstream_version(rpm: Path) -> str | None:
    out = packages.tool_output(["rpm", "-qp", "--nosignature", "--qf", "%{NAME} %{VERSION}", str(rpm)])
    name, _, version = out.partition(" ")
    return packages.upstream_of(version) if name.startswith("kernel") else None


def resolve(spec: str, text: str) -> Kernel:
    return packages.resolve_local(spec, "rpm", text, upstream_version)


def changelog_of(kernel: Kernel, progress=None) -> Path | None:
    """The %changelog of the rpm a kernel came from, kept with the kernel as
    changelog.rpm (images/kernels/changelog.py reads it); None when none has one."""
    if kernel.changelog and kernel.changelog.exists():
        return kernel.changelog
    d = kernel.vmlinuz.parent
    if not (d / cached.META).exists():
        return None
    with cached.locked(d):
        k = cached.load_meta(d, kernel.spec)
        if k.changelog and k.changelog.exists():
            return k.changelog
        for f in map(Path, kernel.origin.get("files", ())):
            if f.suffix == ".rpm" and f.is_file():
                text = packages.tool_output(["rpm", "-qp", "--nosignature", "--changelog", str(f)])
                if text.strip() and text.strip() != "(none)":
                    paths.write_atomic(d / "changelog.rpm", text)
                    k.changelog = d / "changelog.rpm"
                    cached.write_meta(d, k)
                    return k.changelog
    return None
