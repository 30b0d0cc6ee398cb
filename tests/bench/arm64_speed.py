#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0
"""Speed figures for arm64 guests (TCG on an x86-64 host; medians of several
runs; kernels and symbols cached first).

    tests/bench/arm64_speed.py [--runs N]

- cold boot to the agent's hello: debian:6.17.8 arm64, no snapshot (goal <= 10 s);
- a restored VULNERABLE verdict, debian:6.16.12 perf-refresh, arm64 beside
  amd64, wall clock of the whole `kstall verify` (goal: arm64 <= 2x amd64);
- the arm64 rows of ci/matrix.toml from a warm cache, per cell (goal <= 2.5 s).
"""
import argparse
import json
import statistics
import tempfile

from verify_speed import REPO, cache_symbols, med, timed, verify_runs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    a = ap.parse_args()
    cache_symbols("debian:6.16.12", "debian:6.16.12-arm64", "debian:6.17.8-arm64")

    cold = verify_runs("debian:6.17.8-arm64", a.runs, ["--no-snapshot"])
    print(f"cold arm64 boot to the agent's hello, debian:6.17.8:  {med([d['timings']['boot_s'] for _, d in cold])}"
          "   goal <= 10s")

    walls = {}
    for spec in ("debian:6.16.12", "debian:6.16.12-arm64"):
        runs = verify_runs(spec, a.runs + 1, [])[1:]  # the first saves the snapshot the rest restore
        assert all(d["verdict"] == "VULNERABLE" for _, d in runs), [d["line"] for _, d in runs]
        walls[spec] = [w for w, _ in runs]
        print(f"restored VULNERABLE, {spec + ':':<24}       {med(walls[spec])}")
    ratio = statistics.median(walls["debian:6.16.12-arm64"]) / statistics.median(walls["debian:6.16.12"])
    print(f"  arm64 / amd64:                                    {ratio:.2f}x   goal <= 2x")

    per_cell = []
    with tempfile.TemporaryDirectory() as d:
        for _ in range(max(1, a.runs // 2)):
            wall, p = timed(["matrix", str(REPO / "ci" / "matrix.toml"), "--only", "*-arm64", "--json",
                             "--results", d])
            doc = json.loads(p.stdout)
            ran = [c for c in doc["cells"] if c.get("verdict")]
            per_cell.append(wall / len(ran))
    print(f"make run's arm64 rows, warm, per cell ({len(ran)} cells):  {med(per_cell)}   goal <= 2.5s")


if __name__ == "__main__":
    main()
