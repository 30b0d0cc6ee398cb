#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0
"""Your own reproducer, in figures: the C-file build (cold, cached), a user C
file's VULNERABLE on 6.16.12 against the built-in perf-refresh's (both
restored from a snapshot), and what the host-command form (run:CMD, the
host's root over virtiofs) adds to a cold boot over the initramfs-only guest.

    tests/bench/user_reproducers.py [--runs N]

Medians over N runs; ratios and differences against the built-in baseline.
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
sys.path.insert(0, str(REPO))

from images.guest import programs  # noqa: E402

KSTALL = [sys.executable, str(REPO / "harness" / "kstall")]
OTHER = REPO / "tests" / "programs" / "other_refresh.c"


def verify(res: str, *args: str) -> tuple[float, dict]:
    t = time.monotonic()
    p = subprocess.run([*KSTALL, "verify", *args, "--json", "--results", res], capture_output=True, text=True,
                       timeout=600)
    took = time.monotonic() - t
    doc = json.loads(p.stdout) if p.stdout.startswith("{") else {}
    if not doc:
        sys.exit(f"verify {' '.join(args)} failed ({p.returncode}): {p.stderr[-600:]}")
    return took, doc


def build_figures(runs: int, tmp: Path) -> None:
    cold, cached = [], []
    for i in range(runs):
        src = tmp / f"other_refresh_{i}.c"  # a new source each time: nothing cached
        src.write_text(OTHER.read_text() + f"\n/* bench run {i} {time.time()} */\n")
        t = time.monotonic()
        programs.build_c(src)
        cold.append(time.monotonic() - t)
        t = time.monotonic()
        programs.build_c(src)
        cached.append(time.monotonic() - t)
    print(f"C-file build: cold median {statistics.median(cold):.2f}s ({', '.join(f'{x:.2f}' for x in cold)}), "
          f"cached median {statistics.median(cached) * 1000:.1f} ms")


def restored_figures(runs: int, res: str, kernel: str) -> None:
    times: dict[str, list[float]] = {"perf-refresh": [], str(OTHER): []}
    for spec in times:  # warm-up: the snapshot, the build
        verify(res, kernel, spec)
    for _ in range(runs):
        for spec in times:
            took, doc = verify(res, kernel, spec)
            if doc["verdict"] != "VULNERABLE" or not doc["vm"]["snapshot"]["restored"]:
                sys.exit(f"{spec}: {doc['verdict']}, restored={doc['vm']['snapshot']['restored']}")
            times[spec].append(took)
    base, mine = (statistics.median(v) for v in times.values())
    print(f"VULNERABLE on {kernel}, restored: built-in perf-refresh median {base:.2f}s, "
          f"user C file median {mine:.2f}s, ratio {mine / base:.2f}")


def host_command_figures(runs: int, res: str, kernel: str, tmp: Path) -> None:
    true_c = tmp / "exit0.c"
    true_c.write_text("int main(void) { return 0; }\n")
    boots: dict[str, list[float]] = {"initramfs": [], "host command": []}
    for _ in range(runs):
        for name, spec in (("initramfs", str(true_c)), ("host command", "run:true")):
            _, doc = verify(res, kernel, spec, "--no-snapshot")
            if doc["verdict"] != "NOT_REPRODUCED":
                sys.exit(f"{spec}: {doc['verdict']}: {doc['reason']}")
            boots[name].append(doc["timings"]["boot_s"])
    base, host = (statistics.median(v) for v in boots.values())
    print(f"cold boot to the agent on {kernel}: initramfs-only median {base:.2f}s, host command (virtiofsd + "
          f"vhost-user-fs) median {host:.2f}s: {host - base:+.2f}s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--kernel", default="debian:6.16.12")
    ap.add_argument("--host-kernel", default="debian:7.3.4")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp, tempfile.TemporaryDirectory() as res:
        build_figures(a.runs, Path(tmp))
        restored_figures(a.runs, res, a.kernel)
        host_command_figures(a.runs, res, a.host_kernel, Path(tmp))


if __name__ == "__main__":
    main()
