#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0
"""`make deb`: kstall_<version>_<arch>.deb from the tree, staged by hand and
packed by dpkg-deb (no debhelper: nothing is compiled for the package but
the guest programs, which `make guest` already builds).

    /usr/lib/kstall/     the tree kstall runs from: harness/, images/,
                         gdbscripts/, repro/ (the reproducers' sources, data
                         files and calibrations: a user's program builds with
                         the same headers), ci/matrix.toml, the built guest
                         programs of every architecture (build/guest/<arch>/)
                         and the kernel's kselftest.h (build/kselftest/), and
                         INSTALLED, which tells kstall it is read only
                         (harness/base/paths.py)
    /usr/bin/kstall      -> ../lib/kstall/harness/kstall
    /usr/share/man/man1/kstall.1.gz, /usr/share/bash-completion/completions/kstall,
    /usr/share/doc/kstall/{copyright,changelog.gz,README.md.gz}

The code and its data stay in one tree under /usr/lib: the data is read
beside the code that reads it, and the guest programs are architecture-
specific binaries. Depends are what every verify needs on this host's
architecture; Recommends what some commands need (ci/deb-relations.toml).
"""
from __future__ import annotations

import gzip
import hashlib
import os
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from harness.base import arch  # noqa: E402
from harness.base.version import version  # noqa: E402
from harness.drivers.case import ensure_guest  # noqa: E402

TREE = ("harness", "images", "gdbscripts", "repro", "ci/matrix.toml", "LICENSE", "NOTICE")
RELATIONS = REPO / "ci" / "deb-relations.toml"
SUMMARY = "kernel deadlock reproduction and regression-test harness"


def tracked(prefix: str) -> list[str]:
    out = subprocess.run(["git", "-C", str(REPO), "ls-files", "--", prefix], capture_output=True, text=True,
                         check=True).stdout.split()
    return [f for f in out if "__pycache__" not in f]


def stage(root: Path, ver: str) -> None:
    lib = root / "usr" / "lib" / "kstall"
    for prefix in TREE:
        for f in tracked(prefix):
            dest = lib / f
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / f, dest)
    for name in arch.names():
        guest = ensure_guest(lambda s: print(f"build-deb: {s}", file=sys.stderr), name)
        shutil.copytree(guest, lib / "build" / "guest" / name, ignore=shutil.ignore_patterns("obj"))
    shutil.copytree(REPO / "build" / "kselftest", lib / "build" / "kselftest")
    (lib / "VERSION").write_text(ver + "\n")
    (lib / "INSTALLED").write_text("a packaged kstall: read only (harness/base/paths.py)\n")
    (root / "usr" / "bin").mkdir(parents=True)
    (root / "usr" / "bin" / "kstall").symlink_to("../lib/kstall/harness/kstall")
    man = root / "usr" / "share" / "man" / "man1"
    man.mkdir(parents=True)
    subprocess.run(["argparse-manpage", "--module", "harness.cli", "--function", "build_parser", "--project-name",
                    "kstall", "--url", "https://kstall.invalid", "--output", str(man / "kstall.1")],
                   check=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    page = man / "kstall.1"  # argparse-manpage names the page without saying what it is: whatis wants both
    page.write_text(page.read_text().replace(".SH NAME\nkstall\n", f".SH NAME\nkstall \\- {SUMMARY}\n", 1))
    _gzip(page)
    comp = root / "usr" / "share" / "bash-completion" / "completions"
    comp.mkdir(parents=True)
    shutil.copy2(REPO / "harness" / "completion" / "kstall", comp / "kstall")
    doc = root / "usr" / "share" / "doc" / "kstall"
    doc.mkdir(parents=True)
    (doc / "copyright").write_text(
        "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/\nUpstream-Name: kstall\n\n"
        "Files: *\nCopyright: 2025-2026 the kstall authors\nLicense: GPL-2\n"
        " On Debian systems the full text of the GNU "
        "General Public License version 2 is in /usr/share/common-licenses/GPL-2.\n")
    stamp = time.strftime("%a, %d %b %Y %H:%M:%S +0000", time.gmtime())
    (doc / "changelog").write_text(f"kstall ({ver}) unstable; urgency=medium\n\n  * Built from the tree by "
                                   f"make deb.\n\n -- kstall <kstall@kstall.invalid>  {stamp}\n")
    _gzip(doc / "changelog", n=9)
    overrides = root / "usr" / "share" / "lintian" / "overrides"
    overrides.mkdir(parents=True)
    shutil.copy2(REPO / "ci" / "lintian-overrides", overrides / "kstall")
    shutil.copy2(REPO / "README.md", doc / "README.md")
    _gzip(doc / "README.md", n=9)
    for d, _, files in os.walk(root):
        os.chmod(d, 0o755)
        for f in files:
            p = Path(d) / f
            if not p.is_symlink():
                os.chmod(p, 0o755 if os.access(p, os.X_OK) else 0o644)


def _gzip(path: Path, n: int = 9) -> None:
    with open(path, "rb") as src, gzip.GzipFile(path.with_name(path.name + ".gz"), "wb", n, mtime=0) as dst:
        shutil.copyfileobj(src, dst)
    path.unlink()


def control(root: Path, ver: str) -> None:
    rel = tomllib.loads(RELATIONS.read_text())
    host = arch.host()
    deb_arch = host.debian
    depends = [d.replace("{qemu}", host.qemu_package).replace("{gdb}", host.gdb) for d in rel["depends"]]
    size = sum(p.stat().st_size for p in root.rglob("*") if p.is_file() and not p.is_symlink()) // 1024
    (root / "DEBIAN").mkdir()
    (root / "DEBIAN" / "control").write_text(
        f"Package: kstall\nVersion: {ver}\nArchitecture: {deb_arch}\nMaintainer: kstall <kstall@kstall.invalid>\n"
        f"Installed-Size: {size}\nDepends: {', '.join(depends)}\nRecommends: {', '.join(rel['recommends'])}\n"
        "Section: devel\nPriority: optional\nHomepage: https://kstall.invalid\n"
        f"Description: {SUMMARY}\n"
        " kstall boots kernels in QEMU guests, runs reproducers of kernel hangs,\n"
        " reads every vCPU with GDB, classifies the hang and gives a verdict; it\n"
        " runs kernel matrices for CI, bisects regressions and checks whether a\n"
        " distribution kernel is patched, and hands a hang to the developer's\n"
        " debugger (a held guest, a vmcore).\n")
    sums = []
    for p in sorted(root.rglob("*")):
        if p.is_file() and not p.is_symlink() and "DEBIAN" not in p.parts:
            sums.append(f"{hashlib.md5(p.read_bytes()).hexdigest()}  {p.relative_to(root)}\n")
    (root / "DEBIAN" / "md5sums").write_text("".join(sums))


def main() -> int:
    ver = version()
    out_dir = REPO / "build" / "deb"
    root = out_dir / f"kstall_{ver}_{arch.host().debian}"
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    stage(root, ver)
    control(root, ver)
    deb = out_dir / f"{root.name}.deb"
    subprocess.run(["dpkg-deb", "--root-owner-group", "-Zxz", "--build", str(root), str(deb)], check=True,
                   stdout=subprocess.DEVNULL)
    shutil.rmtree(root)
    print(deb)
    return 0


if __name__ == "__main__":
    sys.exit(main())
