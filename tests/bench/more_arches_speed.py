#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0
"""Speed figures for ppc64el, s390x and riscv64 guests (TCG on an x86-64
host; medians of several runs; kernels cached first), beside amd64's:

    tests/bench/more_arches_speed.py [--runs N]

- a cold verdict (no snapshot) per architecture: the wall clock of the whole
  `kstall verify` and the boot to the agent's hello;
- a restored verdict where the row restores (arches.toml `snapshot`): s390x.
  pseries and riscv's virt machine boot cold every time (QEMU 7.2 restores
  them without timer interrupts), so theirs is the cold figure.
"""
import argparse
import json
import sys
import tempfile

from verify_speed import REPO, med, timed

sys.path.insert(0, str(REPO))
from harness.base import arch  # noqa: E402

CELLS = [  # (architecture, kernel, reproducer, verdict)
    ("amd64", "debian:6.1.170", "bpf-timer", "VULNERABLE"),
    ("ppc64el", "debian:6.1.170", "bpf-timer", "VULNERABLE"),
    ("s390x", "debian:6.1.170", "perf-sigtrap", "VULNERABLE"),
    ("riscv64", "debian:6.12.117", "perf-sigtrap", "NOT_REPRODUCED"),
]


def runs(a: str, spec: str, repro: str, want: str, n: int, extra: list[str]) -> list[tuple[float, dict]]:
    out = []
    with tempfile.TemporaryDirectory() as d:
        for _ in range(n):
            wall, p = timed(["verify", spec, repro, "--arch", a, "--json", "--results", d, *extra])
            doc = json.loads(p.stdout)
            assert doc["verdict"] == want, doc.get("line")
            out.append((wall, doc))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    n = ap.parse_args().runs
    for a, spec, repro, want in CELLS:
        runs(a, spec, repro, want, 1, [])  # the kernel, its symbols and (where the row restores) its snapshot
        cold = runs(a, spec, repro, want, n, ["--no-snapshot"])
        print(f"{a:8} {spec} {repro}, cold {want}: {med([w for w, _ in cold])}; "
              f"boot {med([d['timings']['boot_s'] for _, d in cold])}")
        if arch.named(a).snapshot:
            warm = runs(a, spec, repro, want, n, [])
            print(f"{a:8} {spec} {repro}, restored {want}: {med([w for w, _ in warm])}")
        else:
            print(f"{a:8} no restored figure: its machine boots cold (arches.toml `snapshot`)")


if __name__ == "__main__":
    main()
