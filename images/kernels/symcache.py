# SPDX-License-Identifier: GPL-2.0
"""A kernel's symbols captured from a guest, in the per-kernel cache
(harness/base/kernel_cache.py): its text symbols (`.kallsyms`), its variables
(`.datasyms`) and its BTF (`.btf`, empty for a kernel without one), as the
agent sends them on the syms port (KALLSYMS, KDATA, BTF)."""
from __future__ import annotations

from pathlib import Path

from harness.base import kernel_cache, paths
from harness.base.kernel_cache import KernelKey

# blob tag on the syms port -> (file suffix, the most bytes taken)
BLOBS = {"KALLSYMS": ("kallsyms", 64 << 20), "KDATA": ("datasyms", 64 << 20), "BTF": ("btf", 64 << 20)}
LAST_BLOB = "BTF"  # the agent sends it last: the capture is complete when it is in


def path_for(key: KernelKey, suffix: str = "kallsyms") -> Path:
    return kernel_cache.path(kernel_cache.SYMBOLS, key, suffix)


def beside(kallsyms: Path, suffix: str) -> Path:
    """Another part of the capture a kallsyms path belongs to."""
    return kallsyms.with_name(f"{kallsyms.name.removesuffix('.kallsyms')}.{suffix}")


def cached(key: KernelKey) -> Path | None:
    """The text symbols, when the whole capture is there (one made before
    variables and BTF were captured too is made again)."""
    p = path_for(key)
    if not (p.is_file() and p.stat().st_size > 0):
        return None
    return p if all(beside(p, suffix).is_file() for suffix, _ in BLOBS.values()) else None


def store(key: KernelKey, blobs: dict[str, bytes]) -> Path:
    """The parts that arrived, text symbols last (their presence marks a capture)."""
    for tag, (suffix, _) in BLOBS.items():
        if tag != "KALLSYMS" and tag in blobs:
            paths.write_atomic(path_for(key, suffix), blobs[tag])
    return paths.write_atomic(path_for(key), blobs["KALLSYMS"])


def store_system_map(key: KernelKey, system_map: bytes) -> Path:
    """A kernel built here: its System.map has every symbol (with nokaslr the
    link-time addresses are the running ones); no BTF is built."""
    return store(key, {"KALLSYMS": system_map, "KDATA": system_map, "BTF": b""})
