#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0
"""Speed figures for the hang handed over (medians of several runs; kernels,
symbols and debug info cached first; a 1 GiB guest).

    tests/bench/handover_speed.py [--runs N]

- what --vmcore adds to a hang's verdict: restored debian:6.1.170 bpf-timer
  (and debian:6.16.12 perf-refresh) with and without it, whole `kstall
  verify` wall clock (goal: <= 5 s more), and the core's size on disk
  against guest RAM (goal <= 25%);
- kstall analyze on a recorded run, without a vmcore and with one (goal <= 2 s);
- the debug-info fetch: a cached one, and the MB and seconds of the first
  (from `kstall symbols --debuginfo`'s own report, when it had to fetch).
"""
import argparse
import json
import statistics
import tempfile
from pathlib import Path

from verify_speed import cache_symbols, med, timed


def verdicts(spec: str, repro: str, runs: int, extra: list[str], results: str) -> list[tuple[float, dict]]:
    out = []
    for _ in range(runs):
        wall, p = timed(["verify", spec, repro, "--json", "--results", results, *extra])
        out.append((wall, json.loads(p.stdout)))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    a = ap.parse_args()
    cache_symbols("debian:6.1.170", "debian:6.16.12")
    wall, p = timed(["symbols", "debian:6.1.170", "--debuginfo"])
    print(f"debug info, debian:6.1.170: {p.stdout.strip().split(' (', 1)[-1].rstrip(')')}, {wall:.1f}s")

    with tempfile.TemporaryDirectory() as d:
        for spec, repro in (("debian:6.1.170", "bpf-timer"), ("debian:6.16.12", "perf-refresh")):
            verdicts(spec, repro, 1, [], d)  # the snapshot the rest restore
            plain = verdicts(spec, repro, a.runs, [], d)
            cored = verdicts(spec, repro, a.runs, ["--vmcore"], d)
            assert all(doc["verdict"] == "VULNERABLE" for _, doc in plain + cored), [doc["line"] for _, doc in cored]
            cores = [doc["vm"]["vmcore"] for _, doc in cored]
            added = statistics.median([w for w, _ in cored]) - statistics.median([w for w, _ in plain])
            print(f"{spec} {repro}: verdict {med([w for w, _ in plain])} without a vmcore, "
                  f"{med([w for w, _ in cored])} with one: +{added:.2f}s   goal <= +5s")
            print(f"  the core itself: {med([c['seconds'] for c in cores])} (QEMU's dump and the copy "
                  f"{med([c['dump_s'] for c in cores])}, headers {med([c['complete_s'] for c in cores])})")
            ram = cored[0][1]["vm"]["memory_mb"] << 20
            share = [c["disk_bytes"] / ram for c in cores]
            print(f"  on disk: {statistics.median(share):.1%} of the guest's {ram >> 20} MiB "
                  f"(max {max(share):.1%}; apparent size {cores[0]['bytes'] / 1e6:.0f} MB)   goal <= 25%")
        runs = sorted(Path(d).iterdir())
        with_core = next(r for r in runs if (r / "vmcore").is_file())
        without = next(r for r in runs if (r / "sample-0.json").is_file() and not (r / "vmcore").is_file())
        for what, run in (("without a vmcore", without), ("with a vmcore", with_core)):
            walls = [timed(["analyze", str(run)])[0] for _ in range(a.runs)]
            print(f"kstall analyze, a recorded run {what}: {med(walls)}   goal <= 2s")


if __name__ == "__main__":
    main()
