# SPDX-License-Identifier: GPL-2.0
"""The kernel libguestfs's appliance boots, and the environment that points
libguestfs at it.

Debian's libguestfs builds its appliance (supermin) around a kernel installed
on the host; kstall's build machines have none, and a user's /boot kernels
can be unreadable without root. So kstall gives supermin a kernel of its
own: bookworm's stock kernel (the libguestfs here is bookworm's), from
Debian's package with its whole module tree and a modules.dep made by
`depmod -b`, cached once. libguestfs runs with the direct backend (no
libvirt), under TCG unless a kstall guest has run under KVM on this host boot
(libguestfs itself only checks that /dev/kvm opens: a /dev/kvm whose VMs
never run hung it until its timeout), and keeps its appliance in the kstall
cache.
"""
from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
from pathlib import Path

from harness.guest import accel
from harness.base import paths
from images import debian, modules
from images.kernel import Progress, SpecError

APPLIANCE_LINE = "6.1."  # bookworm's stock kernel line


def _kernel_dir(progress: Progress | None) -> tuple[Path, str]:
    archive = debian.Archive()
    ks = [k for k in archive.kernels(progress) if k.upstream.startswith(APPLIANCE_LINE) and k.flavour == "amd64"]
    if not ks:
        raise SpecError(f"no Debian {APPLIANCE_LINE}x amd64 kernel in the suites for libguestfs's appliance")
    k = max(ks, key=lambda k: (debian.version_key(k.upstream), debian.version_key(k.abi)))
    d = paths.cache_dir() / "appliance" / k.release
    if (d / "ready").exists():
        return d, k.release
    d.mkdir(parents=True, exist_ok=True)
    with open(d.parent / f"{k.release}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (d / "ready").exists():
            return d, k.release
        if progress:
            progress(f"preparing a kernel for libguestfs's appliance ({k.package}, once)")
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)
        url, fname, size, sha = archive.uris(k.image_package)
        deb = d / fname
        debian._download(url, deb, size, sha, k.image_package, progress)
        subprocess.run(["dpkg-deb", "-x", str(deb), str(d / "root")], check=True, timeout=600)
        deb.unlink()
        root = d / "root"
        if (root / "usr" / "lib" / "modules").is_dir() and not (root / "lib").exists():
            (root / "lib").symlink_to("usr/lib")
        modules.Tree(root, k.release).ensure_dep()
        (d / "ready").touch()
    return d, k.release


def environment(progress: Progress | None = None) -> dict[str, str]:
    """os.environ plus what libguestfs needs to launch here."""
    if not Path("/lib/modules").is_dir():
        # supermin copies the host's package files, /lib/modules among them
        raise SpecError("libguestfs's supermin needs a /lib/modules directory on the host: run `make deps` "
                        "(as root it creates an empty one)")
    d, release = _kernel_dir(progress)
    root = d / "root"
    vmlinuz = root / "boot" / f"vmlinuz-{release}"
    cache = paths.cache_dir() / "appliance" / "guestfs"
    cache.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, LIBGUESTFS_BACKEND="direct", SUPERMIN_KERNEL=str(vmlinuz),
               SUPERMIN_KERNEL_VERSION=release, SUPERMIN_MODULES=str(root / "lib" / "modules" / release),
               LIBGUESTFS_CACHEDIR=str(cache))
    if not accel.guest_ran_under_kvm():
        env["LIBGUESTFS_BACKEND_SETTINGS"] = ":".join(filter(None, [env.get("LIBGUESTFS_BACKEND_SETTINGS"),
                                                                    "force_tcg"]))
    return env
