# SPDX-License-Identifier: GPL-2.0
"""Packages and images crafted to reach outside kstall's directories: each is
refused with an ERROR naming the member, line or path, and an audit hook in
the process that reads them sees nothing written, renamed or removed outside
the test's own directory (the cache and the temporary directory are in it)."""
from __future__ import annotations

import gzip
import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path
from types import SimpleNamespace

import pytest

from harness.base import paths
from images.kernels import guestfs_child, modules
from images.guest import initramfs
from images.kernels.kernel import SpecError

REPO = paths.REPO
RELEASE = "6.16.12+kstall-amd64"


def _tar(members: list[tuple[str, bytes | None, str]]) -> bytes:
    """(name, data or None for a symlink, link target)"""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for name, data, target in members:
            info = tarfile.TarInfo(name)
            if data is None:
                info.type, info.linkname = tarfile.SYMTYPE, target
                tar.addfile(info)
            else:
                info.size, info.mode = len(data), 0o644
                tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def hostile_deb(directory: Path, members: list[tuple[str, bytes | None, str]]) -> Path:
    """A .deb built by dpkg-deb, its data.tar then replaced by one that holds members."""
    root = directory / "pkg"
    (root / "DEBIAN").mkdir(parents=True)
    (root / "DEBIAN" / "control").write_text(f"Package: linux-image-{RELEASE}\nVersion: 6.16.12-1\n"
                                             "Architecture: amd64\nMaintainer: kstall <kstall@invalid>\n"
                                             "Description: crafted for a test\n")
    (root / "boot").mkdir()
    (root / "boot" / "README").write_text("x\n")
    plain = directory / "plain.deb"
    subprocess.run(["dpkg-deb", "-Zgzip", "-b", "--root-owner-group", str(root), str(plain)], check=True,
                   capture_output=True)
    work = directory / "ar"
    work.mkdir()
    subprocess.run(["ar", "x", str(plain)], cwd=work, check=True)
    (work / "data.tar.gz").write_bytes(gzip.compress(_tar(members)))
    out = directory / f"linux-image-{RELEASE}_6.16.12-1_amd64.deb"
    subprocess.run(["ar", "rc", str(out), "debian-binary", "control.tar.gz", "data.tar.gz"], cwd=work, check=True)
    return out


def hostile_rpm(directory: Path, names: list[str]) -> Path:
    """An rpm built by rpmbuild, its payload then replaced by a gzip'd newc
    archive holding names (rpm -qp reads only the headers; bsdtar the payload)."""
    directory.mkdir(parents=True, exist_ok=True)
    top = directory / "top"
    spec = directory / "k.spec"
    spec.write_text("Name: kernel-core\nVersion: 6.16.12\nRelease: 1\nSummary: crafted for a test\n"
                    "License: GPL-2.0\nBuildArch: x86_64\n%description\ncrafted\n"
                    "%install\nmkdir -p %{buildroot}/boot\necho x > %{buildroot}/boot/README\n"
                    "%files\n/boot/README\n")
    subprocess.run(["rpmbuild", "-bb", "--quiet", "--define", f"_topdir {top}", "--define",
                    "_binary_payload w9.gzdio", "--define", "__os_install_post %{nil}", "--define",
                    "debug_package %{nil}", "--target", "x86_64", str(spec)], check=True, capture_output=True)
    built = next((top / "RPMS").rglob("*.rpm")).read_bytes()
    offset = 96  # the lead, then the signature header (padded to 8) and the header
    for pad in (True, False):
        nindex, hsize = int.from_bytes(built[offset + 8:offset + 12], "big"), \
            int.from_bytes(built[offset + 12:offset + 16], "big")
        offset += 16 + 16 * nindex + hsize
        if pad:
            offset += -offset % 8
    payload = initramfs.newc_archive({n: b"crafted" for n in names})
    out = directory / "kernel-core-6.16.12-1.x86_64.rpm"
    out.write_bytes(built[:offset] + gzip.compress(payload))
    return out


AUDIT = r'''
import json, os, sys
allowed = sys.argv[1]
bad = []
def hook(event, args):
    if event == "open" and args[0] is not None and not isinstance(args[0], int):
        mode, flags = args[1] or "", args[2] or 0
        if ("w" in mode or "a" in mode or "x" in mode or flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT)):
            path = os.path.abspath(os.fsdecode(args[0]))
            if not path.startswith(allowed) and not path.startswith("/dev/"):
                bad.append([event, path])
    elif event in ("os.rename", "os.remove", "os.rmdir", "shutil.rmtree", "os.mkdir", "os.symlink", "os.link",
                   "os.truncate", "os.chmod"):
        if any(isinstance(a, int) and a >= 0 for a in args[1:]):
            return  # relative to a directory descriptor (shutil.rmtree's walk): its rmtree event names the tree
        for a in args[:2]:
            if isinstance(a, (str, bytes, os.PathLike)) and not os.path.abspath(os.fsdecode(a)).startswith(allowed):
                bad.append([event, os.fsdecode(a)])
sys.addaudithook(hook)
sys.path.insert(0, sys.argv[2])
from images.kernels.kernel import SpecError
from images.kernels.schemes import resolve
errors = []
for spec in sys.argv[3:]:
    try:
        resolve(spec)
        errors.append([spec, None])
    except SpecError as e:
        errors.append([spec, str(e)])
print(json.dumps({"errors": errors, "outside": bad}))
'''


def resolve_audited(tmp_path: Path, *specs: str) -> dict:
    """resolve(spec) for each spec in a process whose every write, rename and
    removal is audited; what each raised, and what touched outside tmp_path."""
    env = dict(os.environ, KSTALL_CACHE=str(tmp_path / "cache"), TMPDIR=str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir(exist_ok=True)
    p = subprocess.run([sys.executable, "-c", AUDIT, str(tmp_path) + os.sep, str(REPO), *specs],
                       capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


def assert_refused(result: dict, *words: str) -> None:
    assert result["outside"] == [], result["outside"]
    for (spec, error), word in zip(result["errors"], words):
        assert error is not None and word in error, (spec, error)


def test_package_members_that_climb_out_are_refused_naming_them(tmp_path):
    up = "../" * 24  # past the cache, the test's directory and / itself
    climb = f"./usr/lib/modules/{RELEASE}/kernel/{up}tmp/kstall-evil.ko"
    deb = hostile_deb(tmp_path / "a", [(f"./boot/vmlinuz-{RELEASE}", b"MZ", ""), (climb, b"evil", "")])
    rpm = hostile_rpm(tmp_path / "b", [f"lib/modules/{RELEASE}/vmlinuz",
                                       f"lib/modules/{RELEASE}/kernel/{up}tmp/kstall-evil.ko"])
    r = resolve_audited(tmp_path, f"deb:{deb}", f"rpm:{rpm}")
    assert_refused(r, "kstall-evil.ko' leaves the package's tree: refused",
                   "kstall-evil.ko' leaves the package's tree: refused")
    assert not Path("/tmp/kstall-evil.ko").exists()
    assert not list((tmp_path / "cache" / "kernels").glob("*/*")), "a refused package left a kernel directory"


def test_a_link_where_a_kernel_file_belongs_is_refused(tmp_path):
    deb = hostile_deb(tmp_path / "a", [(f"./boot/vmlinuz-{RELEASE}", None, "/etc/shadow")])
    r = resolve_audited(tmp_path, f"deb:{deb}")
    assert_refused(r, "is a link (to '/etc/shadow') where a file belongs: refused")


def test_a_release_that_is_a_path_is_refused(tmp_path):
    deb = hostile_deb(tmp_path / "a", [("./boot/vmlinuz-..", b"MZ", "")])
    r = resolve_audited(tmp_path, f"deb:{deb}")
    assert_refused(r, "names no kernel release a kernel could have")


def test_modules_dep_lines_that_leave_the_tree_are_refused_naming_the_line(tmp_path):
    for line in ("/etc/shadow:", "kernel/a.ko: ../../../../etc/passwd"):
        tree = modules.Tree(tmp_path / line.replace("/", "_"), RELEASE)
        tree.dir.mkdir(parents=True)
        (tree.dir / "modules.dep").write_text(f"kernel/ok.ko:\n{line}\n")
        with pytest.raises(SpecError, match=r"modules.dep line 2 names a file outside the module tree"):
            modules.install(tree, ["a", "shadow"], tmp_path / "out")
        assert not (tmp_path / "out").exists() or not list((tmp_path / "out").iterdir())


def test_an_image_release_or_grub_entry_that_is_a_path_is_refused(tmp_path):
    disk = tmp_path / "disk.qcow2"
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", str(disk), "16M"], check=True)
    r = resolve_audited(tmp_path, f"image:{disk}#../../../etc", f"image:{disk}#a/b")
    assert_refused(r, "is not a kernel release", "is not a kernel release")
    # inside the image: /boot/vmlinuz-.. and a grub entry that boots it
    files = {"/boot": ["vmlinuz-..", "grub"], "/boot/grub/grub.cfg": "menuentry 'x' {\n linux /boot/vmlinuz-.. ro\n}\n"}
    g = SimpleNamespace(is_dir=lambda p: p in ("/boot",), ls=lambda p: files.get(p, []),
                        is_file=lambda p: p in files, cat=lambda p: files[p], exists=lambda p: False)
    with pytest.raises(SpecError, match=r"refused, as no kernel release: /boot/vmlinuz-\.\."):
        guestfs_child.choose(g, "")


def test_a_backing_file_outside_the_images_directory_is_refused(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    base = elsewhere / "base.qcow2"
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", str(base), "16M"], check=True)
    (tmp_path / "img").mkdir()
    top = tmp_path / "img" / "top.qcow2"
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", "-F", "qcow2", "-b", str(base), str(top)], check=True)
    r = resolve_audited(tmp_path, f"image:{top}")
    assert_refused(r, f"its backing file {base} is outside the image's directory")


def test_a_host_commands_file_systems_below_root_are_its_own_overlays():
    """Recorded /proc/self/mountinfo lines of a host with /home, a tmpfs
    /tmp and a path with a space: each real file system below / is
    overlaid; /proc, /sys, /dev and their children are the guest's own."""
    from harness.guest import hostfs
    info = "\n".join([
        "22 1 253:1 / / rw,relatime shared:1 - ext4 /dev/vda1 rw",
        "23 22 0:21 / /proc rw,nosuid shared:12 - proc proc rw",
        "24 22 0:22 / /sys rw,nosuid shared:7 - sysfs sysfs rw",
        "25 24 0:23 / /sys/fs/cgroup rw shared:9 - cgroup2 cgroup2 rw",
        "26 22 0:5 / /dev rw,nosuid shared:2 - devtmpfs udev rw",
        "27 26 0:24 / /dev/shm rw shared:4 - tmpfs tmpfs rw",
        "28 22 253:2 / /home rw,relatime shared:30 - ext4 /dev/vda2 rw",
        "29 22 0:31 / /tmp rw shared:31 - tmpfs tmpfs rw",
        "30 28 0:40 / /home/alice/my\\040data rw shared:32 - ext4 /dev/vdb rw",
        "31 22 0:41 / /run rw shared:33 - tmpfs tmpfs rw",
    ])
    assert hostfs.submounts(info) == ["/home", "/tmp"]
