#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0
"""Snapshots against cold boots, in the same run (medians; kernels, symbols
and snapshots cached first).

    tests/bench/snapshot_speed.py [--runs N] [--matrix-runs M]

- a restored run of debian:6.16.12 perf-refresh to VULNERABLE, wall clock of
  the whole `kstall verify` command, beside the same with --no-snapshot;
- restore (QEMU start to a running guest at its gate) beside a cold boot to
  the agent's hello;
- bpf-ringbuf to NOT_REPRODUCED on debian:7.3.4, restored;
- the default matrix (`make run`'s), with snapshots and with --no-snapshot.
"""
import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
KSTALL = [str(REPO / "harness" / "kstall")]
sys.path.insert(0, str(REPO / "tests" / "bench"))

from verify_speed import cache_symbols, med  # noqa: E402


def verify(spec: str, repro: str, res: str, extra: list[str]) -> tuple[float, dict]:
    t0 = time.monotonic()
    p = subprocess.run([*KSTALL, "verify", spec, repro, "--json", "--results", res, *extra],
                       capture_output=True, text=True, timeout=900)
    return time.monotonic() - t0, json.loads(p.stdout)


def matrix_wall(res: str, extra: list[str]) -> tuple[float, dict]:
    t0 = time.monotonic()
    p = subprocess.run([*KSTALL, "matrix", str(REPO / "ci" / "matrix.toml"), "--json", "--results", res, *extra],
                       capture_output=True, text=True, timeout=3600)
    return time.monotonic() - t0, json.loads(p.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--matrix-runs", type=int, default=3)
    a = ap.parse_args()
    cache_symbols("debian:6.16.12", "debian:7.3.4")
    with tempfile.TemporaryDirectory() as res:
        verify("debian:6.16.12", "perf-refresh", res, [])  # saves the snapshot if there is none
        verify("debian:7.3.4", "bpf-ringbuf", res, [])
        warm, cold = [], []
        for _ in range(a.runs):  # interleaved: both see the same host
            warm.append(verify("debian:6.16.12", "perf-refresh", res, []))
            cold.append(verify("debian:6.16.12", "perf-refresh", res, ["--no-snapshot"]))
        for name, runs in (("restored", warm), ("--no-snapshot", cold)):
            bad = [d["line"] for _, d in runs if d["verdict"] != "VULNERABLE"]
            print(f"6.16.12 perf-refresh VULNERABLE, {name:<13} wall {med([w for w, _ in runs])}"
                  f"{'  NOT VULNERABLE: ' + '; '.join(bad) if bad else ''}")
        print(f"  restore to a running guest at its gate:  {med([d['timings']['boot_s'] for _, d in warm])}")
        print(f"  cold boot to the agent's hello:          {med([d['timings']['boot_s'] for _, d in cold])}")
        print(f"  GDB sampling (3 samples):                {med([d['timings']['debug_s'] for _, d in warm])}")
        print(f"ratio restored / --no-snapshot: "
              f"{statistics.median(w for w, _ in warm) / statistics.median(w for w, _ in cold):.2f}")

        bpf = [verify("debian:7.3.4", "bpf-ringbuf", res, []) for _ in range(a.runs)]
        print(f"7.3.4 bpf-ringbuf, restored: {[d['verdict'] for _, d in bpf]}, wall {med([w for w, _ in bpf])}, "
              f"{[d['evidence']['p_miss']['text'] for _, d in bpf][0]}")

        for name, extra in (("snapshots", []), ("--no-snapshot", ["--no-snapshot"])):
            runs = [matrix_wall(res, extra) for _ in range(a.matrix_runs)]
            agree = [sum(1 for c in d["cells"] if c.get("status") == "pass") for _, d in runs]
            print(f"default matrix ({len(runs[0][1]['cells'])} cells), {name:<13} wall {med([w for w, _ in runs], 1)}"
                  f"; cells agreeing with expect: {agree}")


if __name__ == "__main__":
    main()
