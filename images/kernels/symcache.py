# SPDX-License-Identifier: GPL-2.0
"""A kernel's symbols captured from a guest, cached by the kernel's hash:
its text symbols (`<sha>.kallsyms`), its variables (`<sha>.datasyms`) and
its BTF (`<sha>.btf`, empty for a kernel without one), as the agent sends
them on the syms port (KALLSYMS, KDATA, BTF)."""
from __future__ import annotations

from pathlib import Path

from harness.base import paths

# blob tag on the syms port -> (file suffix, the most bytes taken)
BLOBS = {"KALLSYMS": ("kallsyms", 64 << 20), "KDATA": ("datasyms", 64 << 20), "BTF": ("btf", 64 << 20)}
LAST_BLOB = "BTF"  # the agent sends it last: the capture is complete when it is in


def path_for(sha256: str, suffix: str = "kallsyms") -> Path:
    return paths.cache_dir() / "symbols" / f"{sha256}.{suffix}"


def beside(kallsyms: Path, suffix: str) -> Path:
    """Another part of the capture a kallsyms path belongs to."""
    return kallsyms.with_name(f"{kallsyms.name.removesuffix('.kallsyms')}.{suffix}")


def cached(sha256: str) -> Path | None:
    """The text symbols, when the whole capture is there (one made before
    variables and BTF were captured too is made again)."""
    p = path_for(sha256)
    if not (p.is_file() and p.stat().st_size > 0):
        return None
    return p if all(beside(p, suffix).is_file() for suffix, _ in BLOBS.values()) else None


def store(sha256: str, blobs: dict[str, bytes]) -> Path:
    """The parts that arrived, text symbols last (their presence marks a capture)."""
    for tag, (suffix, _) in BLOBS.items():
        if tag != "KALLSYMS" and tag in blobs:
            paths.write_atomic(path_for(sha256, suffix), blobs[tag])
    return paths.write_atomic(path_for(sha256), blobs["KALLSYMS"])


def store_system_map(sha256: str, system_map: bytes) -> Path:
    """A kernel built here: its System.map has every symbol (with nokaslr the
    link-time addresses are the running ones); no BTF is built."""
    return store(sha256, {"KALLSYMS": system_map, "KDATA": system_map, "BTF": b""})
