#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0
"""Whether the host-wait gauge misses time that matters: a vCPU thread's
time off a host CPU is runnable-and-waiting (run delay, which the gauge
counts: harness/guest/hostwait.py) or blocked, which it does not: in
uninterruptible sleep (state D: a page fault into a restored snapshot's RAM
file, I/O) or asleep (state S: a halted, idle guest CPU, or QEMU's big lock).

    tests/bench/hostwait_blocked.py [--runs N] [--load]

Runs `kstall verify` of bpf-ringbuf (a stalled 6.17.8 and a fixed 7.3.4) and
samples every vCPU thread's schedstat (on-CPU and run-delay ns) every 10 ms
beside it. Per run it prints the most a thread was blocked, and the most it
waited runnable, within any 50 ms and 300 ms window (the NMI and
sched_switch thresholds). A halted vCPU (an idle guest CPU) is blocked too,
so the blocked figure is an upper bound on what the gauge leaves out.
"""
import argparse
import json
import multiprocessing
import os
import statistics
import subprocess
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def qemu_of(pid: int) -> int | None:
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text()
                if int(stat.rsplit(")", 1)[1].split()[1]) == pid and "qemu-system" in (d / "comm").read_text():
                    return int(d.name)
            except (OSError, ValueError, IndexError):
                continue
    return None


def sample(kstall_pid: int, out: dict, stop: threading.Event) -> None:
    qemu = None
    while qemu is None and not stop.wait(0.005):
        qemu = qemu_of(kstall_pid)
    if qemu is None:
        return
    series: dict[str, list[tuple[float, float, float]]] = {}
    states: dict[str, int] = {}
    while not stop.wait(0.01):
        now = time.monotonic() * 1e3
        try:
            tasks = list(Path(f"/proc/{qemu}/task").iterdir())
        except OSError:
            break
        for t in tasks:
            try:
                if not (t / "comm").read_text().startswith("CPU "):
                    continue
                on, delay = (int(x) / 1e6 for x in (t / "schedstat").read_text().split()[:2])
                state = (t / "stat").read_text().rsplit(")", 1)[1].split()[0]
            except (OSError, ValueError, IndexError):
                continue
            series.setdefault(t.name, []).append((now, on, delay))
            states[state] = states.get(state, 0) + 1
    out["series"], out["states"] = series, states


def worst(series: list[tuple[float, float, float]], window_ms: float) -> tuple[float, float]:
    """(most blocked, most run delay) within any window_ms."""
    blocked = waited = 0.0
    i = 0
    for t, on, delay in series:
        while series[i][0] < t - window_ms:
            i += 1
        t0, on0, delay0 = series[i]
        waited = max(waited, delay - delay0)
        blocked = max(blocked, (t - t0) - (on - on0) - (delay - delay0))
    return round(blocked, 1), round(waited, 1)


def hog() -> None:
    while True:
        pass


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--load", action="store_true", help="a CPU hog on every host core meanwhile")
    a = ap.parse_args()
    hogs = [multiprocessing.Process(target=hog, daemon=True) for _ in range(os.cpu_count() or 1)] if a.load else []
    for h in hogs:
        h.start()
    figures: dict[str, list] = {}
    try:
        with tempfile.TemporaryDirectory() as d:
            for spec in ("debian:6.17.8", "debian:7.3.4"):
                for _ in range(a.runs):
                    p = subprocess.Popen([str(REPO / "harness" / "kstall"), "verify", spec, "bpf-ringbuf", "--json",
                                          "--results", d], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
                    out: dict = {}
                    stop = threading.Event()
                    th = threading.Thread(target=sample, args=(p.pid, out, stop))
                    th.start()
                    stdout, _ = p.communicate(timeout=600)
                    stop.set()
                    th.join()
                    verdict = json.loads(stdout)["verdict"]
                    threads = out.get("series", {}).values()
                    row = [verdict] + [max((worst(s, w)[k] for s in threads), default=0.0)
                                       for w in (50, 300) for k in (0, 1)]
                    states = out.get("states", {})
                    row.append(states.get("D", 0) / max(sum(states.values()), 1))
                    figures.setdefault(spec, []).append(row)
                    print(f"{spec} {row[0]:<15} blocked/run delay within 50 ms: {row[1]:6.1f}/{row[2]:6.1f} ms; "
                          f"within 300 ms: {row[3]:6.1f}/{row[4]:6.1f} ms; state D in {row[5]:.2%} of "
                          f"{sum(states.values())} thread samples ({states})", flush=True)
    finally:
        for h in hogs:
            h.terminate()
    for spec, rows in figures.items():
        print(f"{spec}: median of {len(rows)} runs, blocked within 50 ms "
              f"{statistics.median(r[1] for r in rows):.1f} ms, within 300 ms "
              f"{statistics.median(r[3] for r in rows):.1f} ms (run delay "
              f"{statistics.median(r[2] for r in rows):.1f} / {statistics.median(r[4] for r in rows):.1f} ms); "
              f"state D in {max(r[5] for r in rows):.2%} of samples at most")


if __name__ == "__main__":
    main()
