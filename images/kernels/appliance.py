# SPDX-License-Identifier: GPL-2.0
"""libguestfs for kstall: the kernel its appliance boots, the environment that
points it there, and images/kernels/guestfs_child.py run in it, bounded.

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

import json
import os
import subprocess
import sys
from pathlib import Path

from harness.base import arch, kvm_decisions, paths, procs
from images.kernels import cached, debian, modules
from images.kernels.download import download
from images.kernels.kernel import Progress, SpecError

APPLIANCE_LINE = "6.1."  # bookworm's stock kernel line
CHILD = Path(__file__).with_name("guestfs_child.py")
EXTRACT_TIMEOUT = 900


def _kernel_dir(progress: Progress | None) -> tuple[Path, str]:
    flavour = arch.host().debian  # the appliance runs on the host
    archive = debian.Archive(arch=flavour)
    ks = [k for k in archive.kernels(progress) if k.upstream.startswith(APPLIANCE_LINE) and k.flavour == flavour]
    if not ks:
        raise SpecError(f"no Debian {APPLIANCE_LINE}x {flavour} kernel in the suites for libguestfs's appliance")
    k = max(ks, key=lambda k: (debian.version_key(k.upstream), debian.version_key(k.abi)))
    d = paths.cache_dir() / "appliance" / k.release

    def make() -> None:
        if progress:
            progress(f"preparing a kernel for libguestfs's appliance ({k.package}, once)")
        url, fname, size, sha = archive.uris(k.image_package)
        deb = d / fname
        download(url, deb, size, sha, k.image_package, progress)
        subprocess.run(["dpkg-deb", "-x", str(deb), str(d / "root")], check=True, timeout=600)
        deb.unlink()
        root = d / "root"
        if (root / "usr" / "lib" / "modules").is_dir() and not (root / "lib").exists():
            (root / "lib").symlink_to("usr/lib")
        modules.Tree(root, k.release).ensure_dep()
        (d / "ready").touch()
    cached.make_once(d, make, done="ready")
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
    if not kvm_decisions.guest_ran_under_kvm():
        env["LIBGUESTFS_BACKEND_SETTINGS"] = ":".join(filter(None, [env.get("LIBGUESTFS_BACKEND_SETTINGS"),
                                                                    "force_tcg"]))
    return env


def run_child(args: list[str], progress: Progress | None, timeout: float = EXTRACT_TIMEOUT) -> dict:
    env = environment(progress)
    try:
        p = procs.run_bounded([sys.executable, str(CHILD), *args],
                              timeout, env=env)
    except subprocess.TimeoutExpired:
        raise SpecError(f"libguestfs took longer than {timeout:.0f}s ({args[0]})") from None
    try:
        out = json.loads(p.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        tail = " | ".join(p.stderr.strip().splitlines()[-4:])
        if "No module named 'guestfs'" in p.stderr:
            raise SpecError("python3-guestfs is not installed: run `make deps`") from None
        raise SpecError(f"libguestfs failed ({args[0]}): {tail}") from None
    if "error" in out:
        raise SpecError(out["error"])
    return out
