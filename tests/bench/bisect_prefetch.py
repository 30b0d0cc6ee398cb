#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0
"""Version-bisect speed: wall time per step with background prefetch against
the same bisection with --no-prefetch, every kernel downloaded afresh.

    tests/bench/bisect_prefetch.py [--runs N] [--old V --new V --repro R]

Before each bisection the candidates' kernels are removed from kstall's
cache (symbols stay: they are keyed by the kernel's hash, so no symbol
capture boot muddies the figure). Prints the median seconds per step of each
mode over N runs and their ratio.
"""
import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from harness.drivers.bisect import debian as bisect_debian  # noqa: E402
from images.kernels import debian  # noqa: E402


def drop_kernels(versions: list[str]) -> None:
    for k, cached in debian.available():
        if cached and k.flavour == "amd64" and k.upstream in versions:
            shutil.rmtree(debian.kernel_dir(k))


def bisect(args: list[str], res: str) -> dict:
    p = subprocess.run([sys.executable, str(REPO / "harness" / "kstall"), "bisect", "debian", *args,
                        "--results", res], capture_output=True, text=True, timeout=3600)
    if p.returncode != 0:
        sys.exit(f"bisect failed ({p.returncode}): {p.stderr[-800:]}")
    newest = max(Path(res).glob("*-bisect-debian-*"), key=lambda d: d.stat().st_mtime)
    return json.loads((newest / "bisect.json").read_text())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--old", default="6.12.107")
    ap.add_argument("--new", default="6.16.12")
    ap.add_argument("--repro", default="perf-refresh")
    a = ap.parse_args()
    cands = bisect_debian.candidates(a.old, a.new)
    per_step: dict[str, list[float]] = {"prefetch": [], "no-prefetch": []}
    steps: dict[str, list[int]] = {"prefetch": [], "no-prefetch": []}
    with tempfile.TemporaryDirectory() as res:
        for _ in range(a.runs):
            for mode in per_step:
                drop_kernels(cands)
                flags = ["--no-prefetch"] if mode == "no-prefetch" else []
                doc = bisect(["--old", a.old, "--new", a.new, a.repro, *flags], res)
                per_step[mode].append(doc["seconds_per_step"])
                steps[mode].append(doc["verifies"])
                print(f"{mode:12} {doc['verifies']} steps, {doc['wall_s']}s, {doc['seconds_per_step']}s per step: "
                      f"{doc['summary']}", flush=True)
    print(f"bisect debian --old {a.old} --new {a.new} {a.repro}; {len(cands)} candidates; runs: {a.runs}")
    for mode, xs in per_step.items():
        print(f"{mode:12} median {statistics.median(xs):.1f}s per step  ({', '.join(f'{x:.1f}' for x in xs)}; "
              f"steps {steps[mode]})")
    ratio = statistics.median(per_step['prefetch']) / statistics.median(per_step['no-prefetch'])
    print(f"ratio prefetch / no-prefetch: {ratio:.2f}")


if __name__ == "__main__":
    main()
