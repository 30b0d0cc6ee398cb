# SPDX-License-Identifier: GPL-2.0
"""`kstall calibrate`: measure a reproducer on a kernel known to be affected.

Runs verify several times and records, per run, how many passes over the
path completed before the hang and how long that took. harness/analysis/pmiss.py turns
those figures into the P(miss) of every later NOT_REPRODUCED.
"""
from __future__ import annotations

import argparse
import sys
import time

from harness.analysis import pmiss


def write(path, reproducer: str, kernel: str, cpus: int, runs: list[dict], argv: list[str]) -> None:
    lines = [f"# Written by: kstall {' '.join(argv)}",
             "# Per run: passes over the path completed before the hang (count) and seconds",
             "# from reproducer start to its last sign of life. Used by harness/analysis/pmiss.py.",
             f'reproducer = "{reproducer}"', f'kernel = "{kernel}"', f"cpus = {cpus}", "confidence = 0.95",
             f'measured = "{time.strftime("%Y-%m-%d")}"', ""]
    for r in runs:
        lines += ["[[run]]", f'verdict = "{r["verdict"]}"', f"count = {r['count']}",
                  f"seconds = {r['seconds']}", f'id = "{r["id"]}"', ""]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines))


def run(a: argparse.Namespace, options_from) -> int:
    from harness.drivers import verify as verify_mod
    opts = options_from(a)
    runs = []
    canonical = a.kernel
    for i in range(a.runs):
        res = verify_mod.verify(a.kernel, a.reproducer, opts, lambda m: sys.stderr.write(f"kstall: {m}\n"))
        d = res.doc
        canonical = d["kernel"]["canonical"]
        # passes before the bug showed: the first stall past the threshold when
        # the reproducer measured one, else the count at the hang
        first = d["evidence"].get("first_stall_count")
        runs.append({"verdict": d["verdict"], "count": first if first is not None else d["evidence"]["count"] or 0,
                     "seconds": d["timings"].get("hang_after_s") or d["timings"].get("repro_s") or 0,
                     "id": d["id"]})
        print(f"run {i + 1}/{a.runs}: {d['verdict']} after {runs[-1]['count']} passes, "
              f"{runs[-1]['seconds']}s ({d['id']})", flush=True)
    hangs = [r for r in runs if r["verdict"] == "VULNERABLE"]
    print(f"{len(hangs)}/{len(runs)} runs hung")
    if a.write:
        path = pmiss.CAL_DIR / f"{a.reproducer}.toml"
        write(path, a.reproducer, canonical, d["vm"]["cpus"], runs, sys.argv[1:])
        cal = pmiss.load(a.reproducer)
        lam, k, n = cal.rate_lower_bound() if cal else (0, 0, 0)
        print(f"wrote {path}: hang rate >= {lam:.3g} per pass (95%), {pmiss.count_for(cal, 1e-6)} passes "
              "give P(miss) <= 1e-6")
    return 0 if hangs else 3


def add_parser(sub, add_vm_options, options_from) -> None:
    c = sub.add_parser("calibrate", help="measure a reproducer on an affected kernel (for P(miss))")
    c.add_argument("kernel")
    c.add_argument("reproducer")
    c.add_argument("repro_args", nargs="*")
    c.add_argument("--runs", type=int, default=5)
    c.add_argument("--write", action="store_true", help="write repro/calibration/REPRODUCER.toml")
    add_vm_options(c)
    c.set_defaults(func=lambda a: run(a, options_from))
