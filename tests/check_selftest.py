#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0
"""`make check-selftest`: perf-refresh builds as a kernel selftest and runs
under the kselftest runner in a guest.

1. Debian's 6.17.8 source (tools/, scripts/, Makefile from the orig tarball,
   images/guest/kselftest.py) gets tools/testing/selftests/kstall/ from repro/
   (repro/selftest/Makefile on the selftests' lib.mk, settings, the sources).
2. `make -C tools/testing/selftests TARGETS=kstall USERLDFLAGS=-static
   install` builds and installs it with run_kselftest.sh.
3. A guest directory: kstall's agent, busybox (Debian's busybox-static: the
   runner's /bin/sh and tools) and the installed selftests under
   /kselftest. Its `perf-refresh` is a two-line script that hands kstall's
   arguments to the runner (KSELFTEST_PERF_REFRESH_ARGS, the runner's own
   per-test arguments) and runs run_kselftest.sh, so `kstall verify` reads
   the runner's nested TAP ("# # progress count=...").
4. On 6.17.8 the runner must report `ok 1 selftests: kstall: perf-refresh`
   and kstall NOT_REPRODUCED; on 6.16.12 the guest freezes and kstall says
   VULNERABLE.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from harness.base import arch, paths  # noqa: E402
from images.guest import kselftest  # noqa: E402

SOURCES = ["repro/selftest/Makefile", "repro/selftest/settings", "repro/repro.h", "repro/perf_refresh.c",
           "repro/signal_malloc.c"]
BUSYBOX = Path("/bin/busybox")
# what run_kselftest.sh and kselftest/runner.sh call
APPLETS = ["sh", "basename", "dirname", "realpath", "readlink", "sed", "cat", "tr", "grep", "mktemp", "echo",
           "printf", "rm", "mkdir", "ls", "sleep", "tee", "env", "head", "wc", "true", "false", "test", "["]
WRAPPER = """#!/bin/sh
# kstall's agent runs this as perf-refresh: the kselftest runner runs the test
export KSELFTEST_PERF_REFRESH_ARGS="$*"
cd /kselftest && exec ./run_kselftest.sh
"""


def say(msg: str) -> None:
    print(f"check-selftest: {msg}", flush=True)


def build_in_tree(work: Path) -> Path:
    tree = kselftest.selftests_tree(say)
    dest = tree / "tools" / "testing" / "selftests" / "kstall"
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    for src in SOURCES:
        shutil.copy(REPO / src, dest / Path(src).name)
    install = work / "kselftest"
    t0 = time.monotonic()
    p = subprocess.run(["make", "-C", str(tree / "tools" / "testing" / "selftests"), "TARGETS=kstall",
                        "USERLDFLAGS=-static", "USERCFLAGS=-Werror", f"KSFT_INSTALL_PATH={install}", "install"],
                       capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        raise SystemExit(f"check-selftest: the in-tree build failed:\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
    for f in ("run_kselftest.sh", "kselftest-list.txt", "kstall/perf-refresh", "kstall/signal-malloc",
              "kstall/settings"):
        if not (install / f).exists():
            raise SystemExit(f"check-selftest: the install lacks {f}")
    say(f"built in {tree} with lib.mk in {time.monotonic() - t0:.1f}s; installed: "
        f"{(install / 'kselftest-list.txt').read_text().strip()}")
    return install


def guest_dir(work: Path, install: Path) -> Path:
    """kstall's guest with busybox and the installed selftests in its rootfs/."""
    if not BUSYBOX.is_file():
        raise SystemExit("check-selftest: /bin/busybox is missing: install busybox-static (ci/install-deps)")
    g = work / "guest"
    g.mkdir()
    shutil.copy(paths.guest_dir(arch.DEFAULT) / "init", g / "init")
    (g / "perf-refresh").write_text(WRAPPER)
    (g / "perf-refresh").chmod(0o755)
    root = g / "rootfs"
    (root / "bin").mkdir(parents=True)
    shutil.copy(BUSYBOX, root / "bin" / "busybox")
    for a in APPLETS:
        (root / "bin" / a).symlink_to("busybox")
    shutil.copytree(install, root / "kselftest", symlinks=True)
    return g


def verify(kernel: str, guest: Path, results: Path) -> tuple[int, dict, float]:
    env = dict(os.environ, KSTALL_GUEST_DIR=str(guest))
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, str(REPO / "harness" / "kstall"), "verify", kernel, "perf-refresh",
                        "--json", "--results", str(results)], capture_output=True, text=True, env=env, timeout=900)
    doc = json.loads(p.stdout) if p.stdout.strip().startswith("{") else {}
    if not doc:
        print(p.stderr[-3000:], file=sys.stderr)
    return p.returncode, doc, time.monotonic() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--keep", metavar="DIR", help="work in DIR and keep it (default: a temporary directory)")
    a = ap.parse_args()
    work = Path(a.keep) if a.keep else Path(tempfile.mkdtemp(prefix="kstall-check-selftest-"))
    work.mkdir(parents=True, exist_ok=True)
    failures: list[str] = []
    try:
        install = build_in_tree(work)
        guest = guest_dir(work, install)
        rc, doc, secs = verify("debian:6.17.8", guest, work / "results")
        agent = Path(doc.get("results_dir", "/nonexistent")) / "agent.log"
        log = agent.read_text(errors="replace") if agent.exists() else ""
        runner_ok = "| ok 1 selftests: kstall: perf-refresh" in log.splitlines()  # the agent forwards it so
        say(f"6.17.8: {doc.get('line')} ({secs:.1f}s); the runner said "
            f"{'ok 1 selftests: kstall: perf-refresh' if runner_ok else 'something else'}")
        if not runner_ok:
            failures.append("6.17.8: the kselftest runner did not report ok 1 selftests: kstall: perf-refresh")
        if doc.get("verdict") != "NOT_REPRODUCED" or rc != 0:
            failures.append(f"6.17.8: expected NOT_REPRODUCED, got {doc.get('line')} (exit {rc})")
        rc, doc, secs = verify("debian:6.16.12", guest, work / "results")
        say(f"6.16.12: {doc.get('line')} ({secs:.1f}s)")
        if doc.get("verdict") != "VULNERABLE" or rc != 1:
            failures.append(f"6.16.12: expected VULNERABLE, got {doc.get('line')} (exit {rc})")
    finally:
        if not a.keep:
            shutil.rmtree(work, ignore_errors=True)
    for f in failures:
        print(f"check-selftest: FAIL: {f}", file=sys.stderr)
    if not failures:
        say("PASS")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
