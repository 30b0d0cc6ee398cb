# SPDX-License-Identifier: GPL-2.0
"""Kernel text symbols captured from guests, cached by the kernel's hash."""
from __future__ import annotations

from pathlib import Path

from harness.base import paths


def path_for(sha256: str) -> Path:
    return paths.cache_dir() / "symbols" / f"{sha256}.kallsyms"


def cached(sha256: str) -> Path | None:
    p = path_for(sha256)
    return p if p.is_file() and p.stat().st_size > 0 else None


def store(sha256: str, data: bytes) -> Path:
    return paths.write_atomic(path_for(sha256), data)
