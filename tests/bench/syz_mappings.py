#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0
"""How kstall builds a syzkaller reproducer, measured rather than argued.

1. Its fixed mappings collide with nothing of its own. Every syzkaller
   reproducer maps 0x20000000-0x21000000 MAP_FIXED (newer ones also
   0x1ffff000 and 0x21000000: repro/syzkaller/environment.toml
   fixed_mappings). A probe built with the environment's flags looks, before
   it maps them, at its own /proc/self/maps (binary, heap, stack, vdso) and
   at its thread's TLS block (where glibc keeps the stack and pointer
   guards), and says whether any of it lies in those ranges. It runs --runs
   times with the host's address-space randomisation; the same probe built
   -static (non-PIE), as kstall built every C file before, is the baseline.

2. How much slower a syscall-heavy program runs under TCG than on this
   host (--tcg KERNEL): the probe's loop of getppid() and fork()+wait(),
   natively and in a guest (kstall verify), as the ground for the time box's
   TCG scale. A benchmark: never part of `make test`.

  tests/bench/syz_mappings.py [--runs 5000] [--tcg debian:6.1.170]
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from harness.base import guest_env  # noqa: E402

PROBE = r"""
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static __thread int tls_mark;
static const uint64_t ranges[][2] = { RANGES };

static int hit(uint64_t lo, uint64_t hi)
{
  for (size_t i = 0; i < sizeof(ranges) / sizeof(ranges[0]); i++)
    if (lo < ranges[i][1] && hi > ranges[i][0])
      return 1;
  return 0;
}

static double now(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
  if (argc > 1 && !strcmp(argv[1], "--speed")) {
    double t = now();
    for (int i = 0; i < 200000; i++)
      getppid();
    double sys = now() - t;
    t = now();
    for (int i = 0; i < 300; i++) {
      pid_t p = fork();
      if (p == 0)
        _exit(0);
      waitpid(p, 0, 0);
    }
    printf("speed getppid_ns=%.0f fork_us=%.0f\n", sys / 200000 * 1e9, (now() - t) / 300 * 1e6);
    return 0;
  }
  char line[512];
  FILE *f = fopen("/proc/self/maps", "r");
  int bad = 0;
  uint64_t tls = (uint64_t)(uintptr_t)&tls_mark;
  while (f && fgets(line, sizeof(line), f)) {
    unsigned long long lo, hi;
    if (sscanf(line, "%llx-%llx", &lo, &hi) == 2 && hit(lo, hi)) {
      printf("collides: %s", line);
      bad = 1;
    }
  }
  if (hit(tls, tls + 8)) {
    printf("collides: TLS at %#llx\n", (unsigned long long)tls);
    bad = 1;
  }
  return bad;
}
"""


def build(dest: Path, flags: list[str], ranges: tuple[tuple[int, int], ...]) -> Path:
    src = dest / "probe.c"
    src.write_text(PROBE.replace("RANGES", ", ".join(f"{{ {a:#x}, {b:#x} }}" for a, b in ranges)))
    out = dest / ("probe-" + "-".join(f.strip("-") for f in flags if f.startswith("-static")))
    subprocess.run(["gcc", *flags, "-o", str(out), str(src)], check=True)
    return out


def collisions(program: Path, runs: int) -> tuple[int, list[str]]:
    bad, said = 0, []
    for _ in range(runs):
        p = subprocess.run([str(program)], capture_output=True, text=True)
        if p.returncode:
            bad += 1
            said.append(p.stdout.strip().splitlines()[0])
    return bad, said


def speed_here(program: Path) -> dict:
    out = subprocess.run([str(program), "--speed"], capture_output=True, text=True, check=True).stdout
    return {k: float(v) for k, v in re.findall(r"(\w+)=([\d.]+)", out)}


def speed_in_guest(kernel: str, tmp: Path) -> dict:
    """The same loops in a guest: a plain C file kstall builds and runs once."""
    src = tmp / "speed.c"
    src.write_text(PROBE.replace("RANGES", "{ 0, 0 }").replace('argc > 1 && !strcmp(argv[1], "--speed")', "1"))
    p = subprocess.run([str(REPO / "harness" / "kstall"), "verify", kernel, str(src), "--json", "--results",
                        str(tmp / "results")], capture_output=True, text=True)
    doc = json.loads(p.stdout)
    log = (Path(doc["results_dir"]) / "agent.log").read_text()
    return {k: float(v) for k, v in re.findall(r"(\w+)=([\d.]+)", next(l for l in log.splitlines()
                                                                        if l.startswith("speed ")))}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5000)
    ap.add_argument("--tcg", metavar="KERNEL", help="also measure the probe's loops in a TCG guest of KERNEL")
    args = ap.parse_args()
    env = guest_env.get("syzkaller")
    ranges = env.fixed_mappings
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        kstall = build(tmp, list(env.cflags), ranges)
        static = build(tmp, ["-O1", "-static"], ranges)
        for name, prog in (("kstall's build (" + " ".join(env.cflags) + ")", kstall), ("-static (non-PIE)", static)):
            t = time.monotonic()
            bad, said = collisions(prog, args.runs)
            print(f"{name}: {bad} of {args.runs} runs had something of their own in "
                  f"{', '.join(f'{a:#x}-{b:#x}' for a, b in ranges)} ({time.monotonic() - t:.0f} s)")
            for s in sorted(set(said))[:3]:
                print(f"  e.g. {s}")
        if args.tcg:
            host = speed_here(kstall)
            guest = speed_in_guest(args.tcg, tmp)
            for k in host:
                print(f"{k}: {host[k]:.0f} here, {guest[k]:.0f} in a TCG guest of {args.tcg}: "
                      f"x{guest[k] / host[k]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
