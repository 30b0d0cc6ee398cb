#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0
"""Speed figures for verify (medians of several runs; kernels cached first).

    tests/bench/verify_speed.py [--runs N]

- time to a VULNERABLE verdict on debian:6.16.12 (kernel and symbols cached),
  wall clock of the whole `kstall verify` command;
- freeze detection latency: from the last sign of life (heartbeat or progress)
  to detection, as run.json records it;
- symbol capture for a kernel kstall has not seen: from the agent's hello to
  the last byte of kallsyms on the host (kstall symbols --refresh);
  0 s when cached, because a cached kernel is not asked for symbols at all;
- the walk to a restored VULNERABLE (debian:6.16.12, 2 vCPUs, its snapshot
  saved first), split: restore, the gate's GO to the reproducer's start
  (the guest's side: TCG translates a restored guest's code anew), until the
  hang, the heartbeat silence that declares the freeze, the GDB reading, and
  the rest (process start, the prediction, writing the record);
- for reference, time to NOT_REPRODUCED on debian:6.17.8;
- `kstall --version`, the command's own start and nothing else.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
KSTALL = [str(REPO / "harness" / "kstall")]
# kstall as a user runs it: its byte code cached (an environment that forbids
# writing it, as some CI images do, compiles every changed module anew: 50 ms)
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def timed(args: list[str]) -> tuple[float, subprocess.CompletedProcess]:
    t0 = time.monotonic()
    p = subprocess.run([*KSTALL, *args], capture_output=True, text=True, timeout=900, env=ENV)
    return time.monotonic() - t0, p


def verify_runs(spec: str, runs: int, extra: list[str]) -> list[tuple[float, dict]]:
    out = []
    with tempfile.TemporaryDirectory() as d:
        for _ in range(runs):
            wall, p = timed(["verify", spec, "perf-refresh", "--json", "--results", d, *extra])
            out.append((wall, json.loads(p.stdout)))
    return out


def med(xs: list[float], digits: int = 2) -> str:
    return f"{statistics.median(xs):.{digits}f}s (min {min(xs):.{digits}f}, max {max(xs):.{digits}f}, n={len(xs)})"


def cache_symbols(*specs: str) -> None:
    """Kernels and their symbols in the cache first: the figures are of warm runs."""
    for spec in specs:
        subprocess.run([*KSTALL, "symbols", spec], capture_output=True, check=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--start-only", action="store_true", help="--version and the restored VULNERABLE only")
    a = ap.parse_args()
    timed(["--version"])  # its byte code written first
    start = [timed(["--version"])[0] for _ in range(a.runs)]
    print(f"kstall --version:                                   {med(start)}")
    cache_symbols("debian:6.16.12", "debian:6.17.8")

    walk = verify_runs("debian:6.16.12", a.runs + 1, [])[1:]  # the first saves the snapshot the rest restore
    assert all(d["verdict"] == "VULNERABLE" and (d["vm"]["snapshot"] or {}).get("restored") for _, d in walk), \
        [d["line"] for _, d in walk]
    t = [d["timings"] for _, d in walk]
    print(f"restored VULNERABLE, debian:6.16.12, 2 vCPUs:        {med([w for w, _ in walk])}   goal <= 1.0s")
    for name, xs in (("restore (to the agent's hello)", [x["boot_s"] for x in t]),
                     ("the gate's GO to the reproducer's start", [x["to_outcome_s"] - x["boot_s"] - x["gate_wait_s"]
                                                                  - x["repro_s"] for x in t]),
                     ("reproducer start to the hang", [x["hang_after_s"] for x in t]),
                     ("heartbeat silence to the freeze", [x["detection_latency_s"] for x in t]),
                     ("GDB reading (3 samples)", [x["debug_s"] for x in t]),
                     ("the rest: process start, prediction, record", [w - x["total_s"] for (w, _), x in zip(walk, t)])):
        print(f"  {name + ':':<48}{med(xs)}")
    if a.start_only:
        return

    vuln = verify_runs("debian:6.16.12", a.runs, ["--cpus", "4"])
    assert all(d["verdict"] == "VULNERABLE" for _, d in vuln), [d["line"] for _, d in vuln]
    lat = [d["timings"]["detection_latency_s"] for _, d in vuln]
    print(f"time to VULNERABLE, debian:6.16.12, 4 vCPUs, cached:  {med([w for w, _ in vuln])}   goal <= 10s")
    print(f"  of which boot to agent:                           {med([d['timings']['boot_s'] for _, d in vuln])}")
    print(f"  of which gdb sampling ({vuln[0][1]['evidence']['debug_method']}, 3 samples):          "
          f"{med([d['timings']['debug_s'] for _, d in vuln])}")
    print(f"freeze detection latency after last sign of life:   {med(lat)}   goal <= 1s")

    caps = []
    for _ in range(max(3, a.runs // 2)):
        _, p = timed(["symbols", "debian:6.17.8", "--refresh"])
        if "capture " not in p.stdout:  # a failed capture is shown, not counted
            print(f"symbol capture failed (exit {p.returncode}): {p.stderr.strip()[-500:]}")
            continue
        caps.append(float(p.stdout.split("capture ")[1].split("s")[0]))
    print(f"symbol capture, new kernel (hello -> kallsyms on host): {med(caps)}   goal <= 3s (UART: 47s)")
    print("symbol capture, cached kernel:                      0.00s (the guest is not asked)")

    nr = verify_runs("debian:6.17.8", max(3, a.runs // 2), [])
    print(f"time to NOT_REPRODUCED, debian:6.17.8, 2 vCPUs:     {med([w for w, _ in nr])} "
          f"({statistics.median(d['evidence']['count'] for _, d in nr):.0f} REFRESH cycles)")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
