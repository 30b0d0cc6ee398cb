"""Where kstall keeps things: the repository, the cache, results, guest binaries."""
from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def cache_dir() -> Path:
    """Downloaded kernels, symbols, initramfs images: ~/.cache/kstall unless KSTALL_CACHE."""
    env = os.environ.get("KSTALL_CACHE")
    base = Path(env) if env else Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "kstall"
    base.mkdir(parents=True, exist_ok=True)
    return base


def results_dir() -> Path:
    """One directory per run below this: results/ unless KSTALL_RESULTS."""
    env = os.environ.get("KSTALL_RESULTS")
    return Path(env) if env else REPO / "results"


def guest_dir() -> Path:
    """The static guest binaries `make guest` builds."""
    env = os.environ.get("KSTALL_GUEST_DIR")
    return Path(env) if env else REPO / "build" / "guest"


def data_file(*parts: str) -> Path:
    """A data file shipped in the repository (signatures, patterns, calibration)."""
    return REPO.joinpath(*parts)
