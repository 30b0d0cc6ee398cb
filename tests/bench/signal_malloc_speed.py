#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0
"""Speed figures for signal-malloc (medians of several runs; kernel cached).

    tests/bench/signal_malloc_speed.py [--runs N]

- wall clock of `kstall verify debian:7.3.4 signal-malloc` to VULNERABLE
  (goal 10 s), with its parts from run.json: boot, detection, core, GDB dump;
- the same with `-- --safe` to NOT_REPRODUCED at P(miss) <= 1e-6 (goal 20 s);
- `kstall threads PID` on a live stuck signal-malloc with 8 workers on this
  machine (goal 3 s).
"""
import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from verify_speed import KSTALL, med, timed  # noqa: E402


def verify(runs: int, repro_args: list[str]) -> tuple[list[float], list[dict]]:
    walls, docs = [], []
    with tempfile.TemporaryDirectory() as d:
        for _ in range(runs):
            wall, p = timed(["verify", "debian:7.3.4", "signal-malloc", "--json", "--results", d, "--", *repro_args])
            walls.append(wall)
            docs.append(json.loads(p.stdout))
    return walls, docs


def stuck_process(threads: int) -> subprocess.Popen:
    proc = subprocess.Popen([str(REPO / "build" / "guest" / "x86_64" / "signal-malloc"), "--threads", str(threads),
                             "--duration", "300", "--progress-ms", "50"], stdout=subprocess.PIPE, text=True)
    counts: list[int] = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        m = re.match(r"# progress count=(\d+)", proc.stdout.readline())
        if m:
            counts.append(int(m.group(1)))
        if len(counts) > 10 and len(set(counts[-10:])) == 1:
            return proc
    proc.kill()
    sys.exit("signal-malloc did not get stuck")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    a = ap.parse_args()
    subprocess.run([*KSTALL, "verify", "debian:7.3.4", "signal-malloc", "--", "--safe"], capture_output=True)  # cache

    walls, docs = verify(a.runs, [])
    print(f"signal-malloc VULNERABLE on debian:7.3.4: {med(walls)} wall (goal <= 10 s); "
          f"verdicts {sorted({d['verdict'] for d in docs})}")
    for part in ("boot_s", "detection_latency_s", "core_s", "thread_dump_s"):
        xs = [d["timings"].get(part) for d in docs if d["timings"].get(part) is not None]
        if xs:
            print(f"  {part}: median {statistics.median(xs):.2f}s")

    walls, docs = verify(a.runs, ["--safe"])
    pm = max(d["evidence"]["p_miss"]["p_miss_log10"] for d in docs if d["evidence"]["p_miss"])
    print(f"signal-malloc --safe NOT_REPRODUCED: {med(walls)} wall (goal <= 20 s); verdicts "
          f"{sorted({d['verdict'] for d in docs})}; counts {sorted(d['evidence']['count'] for d in docs)}; "
          f"worst P(miss) 10^{pm:.0f}")

    walls = []
    for _ in range(a.runs):
        proc = stuck_process(8)
        try:
            wall, p = timed(["threads", str(proc.pid), "--json"])
            assert p.returncode == 1, p.stderr
            walls.append(wall)
        finally:
            proc.kill()
            proc.wait()
    print(f"kstall threads on a live stuck process with 8 workers (9 threads): {med(walls)} (goal <= 3 s)")


if __name__ == "__main__":
    main()
