# SPDX-License-Identifier: GPL-2.0
"""deb:PATH[,PATH…] kernels: Debian or Ubuntu package files.

A linux-image .deb alone where it holds everything (Debian up to 6.18), or
with the packages that hold the rest: Debian 6.19+'s linux-binary, linux-base
and linux-modules, Ubuntu's linux-modules-*. Read by dpkg-deb through
images/kernels/packages.py; cached by the files' content.
"""
from __future__ import annotations

from pathlib import Path

from images.kernels import packages
from images.kernels.kernel import Kernel


def upstream_version(deb: Path) -> str | None:
    """Upstream version from a kernel package's Version (6.1.192-2 -> 6.1.192)."""
    fields = packages.tool_output(["dpkg-deb", "-f", str(deb), "Package", "Version"])
    meta = dict(l.split(": ", 1) for l in fields.splitlines() if ": " in l)
    if not meta.get("Package", "").startswith("linux-"):
        return None
    return packages.upstream_of(meta.get("Version"))


def resolve(spec: str, text: str) -> Kernel:
    return packages.resolve_local(spec, "deb", text, upstream_version)
