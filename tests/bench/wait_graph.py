#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0
"""What the wait-for graph of sleeping tasks adds to a verdict (medians of
several runs; kernels and symbols cached first).

    tests/bench/wait_graph.py [--runs N]

For console-trigger (a hung task on a pipe's mutex, its holder in
userfaultfd) and perf-sigtrap (a task asleep in _free_event) on
debian:6.1.170, and console-trigger on debian:7.3.4 (whose tasks say what
they block on): the graph's own time (the guest stopped while its tasks and
locks are read, then the agent's stacks of the tasks it names), the tasks
the walk read, and the whole `kstall verify` wall clock.
"""
import argparse
import json
import tempfile

from verify_speed import cache_symbols, med, timed

CELLS = (("debian:6.1.170", "console-trigger"), ("debian:6.1.170", "perf-sigtrap"),
         ("debian:7.3.4", "console-trigger"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    cache_symbols(*sorted({k for k, _ in CELLS}))
    with tempfile.TemporaryDirectory(prefix="kstall-bench-") as results:
        for spec, repro in CELLS:
            graph, read, walls, walked, found = [], [], [], [], ""
            for _ in range(a.runs):
                wall, p = timed(["verify", spec, repro, "--json", "--results", results])
                doc = json.loads(p.stdout)
                waits = doc.get("waits") or {}
                if "total_s" in waits:
                    graph.append(waits["total_s"])
                    read.append(waits["read_s"])
                    walked.append(waits.get("walked", 0))
                walls.append(wall)
                found = "; ".join(waits.get("findings", [])) or waits.get("error", "no graph")
            print(f"{spec} {repro}: the graph {med(graph) if graph else 'not read'}"
                  + (f" (of which the guest stopped {med(read)}, {max(walked)} tasks walked)" if read else "")
                  + f"; whole verify {med(walls, 1)}\n  {found}")


if __name__ == "__main__":
    main()
