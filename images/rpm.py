# SPDX-License-Identifier: GPL-2.0
"""rpm:PATH[,PATH…] kernels: Fedora/RHEL-layout package files.

kernel-core (lib/modules/<release>/vmlinuz with its config beside it) plus
kernel-modules (and -extra) when the guest needs a module from them; modules
compressed as .ko.xz or .ko.zst are fine. bsdtar reads the payload through
images/packages.py; the version comes from `rpm -qp`. Cached by content.
"""
from __future__ import annotations

from pathlib import Path

from images import packages
from images.kernel import Kernel


def upstream_version(rpm: Path) -> str | None:
    out = packages.tool_output(["rpm", "-qp", "--nosignature", "--qf", "%{NAME} %{VERSION}", str(rpm)])
    name, _, version = out.partition(" ")
    return packages.upstream_of(version) if name.startswith("kernel") else None


def resolve(spec: str, text: str) -> Kernel:
    return packages.resolve_local(spec, "rpm", text, upstream_version)
