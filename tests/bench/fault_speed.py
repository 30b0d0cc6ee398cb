#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0
"""Speed figures for the fault paths (medians of several runs; kernels cached first).

    tests/bench/fault_speed.py [--runs N]

- SIGKILL of a running `kstall verify` to its last child (QEMU) gone,
  polled every millisecond; goal <= 1 s;
- classification of the same real freeze (perf-refresh on debian:6.16.12)
  by GDB, and by QMP when GDB is killed as it starts: the sampling and
  classification time kstall records (timings.debug_s), and the ratio.
"""
from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests" / "e2e"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness.base import procs  # noqa: E402
from helpers import KSTALL, gdb_pids, verify_with_fault, wait_for  # noqa: E402
from verify_speed import cache_symbols, med  # noqa: E402


def children(pid: int) -> list[int]:
    out = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit() and procs.stat_fields(p / "stat")[1:2] == [str(pid)]:
            out.append(int(p.name))
    return out


def alive(pid: int) -> bool:
    f = procs.stat_fields(f"/proc/{pid}/stat")
    return bool(f) and f[0] != "Z"


def sigkill_to_gone(results: str) -> float:
    proc = subprocess.Popen([*KSTALL, "verify", "debian:6.17.8", "perf-refresh", "--count", "100000000",
                             "--results", results], stderr=subprocess.PIPE, text=True)
    try:
        for line in proc.stderr:
            if "guest up" in line:
                break
        kids = wait_for(lambda: children(proc.pid), 30)
        assert kids, "no QEMU under kstall"
        t0 = time.monotonic()
        proc.kill()
        while any(alive(k) for k in kids):
            time.sleep(0.001)
        return time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def kill_gdb(proc: subprocess.Popen) -> None:
    for pid in wait_for(gdb_pids, 120, step=0.005) or []:
        os.kill(pid, signal.SIGKILL)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    a = ap.parse_args()
    cache_symbols("debian:6.16.12", "debian:6.17.8")
    with tempfile.TemporaryDirectory() as d:
        gone = [sigkill_to_gone(d) for _ in range(a.runs)]
        print(f"SIGKILL of kstall to its last child gone:      {med(gone, 3)}   goal <= 1s")
        gdb, qmp = [], []
        for _ in range(a.runs):
            _, doc, err = verify_with_fault(Path(d), ["debian:6.16.12", "perf-refresh"], lambda p: None)
            assert doc.get("verdict") == "VULNERABLE" and doc["evidence"]["debug_method"] == "gdb", err[-1000:]
            gdb.append(doc["timings"]["debug_s"])
            _, doc, err = verify_with_fault(Path(d), ["debian:6.16.12", "perf-refresh"], kill_gdb)
            assert doc.get("verdict") == "VULNERABLE" and doc["evidence"]["debug_method"] == "qmp", err[-1000:]
            qmp.append(doc["timings"]["debug_s"])
    print(f"classification of a 6.16.12 freeze, GDB:       {med(gdb, 3)}")
    print(f"classification of a 6.16.12 freeze, QMP:       {med(qmp, 3)}   "
          f"(GDB killed at start; QMP/GDB = {statistics.median(qmp) / statistics.median(gdb):.2f})")


if __name__ == "__main__":
    main()
