# SPDX-License-Identifier: GPL-2.0
"""Where kstall keeps things: the repository, the cache, results, guest binaries.

REPO is the tree kstall runs from: a checkout, or the installed tree
(/usr/lib/kstall, which the package marks with INSTALLED). An installed tree
is read only: its guest binaries come built, and results go to the user's
state directory ($XDG_STATE_HOME/kstall/results, ~/.local/state/kstall/results),
never into /usr and never, unasked, into whatever directory the user stands in.
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
INSTALLED = (REPO / "INSTALLED").is_file()  # written by `make deb` into the package's tree
COMMAND = "kstall" if INSTALLED else "harness/kstall"  # how messages tell the user to run kstall


def install_hint(package: str | None = None) -> str:
    """How a message tells the user to get a missing host tool: apt for an
    installed kstall, the checkout's `make deps` otherwise."""
    if INSTALLED:
        return f"apt install {package}" if package else "apt install the package that has it"
    return f"run `make deps` (Debian package {package})" if package else "run `make deps`"


def cache_dir() -> Path:
    """Downloaded kernels, symbols, initramfs images: ~/.cache/kstall unless KSTALL_CACHE."""
    env = os.environ.get("KSTALL_CACHE")
    base = Path(env) if env else Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "kstall"
    base.mkdir(parents=True, exist_ok=True)
    return base


def results_dir() -> Path:
    """One directory per run below this: KSTALL_RESULTS, else a checkout's
    results/, else (installed) the user's state directory."""
    env = os.environ.get("KSTALL_RESULTS")
    if env:
        return Path(env)
    if not INSTALLED:
        return REPO / "results"
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "kstall" / "results"


def guest_dir(arch: str) -> Path:
    """The static guest binaries `make guest GUEST_ARCH=arch` builds (KSTALL_GUEST_DIR: another set)."""
    env = os.environ.get("KSTALL_GUEST_DIR")
    return Path(env) if env else REPO / "build" / "guest" / arch


def build_dir() -> Path:
    """What `make` builds beside the guest binaries (the kernel's kselftest.h)."""
    return REPO / "build"


def write_atomic(path: Path, data: bytes | str) -> Path:
    """Write via a temporary file unique to this process and thread, then
    rename: readers never see a partial file, and concurrent writers of the
    same content (two matrix cells building one initramfs) do not collide."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb" if isinstance(data, bytes) else "w") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:  # a full disk, Ctrl-C: no half file left beside it
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def shown(path: Path) -> str:
    """A path as run records show it: relative to the repository when inside it."""
    try:
        return str(path.resolve().relative_to(REPO))
    except ValueError:
        return str(path)


def data_file(*parts: str) -> Path:
    """A data file shipped in the repository (signatures, patterns, calibration)."""
    return REPO.joinpath(*parts)
