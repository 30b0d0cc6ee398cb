#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0
"""`make check-cold`: the whole suite on an empty cache, as a new machine or
a CI runner with no cache meets it: every kernel, module tree, symbol
capture, layout and snapshot is made afresh, and each test must give the
same answers it gives on a warm cache (a first run's wait-for graph waited
for nothing and said "not captured"). Long (about twice make test); not
part of make test. The cache is a new directory (KSTALL_COLD_CACHE, or one
under /var/tmp), removed after a pass and kept after a failure.

  tests/check_cold.py [PYTEST_ARGS...]
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def main(args: list[str]) -> int:
    cache = Path(os.environ.get("KSTALL_COLD_CACHE") or tempfile.mkdtemp(prefix="kstall-cold-", dir="/var/tmp"))
    if cache.exists() and any(cache.iterdir()):
        print(f"check-cold: {cache} is not empty: give an empty directory (KSTALL_COLD_CACHE)", file=sys.stderr)
        return 2
    cache.mkdir(parents=True, exist_ok=True)
    print(f"check-cold: the suite on an empty cache, {cache}", flush=True)
    t0 = time.monotonic()
    env = {**os.environ, "KSTALL_CACHE": str(cache)}
    # make's own install went to the usual cache: without this one in the
    # empty cache, the CI templates' tests were skipped (4, 2026-11-29)
    rc = subprocess.run([str(REPO / "ci" / "install-npm-tools")], env=env).returncode
    if rc == 0:
        rc = subprocess.run([sys.executable, str(REPO / "tests" / "run_suite.py"), *args], env=env).returncode
    took = time.monotonic() - t0
    print(f"check-cold: {'passed' if rc == 0 else f'FAILED (exit {rc})'} in {took / 60:.0f} min"
          + ("" if rc == 0 else f"; the cache is kept for a look: {cache}"), flush=True)
    if rc == 0:
        shutil.rmtree(cache, ignore_errors=True)
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
