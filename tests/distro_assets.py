# SPDX-License-Identifier: GPL-2.0
"""Distro artefacts for the tests and benchmarks, made from Debian's packages
(Fedora's and Ubuntu's own cannot be fetched on kstall's build machines):

- fedora_rpms(): a real Debian kernel repackaged by rpmbuild in the Fedora
  layout: kernel-core (lib/modules/<release>/vmlinuz, config, System.map,
  module metadata, modules outside drivers/) and kernel-modules (drivers/),
  every module compressed as .ko.xz or .ko.zst, no modules.dep (Fedora makes
  it at install time).
- debian_debs(): the .deb files of a Debian kernel, as a fleet would hold them.
- disk_image(): a qcow2 disk (GPT, one ext4 partition) holding a small trixie
  system (debootstrap minbase, systemd, udev, initramfs-tools) with a Debian
  kernel installed by dpkg in a chroot (so its initrd is the image's own),
  and a grub.cfg that grub-mkconfig wrote inside it (virt-customize).
  Building it needs root (chroot).

Everything is cached under <kstall cache>/test-assets, keyed by what shaped it.

    /usr/bin/python3 tests/distro_assets.py rpm 6.16.12 xz
"""
from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.base import paths  # noqa: E402
from images.kernels import debian  # noqa: E402
from images.kernels.download import download  # noqa: E402

COMPRESS = {"xz": ["xz", "--check=crc32", "--lzma2=dict=1MiB", "-q"], "zst": ["zstd", "-q", "--rm", "-T1"]}

SPEC = """\
Name: kernel
Version: {version}
Release: 1.kstall
Summary: Debian's {package} kernel, repackaged in the Fedora layout
License: GPL-2.0-only
AutoReqProv: no

%description
Test asset of kstall: a Debian kernel in Fedora's kernel-core/kernel-modules layout.

%package core
Summary: vmlinuz, config and core modules of {release}
%description core
Debian's {package} in the Fedora kernel-core layout.

%package modules
Summary: driver modules of {release}
Requires: kernel-core = %{{version}}-%{{release}}
%description modules
Debian's {package} driver modules in the Fedora kernel-modules layout.

%install
cp -a {root}/. %{{buildroot}}/

%files core -f {lists}/core.list
%files modules -f {lists}/modules.list
"""


def _run(cmd: list[str], timeout: float = 600, **kw) -> str:
    """A build step whose failure says what the tool printed."""
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)
    if p.returncode != 0:
        raise RuntimeError(f"{cmd[0]} exited with {p.returncode}: {(p.stderr or p.stdout)[-2000:]}")
    return p.stdout


def assets_dir() -> Path:
    d = paths.cache_dir() / "test-assets"
    d.mkdir(parents=True, exist_ok=True)
    return d


def debian_debs(version: str) -> list[Path]:
    """The Debian packages of debian:<version> (image, and binary/base/modules
    where they are split), downloaded once."""
    archive = debian.archive_for(debian.parse_query(version)[2])
    k = debian.find(archive.kernels(), version)
    out_dir = assets_dir() / "deb" / k.release
    out_dir.mkdir(parents=True, exist_ok=True)
    files = []
    for pkg in dict.fromkeys([k.image_package, k.config_package, k.modules_package or k.image_package]):
        url, fname, size, sha = archive.uris(pkg)
        dest = out_dir / fname
        if not dest.is_file() or dest.stat().st_size != size:
            part = dest.with_name(dest.name + ".part")
            download(url, part, size, sha, pkg, None)
            part.replace(dest)
        files.append(dest)
    return files


def _compress_all(root: Path, kind: str) -> None:
    """Every module under root as .ko.<kind> (Debian 6.16+ ships .ko.xz)."""
    for f in list(root.rglob("*.ko.xz")) + list(root.rglob("*.ko.zst")):
        tool = ["xz", "-dq"] if f.suffix == ".xz" else ["zstd", "-dq", "--rm"]
        if f.suffix[1:] != kind:
            subprocess.run([*tool, str(f)], check=True)
    plain = [str(f) for f in root.rglob("*.ko")]
    # a few hundred files per process, two at a time
    batches = [plain[i:i + 200] for i in range(0, len(plain), 200)]
    procs: list[subprocess.Popen] = []
    for batch in batches:
        procs.append(subprocess.Popen([*COMPRESS[kind], *batch]))
        if len(procs) >= 2:
            if procs.pop(0).wait() != 0:
                raise RuntimeError("module compression failed")
    for p in procs:
        if p.wait() != 0:
            raise RuntimeError("module compression failed")


def fedora_rpms(version: str, compress: str = "xz") -> list[Path]:
    """kernel-core and kernel-modules rpms of debian:<version> (cached)."""
    debs = debian_debs(version)
    k = debian.find(debian.Archive().kernels(), version)
    release = k.release
    out_dir = assets_dir() / "rpm" / f"{release}-{compress}"
    rpms = sorted(out_dir.glob("*.rpm"))
    if len(rpms) == 2:
        return rpms
    shutil.rmtree(out_dir, ignore_errors=True)
    with tempfile.TemporaryDirectory(prefix="kstall-rpm-", dir=assets_dir()) as tmp:
        t = Path(tmp)
        deb_root, root = t / "deb", t / "root"
        for deb in debs:
            subprocess.run(["dpkg-deb", "-x", str(deb), str(deb_root)], check=True)
        src = next(p for p in (deb_root / "lib" / "modules" / release, deb_root / "usr" / "lib" / "modules" / release)
                   if p.is_dir())
        mod = root / "lib" / "modules" / release
        mod.parent.mkdir(parents=True)
        shutil.copytree(src, mod, symlinks=True)
        for name, dest in (("vmlinuz", "vmlinuz"), ("config", "config"), ("System.map", "System.map")):
            boot = deb_root / "boot" / f"{name}-{release}"
            if boot.is_file():
                shutil.copy(boot, mod / dest)
        for generated in mod.glob("modules.*"):
            if generated.name not in ("modules.builtin", "modules.order", "modules.builtin.modinfo"):
                generated.unlink()
        _compress_all(mod, compress)
        (t / "lists").mkdir()
        core, drivers = [f"%dir /lib/modules/{release}"], []
        for f in sorted(p for p in mod.rglob("*") if not p.is_dir()):
            rel = "/" + str(f.relative_to(root))
            (drivers if f"/{release}/kernel/drivers/" in rel else core).append(rel)
        (t / "lists" / "core.list").write_text("\n".join(core) + "\n")
        (t / "lists" / "modules.list").write_text("\n".join(drivers) + "\n")
        spec = t / "kernel.spec"
        spec.write_text(SPEC.format(version=k.upstream, package=debs[0].name, release=release, root=root,
                                    lists=t / "lists"))
        _run(["rpmbuild", "-bb", "--quiet", "--define", f"_topdir {t / 'top'}",
                        "--define", "__os_install_post %{nil}", "--define", "_build_id_links none",
                        "--define", "debug_package %{nil}", "--define", "_binary_payload w3.zstdio",
                        "--define", "_binaries_in_noarch_packages_terminate_build 0",
                        # AutoReqProv: no still ran elfdeps twice per module: 86 s of a 98 s build
                        "--define", "__elf_provides %{nil}", "--define", "__elf_requires %{nil}",
                        "--target", "x86_64", str(spec)], timeout=1800)
        out_dir.mkdir(parents=True, exist_ok=True)
        for r in (t / "top" / "RPMS").rglob("*.rpm"):
            shutil.move(str(r), out_dir / r.name)
    return sorted(out_dir.glob("*.rpm"))


ROOTFS_PACKAGES = "systemd-sysv,udev,kmod,initramfs-tools,linux-base,zstd,grub-pc-bin,grub2-common"


def _locked(path: Path):
    import fcntl
    path.parent.mkdir(parents=True, exist_ok=True)
    f = open(path, "w")
    fcntl.flock(f, fcntl.LOCK_EX)
    return f


def trixie_rootfs() -> Path:
    """A minimal trixie root filesystem (debootstrap, once)."""
    d = assets_dir() / "rootfs-trixie"
    with _locked(assets_dir() / "rootfs-trixie.lock"):
        if (d / ".complete").exists():
            return d
        shutil.rmtree(d, ignore_errors=True)
        _run(["debootstrap", "--variant=minbase", f"--include={ROOTFS_PACKAGES}", "trixie", str(d),
              "http://deb.debian.org/debian"], timeout=1800)
        (d / ".complete").touch()
    return d


MIB = 1 << 20


def _ext4_gpt_qcow2(root: Path, raw: Path, out: Path) -> None:
    """root as one ext4 partition of a GPT disk, 256 MiB free, with the
    grub.cfg that grub-mkconfig writes for it. mke2fs -d fills the file
    system on the host (virt-make-fs took 72 s more, in a TCG appliance);
    grub-probe needs the disk as a block device, which only the appliance
    gives here (no loop partitions), so virt-customize runs grub-mkconfig."""
    from images.kernels import appliance
    used = int(_run(["du", "-sxb", str(root)]).split()[0])
    fs_mib = used * 11 // 10 // MIB + 256
    with open(raw, "wb") as f:
        f.truncate((fs_mib + 2) * MIB)  # 1 MiB before the partition, 1 MiB for the backup GPT
    _run(["sfdisk", "-q", str(raw)],
         input=f"label: gpt\nstart=2048, size={fs_mib * 2048}, type=0FC63DAF-8483-4772-8E79-3D69D8477DE4\n")
    _run(["mke2fs", "-q", "-F", "-t", "ext4", "-d", str(root), "-E", f"offset={MIB}", str(raw), f"{fs_mib}M"])
    _run(["qemu-img", "convert", "-q", "-f", "raw", "-O", "qcow2", str(raw), str(out)])
    _run(["virt-customize", "-q", "--no-network", "-a", str(out), "--run-command",
          "mkdir -p /boot/grub && grub-mkconfig -o /boot/grub/grub.cfg"], timeout=1800, env=appliance.environment())


def disk_image(version: str) -> Path:
    """trixie with debian:<version> installed, as a qcow2 (cached)."""
    release = debian.find(debian.Archive().kernels(), version).release
    out = assets_dir() / "images" / f"trixie-{release}.qcow2"
    if out.is_file():
        return out
    debs = debian_debs(version)
    base = trixie_rootfs()
    with _locked(out.with_suffix(".lock")), tempfile.TemporaryDirectory(prefix="kstall-img-", dir=assets_dir()) as tmp:
        if out.is_file():
            return out
        root = Path(tmp) / "root"
        subprocess.run(["cp", "-a", str(base), str(root)], check=True)
        (root / ".complete").unlink()
        (root / "etc" / "hostname").write_text("kstall-test\n")
        (root / "tmp" / "k").mkdir()
        for deb in debs:
            shutil.copy(deb, root / "tmp" / "k" / deb.name)
        subprocess.run(["mount", "-t", "proc", "proc", str(root / "proc")], check=True)
        try:
            _run(["chroot", str(root), "sh", "-c", "dpkg -i /tmp/k/*.deb"], timeout=1200)
        finally:
            subprocess.run(["umount", str(root / "proc")], check=True)
        shutil.rmtree(root / "tmp" / "k")
        part = out.with_name(out.name + ".part")
        part.parent.mkdir(parents=True, exist_ok=True)
        _ext4_gpt_qcow2(root, Path(tmp) / "disk.raw", part)
        part.replace(out)
    return out


def no_kernel_image() -> Path:
    """The trixie root without a kernel on GPT + LVM + XFS (guestfish), for
    'an image with no kernel' and to read LVM and XFS."""
    from images.kernels import appliance
    out = assets_dir() / "images" / "trixie-nokernel-lvm-xfs.qcow2"
    if out.is_file():
        return out
    base = trixie_rootfs()
    with _locked(out.with_suffix(".lock")), tempfile.TemporaryDirectory(prefix="kstall-img-", dir=assets_dir()) as tmp:
        if out.is_file():
            return out
        tarball = Path(tmp) / "root.tar"
        subprocess.run(["tar", "-C", str(base), "--exclude=./.complete", "-cf", str(tarball), "."], check=True)
        part = out.with_name(out.name + ".part")
        subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", str(part), "2G"], check=True)
        script = (f"add {part} format:qcow2\nrun\npart-disk /dev/sda gpt\npvcreate /dev/sda1\n"
                  "vgcreate vg0 /dev/sda1\nlvcreate root vg0 1500\nmkfs xfs /dev/vg0/root\n"
                  f"mount /dev/vg0/root /\ntar-in {tarball} /\n")
        _run(["guestfish"], input=script, timeout=1800, env=appliance.environment())
        part.replace(out)
    return out


def empty_deb(directory: Path) -> Path:
    """A real .deb (dpkg-deb -b) that holds no kernel."""
    root = directory / "pkg"
    (root / "DEBIAN").mkdir(parents=True)
    (root / "usr" / "share" / "doc" / "kstall-nokernel").mkdir(parents=True)
    (root / "usr" / "share" / "doc" / "kstall-nokernel" / "README").write_text("no kernel here\n")
    (root / "DEBIAN" / "control").write_text("Package: kstall-nokernel\nVersion: 1.0\nArchitecture: all\n"
                                             "Maintainer: kstall <kstall@invalid>\nDescription: no kernel\n")
    out = directory / "kstall-nokernel_1.0_all.deb"
    _run(["dpkg-deb", "-b", "--root-owner-group", str(root), str(out)])
    return out


if __name__ == "__main__":
    kind, *rest = sys.argv[1:] or ["help"]
    if kind == "rpm":
        print("\n".join(map(str, fedora_rpms(rest[0], rest[1] if len(rest) > 1 else "xz"))))
    elif kind == "deb":
        print("\n".join(map(str, debian_debs(rest[0]))))
    elif kind == "image":
        print(disk_image(rest[0]))
    elif kind == "image-nokernel":
        print(no_kernel_image())
    else:
        sys.exit(__doc__)
