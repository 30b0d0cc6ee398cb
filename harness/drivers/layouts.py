# SPDX-License-Identifier: GPL-2.0
"""Where a kernel keeps who waits for whom (harness/analysis/kernel_waits.py
lays it out from the kernel's BTF): worked out once per kernel and kept in
its cache beside its symbols, made again when kernel-waits.toml changes."""
from __future__ import annotations

import json
from pathlib import Path

from harness.analysis import kernel_layout
from harness.base import paths
from harness.base.arch import Arch
from images.kernels import symcache


def cached(kallsyms: Path, a: Arch) -> Path | None:
    """The layout of the kernel of architecture a these symbols were
    captured from; None when the capture has no variables or BTF beside it."""
    out = symcache.beside(kallsyms, "layout.json")
    key = kernel_layout.spec_key()
    try:
        if json.loads(out.read_text()).get("spec") == key:
            return out
    except (OSError, ValueError):
        pass
    try:
        blob = symcache.beside(kallsyms, "btf").read_bytes()
        # the variables, then the text symbols: x86 lists init_task as text (its own section)
        text = symcache.beside(kallsyms, "datasyms").read_text(errors="replace") + "\n" + \
            kallsyms.read_text(errors="replace")
    except OSError:
        return None
    return paths.write_atomic(out, json.dumps(kernel_layout.layout(blob, text, a.kernel_from) | {"spec": key}))
