#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0
"""Restored runs give the verdicts cold boots give: every kernel x reproducer
of the default matrix, N restored runs each, against the expectation the
matrix states (the one its cold boots were measured with).

    tests/bench/snapshot_verdicts.py [--runs N] [--reproducer NAME ...] [--kernel SPEC ...]

Prints, per cell, the verdicts and the median wall time; exits 1 when any run
disagrees.
"""
import argparse
import collections
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
KSTALL = [str(REPO / "harness" / "kstall")]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests" / "bench"))

from harness.analysis import expect  # noqa: E402
from harness.drivers import matrix as matrix_file  # noqa: E402
from verify_speed import med  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--reproducer", action="append", help="only these (default: perf-refresh, bpf-ringbuf)")
    ap.add_argument("--kernel", action="append", help="only these kernels of the matrix (default: all)")
    a = ap.parse_args()
    wanted = a.reproducer or ["perf-refresh", "bpf-ringbuf"]
    cells = [c for c in matrix_file.load(REPO / "ci" / "matrix.toml").cells
             if c.reproducer in wanted and not c.skip and (not a.kernel or c.kernel in a.kernel)]
    bad = 0
    with tempfile.TemporaryDirectory() as res:
        for c in cells:
            verdicts, walls, restored = collections.Counter(), [], 0
            for i in range(a.runs + 1):  # the first saves the snapshot if there is none
                t0 = time.monotonic()
                p = subprocess.run([*KSTALL, "verify", c.kernel, c.reproducer, "--json", "--results", res],
                                   capture_output=True, text=True, timeout=900)
                doc = json.loads(p.stdout)
                if i == 0:
                    continue
                walls.append(time.monotonic() - t0)
                verdicts[doc["verdict"]] += 1
                restored += bool((doc["vm"].get("snapshot") or {}).get("restored"))
                if expect.judge(c.expect, doc["verdict"], c.xfail, c.skip) != "pass":
                    bad += 1
                    print(f"  disagrees: {doc.get('line', doc['verdict'])}")
            print(f"{c.kernel:<16} {c.reproducer:<13} expect {c.expect:<15} restored {restored}/{a.runs}: "
                  f"{dict(verdicts)}  wall median {med(walls)}")
    print(f"{'all agree' if not bad else f'{bad} run(s) disagree'}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
