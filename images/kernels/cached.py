# SPDX-License-Identifier: GPL-2.0
"""Kernels in the cache: one directory each, holding kernel.json beside the
files it names, made once and whole whatever other kstall processes do.

Every scheme that fetches, extracts or builds goes through make_once (or
publish, for a directory that is rebuilt in place): under the directory's
lock, only if it is still missing, and on any failure the directory is
removed, so that a failed or killed fetch leaves nothing that looks usable
and bad input leaves nothing at all. The locks live apart, in <cache>/locks,
so that a directory can go whole while another process waits for it.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

from harness.base import arch, paths
from harness.base.paths import write_atomic
from images.kernels import modules
from images.kernels.kernel import Kernel, sha256_file

META = "kernel.json"
# the vmlinuz's stat when its hash last matched: a file that stats the same
# was not written since (any write moves its ctime, which no one can set
# back), so it is not hashed again (40 ms of every verify)
CHECKED = "vmlinuz.checked"


def write_meta(directory: Path, kernel: Kernel) -> None:
    write_atomic(directory / META, json.dumps(kernel.to_json(), indent=2) + "\n")


def load_meta(d: Path, spec: str) -> Kernel:
    """The Kernel write_meta stored in d, named as the user named it."""
    meta = json.loads((d / META).read_text())

    def here(recorded: str | None) -> Path | None:
        """A recorded path, or the same name in d when the cache was moved."""
        if not recorded:
            return None
        p = Path(recorded)
        return d / p.name if not p.exists() and (d / p.name).exists() else p
    opt = {k: here(meta.get(k)) for k in ("config", "vmlinux", "modules_dir", "changelog")}
    origin = meta.get("origin", {})
    if origin.get("initrd"):
        origin["initrd"] = str(here(origin["initrd"]))
    return Kernel(spec=spec, canonical=meta["canonical"], vmlinuz=here(meta["vmlinuz"]), sha256=meta["sha256"],
                  release=meta.get("release"), upstream=meta.get("upstream"), origin=origin,
                  modules=meta.get("modules", {}), arch=meta.get("arch") or arch.DEFAULT, **opt)


def damage(d: Path) -> str | None:
    """Why the kernel cached in d cannot be used as it is (a truncated or
    changed vmlinuz, unreadable metadata); None when it is intact."""
    try:
        k = load_meta(d, "")
    except (OSError, ValueError, KeyError) as e:
        return f"kernel.json unreadable ({e})"
    if not k.vmlinuz or not k.vmlinuz.is_file():
        return "vmlinuz missing"
    if not _unchanged_since_checked(d, k.vmlinuz, k.sha256):
        if sha256_file(k.vmlinuz) != k.sha256:
            return f"vmlinuz sha256 mismatch ({k.vmlinuz.stat().st_size} bytes)"
        _note_checked(d, k.vmlinuz, k.sha256)
    if k.origin.get("suite") and k.config and k.config.is_file():  # fetched by kstall, which can do so again
        left_out = [m for m in modules.wanted(modules.optional_needs(), k.config_value)
                    if m not in k.modules and m not in k.origin.get("optional_missing", [])]
        if left_out:
            return f"fetched before kstall took the module(s) {', '.join(left_out)} a host command needs"
    return None


def _stat_of(path: Path, sha256: str) -> dict:
    st = path.stat()
    return {"sha256": sha256, "path": str(path), "size": st.st_size, "ino": st.st_ino, "dev": st.st_dev,
            "mtime_ns": st.st_mtime_ns, "ctime_ns": st.st_ctime_ns}


def _unchanged_since_checked(d: Path, vmlinuz: Path, sha256: str) -> bool:
    try:
        return json.loads((d / CHECKED).read_text()) == _stat_of(vmlinuz, sha256)
    except (OSError, ValueError):
        return False


def _note_checked(d: Path, vmlinuz: Path, sha256: str) -> None:
    try:
        write_atomic(d / CHECKED, json.dumps(_stat_of(vmlinuz, sha256)) + "\n")
    except OSError:
        pass  # a read-only cache: hashed again next time


@contextmanager
def locked(d: Path) -> Iterator[None]:
    """d's lock, held for the block (other kstall processes wait)."""
    name = hashlib.sha256(str(d.resolve()).encode()).hexdigest()[:24]
    lock_dir = paths.cache_dir() / "locks"
    lock_dir.mkdir(parents=True, exist_ok=True)
    with open(lock_dir / f"{d.name[:40]}-{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def make_once(d: Path, make: Callable[[], None], done: str = META) -> None:
    """Run make to fill d unless d/done exists, under d's lock; a failed or
    interrupted make leaves no d."""
    if (d / done).exists():
        return
    with locked(d):
        if (d / done).exists():
            return
        d.mkdir(parents=True, exist_ok=True)
        try:
            make()
        except BaseException:
            shutil.rmtree(d, ignore_errors=True)
            raise


def kernel_once(d: Path, spec: str, make: Callable[[], Kernel]) -> Kernel:
    """The kernel cached in d, made by make (which fills d) if it is not there."""
    make_once(d, lambda: write_meta(d, make()))
    return load_meta(d, spec)


def drop_if_damaged(d: Path) -> str | None:
    """Why the kernel in d was unusable, after removing its kernel.json so it
    is made again; None when it is intact (or absent)."""
    why = (d / META).exists() and damage(d)
    if not why:
        return None
    with locked(d):
        if damage(d):  # another kstall may have fetched it meanwhile
            (d / META).unlink(missing_ok=True)
    return why


def publish(dest: Path, fill: Callable[[Path], Kernel]) -> Kernel:
    """A directory rebuilt in place (build: of a work tree): fill a fresh one
    beside dest (fill returns the Kernel with dest's paths), then put it in
    dest's place whole, kernel.json included. The caller holds the lock."""
    tmp = dest.with_name(dest.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        kernel = fill(tmp)
        write_meta(tmp, kernel)
        shutil.rmtree(dest, ignore_errors=True)
        tmp.rename(dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return kernel
