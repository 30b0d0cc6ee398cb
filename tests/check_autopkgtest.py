#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0
"""`make check-autopkgtest`: kstall.deb through autopkgtest, Debian's CI
engine, with the `null` virt server (the tests run on this host, against the
package autopkgtest installs). The source tree autopkgtest reads is
assembled here: the checkout's files (what a source package would hold),
debian/control naming the binary package, a debian/changelog, and
ci/autopkgtest/control as debian/tests/control. The tests import the
installed tree (KSTALL_TREE); those about the checkout's own files read
the source tree, as in a source package's autopkgtest.
Prints autopkgtest's summary and the time; exits with its status."""
from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main() -> int:
    deb = Path(subprocess.run([sys.executable, str(REPO / "ci" / "build_deb.py")], capture_output=True, text=True,
                              check=True).stdout.split()[-1])
    with tempfile.TemporaryDirectory(prefix="kstall-autopkgtest-") as d:
        src = Path(d) / "kstall"
        files = subprocess.run(["git", "-C", str(REPO), "ls-files"], capture_output=True, text=True,
                               check=True).stdout.split()
        for f in files:
            (src / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / f, src / f)
        (src / "debian" / "tests").mkdir(parents=True)
        (src / "debian" / "control").write_text(
            "Source: kstall\nMaintainer: kstall <kstall@kstall.invalid>\n\nPackage: kstall\nArchitecture: any\n"
            "Description: kernel deadlock reproduction and regression-test harness\n")
        (src / "debian" / "changelog").write_text(  # autopkgtest reads the source's name and version from it
            f"kstall ({deb.name.split('_')[1]}) unstable; urgency=medium\n\n  * make check-autopkgtest.\n\n"
            " -- kstall <kstall@kstall.invalid>  Thu, 01 Jan 2026 00:00:00 +0000\n")
        shutil.copy2(REPO / "ci" / "autopkgtest" / "control", src / "debian" / "tests" / "control")
        t0 = time.monotonic()
        p = subprocess.run(["autopkgtest", "--no-built-binaries", "--summary-file", f"{d}/summary", str(deb),
                            f"{src}/", "--", "null"], capture_output=True, text=True, timeout=3600)
        took = time.monotonic() - t0
        summary = Path(f"{d}/summary").read_text() if Path(f"{d}/summary").is_file() else p.stderr[-3000:]
    print(summary.rstrip())
    print(f"autopkgtest ({deb.name}, null): exit {p.returncode} in {took:.0f}s")
    return p.returncode


if __name__ == "__main__":
    sys.exit(main())
