# SPDX-License-Identifier: GPL-2.0
"""A Debian release's own userland to build a kernel module in (debootstrap's
minbase, with the compiler that release built its kernels with and make),
for a kernel newer than the host: trixie's headers come with kbuild tools
linked against trixie's glibc and want trixie's gcc-14, which bookworm
cannot run or lacks. Made once per release and architecture under
<cache>/userlands/, from Debian's suites (images/debian-suites.list names
the mirror); it needs root (debootstrap, chroot). Every step is bounded."""
from __future__ import annotations

import hashlib
import os
import re
import shutil
from pathlib import Path

from harness.base import paths, procs
from images.kernels import cached
from images.kernels.debian_archive import DEFAULT_ARCH, SUITES
from images.kernels.kernel import Progress, SpecError

DEBOOTSTRAP_TIMEOUT = 1800
READY = "kstall-ready"  # written last: a root without it is made again


def _mirror() -> str:
    """The mirror the suites are fetched from (the first deb line's)."""
    for line in SUITES.read_text().splitlines():
        if line.startswith("deb ") and (m := re.match(r"deb\s+(?:\[[^]]*\]\s+)?(\S+)", line)):
            return m.group(1)
    raise SpecError(f"{SUITES} names no mirror")


def package_of(compiler: str) -> str:
    """The package that has a compiler: x86_64-linux-gnu-gcc-14 -> gcc-14."""
    return re.sub(r"^\w+-linux-gnu\w*-", "", compiler)


def ensure(release: str, compiler: str, progress: Progress | None = None, arch: str = DEFAULT_ARCH,
           packages: tuple[str, ...] = ()) -> Path:
    """release's userland with compiler and packages (what the kernel's
    kbuild tools need at run time: libelf for objtool) in it, made once; its root."""
    include = ",".join(sorted({package_of(compiler), "make", *packages}))
    root = paths.cache_dir() / "userlands" / f"{release}-{arch}-{hashlib.sha256(include.encode()).hexdigest()[:8]}"
    if (root / READY).exists():
        return root
    if os.geteuid() != 0:
        raise SpecError(f"building it needs {release}'s own userland ({compiler}), which kstall makes with "
                        "debootstrap and enters with chroot: as root only")
    if not shutil.which("debootstrap"):
        raise SpecError(f"building it needs {release}'s own userland ({compiler}): install debootstrap")
    root.parent.mkdir(parents=True, exist_ok=True)
    with cached.locked(root):
        if (root / READY).exists():
            return root
        shutil.rmtree(root, ignore_errors=True)
        if progress:
            progress(f"making {release}'s own userland to build modules in (debootstrap, once: minutes)")
        p = procs.run_bounded(["debootstrap", "--variant=minbase", f"--arch={arch}", f"--include={include}",
                               release, str(root), _mirror()], timeout=DEBOOTSTRAP_TIMEOUT)
        if p.returncode != 0 or not (root / "usr" / "bin").is_dir():
            tail = " | ".join(l for l in (p.stdout + p.stderr).splitlines()[-3:] if l.strip())
            shutil.rmtree(root, ignore_errors=True)
            raise SpecError(f"debootstrap of {release} failed (exit {p.returncode}): {tail[-300:]}")
        (root / READY).write_text(f"{release} {arch} {include}\n")
    return root
