# SPDX-License-Identifier: GPL-2.0
"""A kernel's whole module tree as a disk the guest mounts read-only at
/lib/modules, for programs that expect every module to load on demand
(syzkaller's reproducers: request_module() runs modprobe in the guest).

The initramfs holds only the few modules a data file names; the whole tree
(Debian 6.1: 4,022 modules, 390 MB) does not fit in guest RAM. So it is
read once from the kernel's packages (the same tar streams as
images/kernels/packages.py), every module stored uncompressed (busybox's
modprobe loads plain .ko files), `depmod -b` writes its modules.dep,
modules.alias and modules.devname, and mkfs.ext4 -d makes the image, cached
per kernel (harness/base/kernel_cache.py MODTREES), the most recently used
up to KSTALL_MODTREE_MAX_GB (4). Its modules.alias is kept beside it: the
host asks it which module would answer a request.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

from harness.base import kernel_cache, paths, untrusted
from images.kernels import cached, debian, modules, packages
from images.kernels.kernel import Kernel, Progress, SpecError

ALIASES = "aliases"  # suffix of the kept modules.alias (with modules.builtin.alias appended)
# the image's room beyond its files: ext4's metadata and depmod's indexes
SLACK_BYTES = 96 << 20
MKFS_TIMEOUT = 600
# the module trees kept, most recently used first (each 0.4-0.9 GB on disk)
MAX_BYTES = int(float(os.environ.get("KSTALL_MODTREE_MAX_GB", "4")) * (1 << 30))


@dataclass(frozen=True)
class ModuleDisk:
    image: Path        # the whole tree, an ext4 image of <release>/...
    mount: list[Path]  # what the guest loads to mount it (its disk's driver, its filesystem), in order


def image(kernel: Kernel, mount_with: tuple[str, ...], progress: Progress | None = None,
          test_modules: tuple[Path, ...] = ()) -> ModuleDisk:
    """The kernel's module tree as an ext4 image, made once per kernel, and
    the modules mount_with names (with what they depend on, in load order)
    taken out of it for the initramfs: the guest loads those to mount it.
    test_modules: the ones built for this kernel that the program needs
    (test_modules.py), put in its tree under updates/kstall/: a tree with
    them is another image, and its snapshots are other snapshots."""
    # only the program's own: a program that needs none boots the plain tree whatever was built
    # since, so its snapshot's key does not change when another program's test module is built
    extra = sorted(test_modules, key=lambda p: p.name)
    added = _added(extra)
    out = kernel_cache.path(kernel_cache.MODTREES, kernel.key, f"{added}.ext4" if added else "ext4")
    tag = hashlib.sha256(" ".join(mount_with).encode()).hexdigest()[:8]
    # each image its own: making one with a test module added (which empties its mount modules first)
    # never pulls another's from under a kstall reading them, and prune() takes each with its image
    mount_dir = kernel_cache.path(kernel_cache.MODTREES, kernel.key,
                                  f"{added}.mount-{tag}" if added else f"mount-{tag}")
    order = mount_dir / "order"
    try:
        os.utime(out)  # its last use, first: what another kstall's prune() keeps
    except FileNotFoundError:
        pass
    table = _aliases_path(kernel, added)
    if not (out.exists() and order.exists() and table.exists()):
        with cached.locked(out):
            shared = kernel_cache.path(kernel_cache.MODTREES, kernel.key, f"mount-{tag}")
            if added and out.exists() and not order.exists() and (shared / "order").exists():
                # an image made before each had its own: the mount modules are the same ones
                shutil.copytree(shared, mount_dir, dirs_exist_ok=True)
            if not (out.exists() and order.exists() and table.exists()):
                _make(kernel, out, mount_with, mount_dir, table, progress, extra)
                prune(out.parent, keep=out)
    return ModuleDisk(out, [mount_dir / f"{m}.ko" for m in order.read_text().split()])


def prune(d: Path, keep: Path, keep_bytes: int = MAX_BYTES) -> list[Path]:
    """Remove the least recently used kernels' trees (image, aliases, mount
    modules) beyond keep_bytes on disk; keep is never removed. What went."""
    images = []
    for img in d.glob("*.ext4"):
        try:
            st = img.stat()
        except FileNotFoundError:  # another kstall pruned it
            continue
        images.append((img == keep, st.st_mtime, st.st_blocks * 512, img))
    gone, total = [], 0
    for kept, _, size, img in sorted(images, reverse=True):
        total += size
        if not kept and total > keep_bytes:
            for p in [img, d / f"{img.stem}.{ALIASES}", *d.glob(img.stem + ".mount-*")]:  # each image's own
                shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)
            gone.append(img)
    return gone


def _make(kernel: Kernel, out: Path, mount_with: tuple[str, ...], mount_dir: Path, table: Path,
          progress: Progress | None, extra: list[Path]) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="modtree-", dir=out.parent) as tmp:
        root = Path(tmp) / "root"
        release = _extract(kernel, Path(tmp), root, progress)
        for ko in extra:
            (root / release / "updates" / "kstall").mkdir(parents=True, exist_ok=True)
            shutil.copy2(ko, root / release / "updates" / "kstall" / ko.name)
        tree = _depmod(root, release)
        shutil.rmtree(mount_dir, ignore_errors=True)
        wanted = tree.with_soft_deps(list(mount_with))  # ext4 loads crc32c by name, not by symbol
        plan = modules.install(tree, wanted, mount_dir)
        paths.write_atomic(mount_dir / "order", "\n".join(modules.to_load(plan, wanted)) + "\n")
        _kept_aliases(root / release, table)
        if not out.exists():
            if progress:
                progress(f"{kernel.canonical}: making its module tree's disk image")
            _mkfs(root, out)


def aliases(kernel: Kernel, test_modules: tuple[Path, ...] = ()) -> Path | None:
    """The module tree's modules.alias and modules.builtin.alias (with
    test_modules, as image()), once image() made it."""
    p = _aliases_path(kernel, _added(test_modules))
    return p if p.exists() else None


def _added(test_modules: tuple[Path, ...] | list[Path]) -> str:
    """The test modules' part of a tree's file names ('' for the plain tree)."""
    return "+".join(p.stem for p in sorted(test_modules, key=lambda p: p.name))


def _aliases_path(kernel: Kernel, added: str) -> Path:
    # each image's own, read from its own tree: a test module added to a tree may add aliases to it
    return kernel_cache.path(kernel_cache.MODTREES, kernel.key, f"{added}.{ALIASES}" if added else ALIASES)


def _packages(kernel: Kernel, work: Path, progress: Progress | None) -> list[Path]:
    """The package files that hold the kernel's modules."""
    scheme = kernel.canonical.split(":", 1)[0]
    if scheme == "debian":
        return [debian.fetch_modules_package(kernel, work, progress)]
    if scheme in ("deb", "rpm"):
        return [Path(f) for f in kernel.origin.get("files", ())]
    raise SpecError(f"{kernel.canonical}: kstall gets a kernel's whole module tree from debian:, deb: and rpm: "
                    "kernels only")


def _extract(kernel: Kernel, work: Path, root: Path, progress: Progress | None) -> str:
    """Every file of lib/modules/<release>/ into root/<release>/, modules
    uncompressed; the release."""
    release = kernel.release
    if release is None or untrusted.release(release) is None:
        raise SpecError(f"{kernel.canonical}: its release is unknown, so its module tree cannot be found")
    prefixes = (f"lib/modules/{release}/", f"usr/lib/modules/{release}/")
    compressed: list[Path] = []
    count = 0
    read = []
    for pkg in _packages(kernel, work, progress):
        read.append(pkg.name)
        if progress:
            progress(f"{kernel.canonical}: reading every module from {pkg.name}")
        count += _stream(pkg, prefixes, root / release, compressed)
        if pkg.parent == work:
            pkg.unlink()  # a downloaded package: only its modules are kept
    if count == 0:
        # Debian 6.19+ splits a kernel in linux-binary, -base and -modules; a backports suite that
        # moved on keeps an older build's signed binary but not its modules (6.19.14, 2026-11)
        raise SpecError(f"{kernel.canonical}: its packages ({', '.join(read)}) hold no modules under "
                        f"lib/modules/{release}" + (f"; Debian's archive no longer has linux-modules-{release}, "
                                                    "so its whole module tree cannot be read"
                                                    if any(n.startswith("linux-binary-") for n in read) else ""))
    if compressed:
        if progress:
            progress(f"{kernel.canonical}: decompressing {len(compressed)} modules")
        _decompress_all(compressed, os.cpu_count() or 2)
    return release


def _stream(pkg: Path, prefixes: tuple[str, ...], dest: Path, compressed: list[Path]) -> int:
    """The package's files under prefixes into dest; how many."""
    count = 0
    with packages.stream(pkg) as s:
        for m in s.tar:
            if not m.isfile():  # directories, and links that could lead out of the tree
                continue
            name = untrusted.relative_path(m.name)
            if name is None:
                raise SpecError(f"package member {m.name!r} leaves the package's tree: refused")
            rel = next((name[len(p):] for p in prefixes if name.startswith(p)), None)
            if not rel or rel in ("vmlinuz", "config") or rel.startswith("build"):
                continue
            target = dest / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            src = s.tar.extractfile(m)
            assert src is not None
            with open(target, "wb") as out:
                shutil.copyfileobj(src, out, 1 << 20)
            if target.suffix in modules.DECOMPRESS:
                compressed.append(target)
            count += 1
    return count


def _decompress_all(files: list[Path], workers: int) -> None:
    """foo.ko.xz -> foo.ko, on as many threads as the host has cores (each runs xz or zstd)."""
    errors: list[BaseException] = []

    def work(part: list[Path]) -> None:
        try:
            for path in part:
                modules.uncompressed_copy(path, path.with_suffix(""))
                path.unlink()
        except BaseException as e:  # noqa: BLE001 - raised on the calling thread
            errors.append(e)
    threads = [threading.Thread(target=work, args=(files[i::workers],), daemon=True) for i in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


def _depmod(root: Path, release: str) -> modules.Tree:
    """depmod over the tree as the guest will see it (/lib/modules/<release>)."""
    base = root.parent / "depmod-base"
    (base / "lib").mkdir(parents=True, exist_ok=True)
    link = base / "lib" / "modules"
    if not link.exists():
        link.symlink_to(root)
    for stale in (root / release).glob("modules.*"):
        if stale.name not in ("modules.order", "modules.builtin", "modules.builtin.modinfo"):
            stale.unlink()  # written for compressed names: depmod writes them again
    tree = modules.Tree(base, release)
    tree.ensure_dep()
    return tree


def _kept_aliases(tree: Path, dest: Path) -> None:
    text = "".join((tree / f).read_text(errors="replace") for f in ("modules.alias", "modules.builtin.alias")
                   if (tree / f).is_file())
    paths.write_atomic(dest, text)


def _mkfs(root: Path, out: Path) -> None:
    size = sum(f.stat().st_size for f in root.rglob("*") if f.is_file()) * 5 // 4 + SLACK_BYTES
    part = out.with_name(out.name + ".part")
    try:
        p = subprocess.run(["mkfs.ext4", "-q", "-F", "-L", "kstall-modules", "-m", "0", "-E", "root_owner=0:0",
                            "-d", str(root), str(part), f"{size >> 20}M"], capture_output=True, text=True,
                           timeout=MKFS_TIMEOUT)
    except FileNotFoundError:
        raise SpecError(f"mkfs.ext4 not found: {paths.install_hint('e2fsprogs')}") from None
    except subprocess.TimeoutExpired:
        p = None
    if p is None or p.returncode != 0:
        part.unlink(missing_ok=True)
        raise SpecError(f"mkfs.ext4 -d {root} failed: " + (p.stderr.strip()[-300:] if p else "timed out"))
    part.rename(out)
