#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0
"""Matrix speed: the default matrix's wall time against the sum of the single
`kstall verify` times of its cells (kernels and symbols cached first).

    tests/bench/matrix_speed.py [--runs N] [--matrix ci/matrix.toml]

Prints medians over N repetitions and their ratio. A ratio under 1 comes from
booting guests ahead while others run (the agent's gate) and from one process
for all cells; host cores are never oversubscribed.
"""
import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
KSTALL = [str(REPO / "harness" / "kstall")]
sys.path.insert(0, str(REPO))

from harness.drivers import matrix as matrix_file  # noqa: E402
from harness.drivers import matrix  # noqa: E402


def timed(args: list[str]) -> float:
    t0 = time.monotonic()
    p = subprocess.run([*KSTALL, *args], capture_output=True, text=True, timeout=3600)
    if p.returncode not in (0, 1):
        sys.exit(f"kstall {' '.join(args)} failed ({p.returncode}): {p.stderr[-500:]}")
    return time.monotonic() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--matrix", default=str(REPO / "ci" / "matrix.toml"))
    a = ap.parse_args()
    cells = [c for c in matrix_file.load(Path(a.matrix)).cells if not c.skip]
    for k in sorted({c.kernel for c in cells}):
        subprocess.run([*KSTALL, "symbols", k], capture_output=True, check=True)
    sums, walls = [], []
    with tempfile.TemporaryDirectory() as res:
        for _ in range(a.runs):
            singles = []
            for c in cells:
                extra = (["--cpus", str(c.cpus)] if c.cpus else []) + (["--count", str(c.count)] if c.count else [])
                args = ["--", *c.args] if c.args else []
                singles.append(timed(["verify", c.kernel, c.reproducer, "--results", res, *extra, *args]))
            sums.append(sum(singles))
            walls.append(timed(["matrix", a.matrix, "--results", res]))
    ms, mw = statistics.median(sums), statistics.median(walls)
    print(f"cells: {len(cells)}; host cores: {matrix.default_jobs()}; runs: {a.runs}")
    print(f"sum of single verify times: median {ms:.1f}s  ({', '.join(f'{x:.1f}' for x in sums)})")
    print(f"matrix wall time:           median {mw:.1f}s  ({', '.join(f'{x:.1f}' for x in walls)})")
    print(f"ratio matrix / sum of singles: {mw / ms:.2f}")


if __name__ == "__main__":
    main()
