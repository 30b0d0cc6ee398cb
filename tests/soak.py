#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0
"""Soak: many runs of the cells whose verdicts are known, at the matrix's own
parallelism, counting false verdicts (a decisive verdict other than the known
one), INCONCLUSIVEs apart with their reasons, ERRORs by reason and retries, with time
to verdict as median and p95, and each cell's longest heartbeat gap the host's own
delay does not explain (what the freeze floor, 0.3 s, must stay above). Not part of
`make test` (about an hour; 48 runs under --load took 4 minutes on a fast host).

    tests/soak.py [--rounds 30] [--perf-extra 20] [--arm64 0] [--load] [--json FILE]

Each round is one `kstall matrix` of four cells: perf-refresh on 6.16.12
(VULNERABLE) and 6.17.8 (NOT_REPRODUCED), bpf-ringbuf on 6.17.8 (VULNERABLE)
and 7.3.4 (NOT_REPRODUCED); --perf-extra more rounds run the two
perf-refresh cells alone (defaults: 50 runs of each perf-refresh cell, 30 of
each bpf-ringbuf cell). --arm64 N rounds run perf-refresh on the arm64
6.16.12 (VULNERABLE) and 6.17.8 (NOT_REPRODUCED). --load keeps a CPU hog on
every host core meanwhile.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CELLS = {("debian:6.16.12", "perf-refresh"): "vulnerable", ("debian:6.17.8", "perf-refresh"): "not_reproduced",
         ("debian:6.17.8", "bpf-ringbuf"): "vulnerable", ("debian:7.3.4", "bpf-ringbuf"): "not_reproduced"}
ARM64_CELLS = {("debian:6.16.12-arm64", "perf-refresh"): "vulnerable",
               ("debian:6.17.8-arm64", "perf-refresh"): "not_reproduced"}


def soaked_cells(repros: list[str], known: dict = CELLS) -> list[str]:
    """The ids of the cells a round of matrix_file(repros, known) runs."""
    return [f"{k}/{r}" for (k, r) in known if r in repros]


def lost_round(ids: list[str], why: str) -> list[dict]:
    """A round whose matrix wrote no matrix.json: each cell it was to run is an ERROR."""
    return [{"id": i, "verdict": "ERROR", "status": "error", "reason": why} for i in ids]


def matrix_file(path: Path, repros: list[str], known: dict = CELLS) -> Path:
    kernels: dict[str, dict[str, str]] = {}
    for (k, r), want in known.items():
        if r in repros:
            kernels.setdefault(k, {})[r] = want
    def table(d: dict[str, str]) -> str:
        return "{ " + ", ".join(f'{k} = "{v}"' for k, v in d.items()) + " }"
    text = "".join(f'[[reproducer]]\nname = "{r}"\n\n' for r in repros)
    for k, expect in kernels.items():
        text += f'[[kernel]]\nspec = "{k}"\nexpect = {table(expect)}\n'
        skip = {r: "not soaked" for r in repros if r not in expect}  # no known verdict for that cell
        if skip:
            text += f"skip = {table(skip)}\n"
        text += "\n"
    path.write_text(text)
    return path


def hog() -> None:
    while True:
        pass


def percentile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


# the promise: no false decisive verdict, at most 1% ERRORs and 2% INCONCLUSIVE
MAX_ERROR_SHARE, MAX_INCONCLUSIVE_SHARE = 0.01, 0.02


def tally(cells: list[dict]) -> dict:
    """The soak's figures from its cells' results."""
    by_cell: dict[str, list[dict]] = {}
    for c in cells:
        by_cell.setdefault(c["id"], []).append(c)
    # a cell with no verdict at all (the matrix lost it) is an ERROR, not a cell left uncounted
    errors = [c for c in cells if c["verdict"] in ("ERROR", None)]
    # a false verdict claims something wrong about the kernel; INCONCLUSIVE
    # claims nothing (e.g. a stall the host's own delay could explain) and is
    # counted apart, with its reason
    undecided = [c for c in cells if c["verdict"] == "INCONCLUSIVE" and c["status"] != "pass"]
    false = [c for c in cells if c["verdict"] not in ("ERROR", "INCONCLUSIVE", None) and c["status"] != "pass"]
    times = [c["seconds"] for c in cells if c.get("seconds")]
    return {
        "runs": len(cells),
        "false_verdicts": len(false), "false": [(c["id"], c["verdict"]) for c in false],
        "inconclusive": len(undecided), "inconclusive_share": len(undecided) / max(len(cells), 1),
        "inconclusive_reasons": [(c["id"], (c.get("reason") or "?")[:160]) for c in undecided],
        "errors": len(errors), "error_share": len(errors) / max(len(cells), 1),
        "errors_by_reason": dict(Counter((c.get("reason") or "no verdict")[:80] for c in errors)),
        "retries": sum(max((c.get("attempts") or 1) - 1, 0) for c in cells),
        "time_to_verdict_s": {"median": round(statistics.median(times), 2), "p95": round(percentile(times, 0.95), 2)}
        if times else {},
        "cells": {k: {"runs": len(v), "verdicts": dict(Counter(str(c["verdict"]) for c in v)),
                      "median_s": round(statistics.median([c["seconds"] for c in v if c.get("seconds")] or [0]), 2),
                      "p95_s": round(percentile([c["seconds"] for c in v if c.get("seconds")] or [0], 0.95), 2),
                      # the freeze floor's margin: a gap this long was a healthy guest's, not a freeze
                      "max_unexplained_gap_s": max((c["gap_s"] for c in v if c.get("gap_s") is not None),
                                                   default=None)}
                  for k, v in by_cell.items()},
    }


def passes(figures: dict) -> bool:
    """The shares compared unrounded: 1.2% of ERRORs is over 1%."""
    return not figures["false_verdicts"] and figures["error_share"] <= MAX_ERROR_SHARE \
        and figures["inconclusive_share"] <= MAX_INCONCLUSIVE_SHARE


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=30, help="rounds of all four cells (default 30)")
    ap.add_argument("--perf-extra", type=int, default=20, help="more rounds of the perf-refresh cells (default 20)")
    ap.add_argument("--arm64", type=int, default=0, help="rounds of the two arm64 perf-refresh cells (default 0)")
    ap.add_argument("--load", action="store_true", help="a CPU hog on every host core during the soak")
    ap.add_argument("--json", type=Path, help="write the figures here too")
    ap.add_argument("--keep", action="store_true", help="keep the rounds' results directories")
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="kstall-soak-"))
    both = matrix_file(work / "all.toml", ["perf-refresh", "bpf-ringbuf"])
    perf = matrix_file(work / "perf.toml", ["perf-refresh"])
    arm64 = matrix_file(work / "arm64.toml", ["perf-refresh"], ARM64_CELLS)
    ids = {both: soaked_cells(["perf-refresh", "bpf-ringbuf"]), perf: soaked_cells(["perf-refresh"]),
           arm64: soaked_cells(["perf-refresh"], ARM64_CELLS)}
    hogs = [multiprocessing.Process(target=hog, daemon=True) for _ in range(os.cpu_count() or 1)] if a.load else []
    for h in hogs:
        h.start()
    cells: list[dict] = []
    t0 = time.monotonic()
    try:
        plan = [both] * a.rounds + [perf] * a.perf_extra + [arm64] * a.arm64
        for i, m in enumerate(plan, 1):
            out = work / f"round-{i}"
            p = subprocess.run([sys.executable, str(REPO / "harness" / "kstall"), "matrix", str(m), "--results",
                                str(out)], capture_output=True, text=True, timeout=3600)
            docs = list(out.glob("*/matrix.json"))
            if not docs:  # as many ERRORs as the round had cells, not one
                cells += lost_round(ids[m], f"matrix exited {p.returncode} without matrix.json: {p.stderr[-300:]}")
                continue
            doc = json.loads(docs[0].read_text())
            for c in doc["cells"]:
                if c["status"] == "skip":
                    continue
                run = docs[0].parent / c["run_dir"] / "run.json" if c.get("run_dir") else None
                rec = json.loads(run.read_text()) if run and run.exists() else {}
                cells.append({**{k: c.get(k) for k in ("id", "verdict", "status", "reason", "seconds")},
                              "attempts": len(rec.get("attempts", [])),
                              "gap_s": (rec.get("evidence") or {}).get("max_unexplained_gap_s")})
            print(f"soak: round {i}/{len(plan)}: " + ", ".join(f"{c['id']}={c['verdict']}" for c in doc["cells"]
                                                             if c["status"] != "skip"), flush=True)
    finally:
        for h in hogs:
            h.terminate()
        if not a.keep:
            import shutil
            shutil.rmtree(work, ignore_errors=True)
    figures = tally(cells) | {"load": a.load, "wall_s": round(time.monotonic() - t0)}
    print(json.dumps(figures, indent=2))
    if a.json:
        a.json.write_text(json.dumps(figures, indent=2) + "\n")
    return 0 if passes(figures) else 1


if __name__ == "__main__":
    sys.exit(main())
