#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0
"""bpf-ringbuf: N runs of each acceptance case, their verdicts and times.

    tests/bench/bpf_ringbuf_speed.py [--runs N]

Affected kernels (6.16.12, 6.17.8) must give VULNERABLE, fixed ones (7.3.4,
6.12.107) NOT_REPRODUCED. Prints, per case, the verdict counts, the median
wall time to the verdict, and the evidence (longest stall / NMI-context
reserves and P(miss)); an emulator fault (ERROR) is listed, not hidden.
"""
import argparse
import json
import statistics
import subprocess
import tempfile
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
KSTALL = [str(REPO / "harness" / "kstall")]
CASES = [("debian:6.16.12", "VULNERABLE"), ("debian:6.17.8", "VULNERABLE"),
         ("debian:7.3.4", "NOT_REPRODUCED"), ("debian:6.12.107", "NOT_REPRODUCED")]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--kernels", nargs="+", metavar="SPEC=VERDICT",
                    help="other cases (the calibration sweep: every Debian kernel from 6.12.107 to 7.3.4)")
    a = ap.parse_args()
    cases = [tuple(k.split("=", 1)) for k in a.kernels] if a.kernels else CASES
    for spec, _ in cases:
        subprocess.run([*KSTALL, "symbols", spec], capture_output=True, check=True)
    agree = True
    with tempfile.TemporaryDirectory() as res:
        for spec, want in cases:
            docs = []
            for _ in range(a.runs):
                p = subprocess.run([*KSTALL, "verify", spec, "bpf-ringbuf", "--json", "--results", res],
                                   capture_output=True, text=True, timeout=600)
                docs.append(json.loads(p.stdout))
            verdicts = Counter(d["verdict"] for d in docs)
            agree &= verdicts[want] == len(docs)
            walls = [d["wall_s"] for d in docs]
            print(f"{spec:<16} want {want:<15} got {dict(verdicts)}  median {statistics.median(walls):.1f}s "
                  f"(min {min(walls):.1f}, max {max(walls):.1f})")
            for d in docs:
                ev = d["evidence"]
                earlier = "; ".join(f"{x['verdict']} {x['reason'][:90]}" for x in d["attempts"][:-1])
                retried = f" [retried after: {earlier}]" if len(d["attempts"]) > 1 else ""
                if d["verdict"] == "VULNERABLE":
                    print(f"    {d['line']}  ({ev['count']} NMI-context reserves){retried}")
                else:
                    pm = (ev.get("p_miss") or {}).get("text", "")
                    paths = (ev.get("latency") or {}).get("paths", {})
                    lat = {k: round(v["max_ns"] / 1e6, 2) for k, v in paths.items()}
                    print(f"    {d['verdict']}: {ev['count']} NMI-context reserves, {pm}, max ms {lat}{retried}")
    print("all runs agree with the expected verdicts" if agree else "SOME RUNS DISAGREE")


if __name__ == "__main__":
    main()
