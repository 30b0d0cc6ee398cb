# SPDX-License-Identifier: GPL-2.0
"""`kstall calibrate`: measure a reproducer on a kernel known to be affected.

Runs verify several times and records, per run, how many passes over the
path completed before the hang and how long that took. harness/analysis/pmiss.py turns
those figures into the P(miss) of every later NOT_REPRODUCED.
"""
from __future__ import annotations

import sys
import time
from typing import Callable

from harness.analysis import pmiss
from harness.analysis.verdict import VerdictKind
from harness.base import arch as arches
from harness.drivers import case as cases, verify
from harness.drivers.options import Options


def write(path, reproducer: str, kernel: str, key: pmiss.Key, runs: list[dict], argv: list[str]) -> None:
    lines = [f"# Written by: kstall {' '.join(argv)}",
             "# Per run: passes over the path completed before the hang, or in all when it did not",
             "# hang (count), and seconds from reproducer start to its last sign of life. Used by",
             "# harness/analysis/pmiss.py for runs with this key: the arguments the reproducer ran",
             "# with (its defaults included), vCPUs, accelerator, architecture and injected NMI rate.",
             f'reproducer = "{reproducer}"', f'kernel = "{kernel}"', *key.to_toml(), "confidence = 0.95",
             f'measured = "{time.strftime("%Y-%m-%d")}"', ""]
    for r in runs:
        lines += ["[[run]]", f'verdict = "{r["verdict"]}"', f"count = {r['count']}",
                  f"seconds = {r['seconds']}", f'id = "{r["id"]}"', ""]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines))


def run(kernel: str, reproducer: str, opts: Options, count: int, write_file: bool,
        echo: Callable[[str], None]) -> int:
    """count verify runs; 0 when any hung, 3 when none did."""
    runs = []
    canonical = kernel
    loaded = cases.load(reproducer, echo)
    accel, arch = "", ""
    for i in range(count):
        rec = verify.verify(kernel, loaded, opts, echo).record
        canonical, arch = rec.kernel["canonical"], rec.vm.get("arch") or rec.kernel.get("arch") or arches.DEFAULT
        # the accelerator the runs are for: each one's first attempt's (an emulator fault's
        # retry runs under tcg-single, a rate of its own that holds for no normal run)
        accel = accel or (rec.attempts[0].get("accel") if rec.attempts else None) or rec.vm["accel"]
        run_accel = rec.vm["accel"]
        line = (f"run {i + 1}/{count}: {rec.verdict.verdict} after {rec.passes_before_hang} passes "
                f"({rec.id})")
        if run_accel != accel:
            print(f"{line}: ended under {run_accel}, not {accel}: left out of the rate", flush=True)
            continue
        runs.append({"verdict": rec.verdict.verdict, "count": rec.passes_before_hang,
                     "seconds": rec.timings.get("hang_after_s") or rec.timings.get("repro_s") or 0, "id": rec.id})
        print(f"{line}, {runs[-1]['seconds']}s", flush=True)
    hangs = [r for r in runs if r["verdict"] == VerdictKind.VULNERABLE]
    print(f"{len(hangs)}/{len(runs)} runs hung")
    if write_file and runs:
        repro = loaded.spec
        key = cases.key_for(loaded, opts, accel, arch)
        path = pmiss.file_for(repro.name, key.arch, repro.calibration_dir)
        write(path, repro.name, canonical, key, runs, sys.argv[1:])
        cal = pmiss.load(repro.name, key, repro.calibration_dir)
        lam, k, n = cal.rate_lower_bound() if cal else (0, 0, 0)
        print(f"wrote {path}: hang rate >= {lam:.3g} per pass (95%), {pmiss.count_for(cal, 1e-6)} passes "
              "give P(miss) <= 1e-6")
    return 0 if hangs else 3
