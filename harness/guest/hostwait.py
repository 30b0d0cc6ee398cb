# SPDX-License-Identifier: GPL-2.0
"""How long the host kept a guest's vCPUs waiting for a CPU.

Under TCG the guest's clock is the host's: while a vCPU thread waits for a
host CPU (a busy host, another guest), the guest's time runs on, and a
latency the reproducer measures grows by that wait. So a latency stall is
the kernel's only when it stays past its threshold without the most the
host can have added while it ran. The vCPU threads' run delay (schedstat:
time runnable, not running) is sampled every 10 ms while the reproducer
runs; between(t0, t1) is the most one thread's delay grew from t0 to t1, and
worst(window) the most it grew within any window of that length. QEMU's main
thread, which carries the agent's heartbeats to the host, is sampled too:
silence(t0, t1) is the most the host held back either, for a heartbeat
silence that the host rather than the guest may have made.
"""
from __future__ import annotations

import bisect
import math
import threading
import time
from pathlib import Path

PERIOD_S = 0.01
MAX_SAMPLES = 60_000  # 10 minutes of samples; older ones are dropped


class HostWait:
    def __init__(self, pid: int | None) -> None:
        self.files: list[Path] = []
        for task in Path(f"/proc/{pid}/task").glob("*") if pid else []:
            try:
                # QEMU's -name debug-threads=on: "CPU 0/TCG", or "ALL CPUs/TCG" for thread=single
                if (task / "comm").read_text().startswith(("CPU ", "ALL CPUs/")):
                    self.files.append(task / "schedstat")
            except OSError:
                continue
        self.samples: list[list[tuple[float, float]]] = [[] for _ in self.files]  # (t ms, delay ms)
        # QEMU's main loop: read by silence() only
        self.main_file = Path(f"/proc/{pid}/task/{pid}/schedstat") if pid and self.files else None
        self.main_samples: list[tuple[float, float]] = []
        self.proc = Path(f"/proc/{pid}")
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self.files and self._thread is None:
            self._thread = threading.Thread(target=self._run, name="kstall-hostwait", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(1.0)

    def _run(self) -> None:
        while not self._stop.wait(PERIOD_S):
            now = time.monotonic() * 1e3
            files = zip([*self.files, self.main_file], [*self.samples, self.main_samples])
            for f, series in ((f, s) for f, s in files if f is not None):
                try:
                    series.append((now, int(f.read_text().split()[1]) / 1e6))
                except (OSError, IndexError, ValueError):
                    # one unreadable sample is a gap, which between() reads
                    # across; only QEMU's end stops the gauge
                    if not self.proc.exists():
                        return
                    continue
                if len(series) > MAX_SAMPLES:
                    del series[:len(series) - MAX_SAMPLES]

    def between(self, t0: float, t1: float) -> float | None:
        """The most one vCPU thread waited for a host CPU from t0 to t1 (host
        monotonic seconds), to a sample period on either side; None when
        nothing was sampled then."""
        return self._grew(self.samples, t0, t1)

    def silence(self, t0: float, t1: float) -> float | None:
        """The most a vCPU thread or QEMU's main loop waited for a host CPU
        from t0 to t1 (ms); None when nothing was sampled then."""
        return self._grew([*self.samples, self.main_samples], t0, t1)

    def share(self, t0: float, t1: float) -> float | None:
        """The share of t0..t1 (host monotonic seconds) the vCPU threads
        spent waiting for a host CPU, their mean: 0 when each had a core of
        its own, 0.5 when two shared one; None when nothing was sampled then."""
        if t1 <= t0:
            return None
        grew = [g for series in self.samples if (g := self._grew([series], t0, t1)) is not None]
        return round(min(sum(grew) / len(grew) / ((t1 - t0) * 1e3 + 2 * PERIOD_S * 1e3), 1.0), 3) if grew else None

    @staticmethod
    def _grew(samples: list[list[tuple[float, float]]], t0: float, t1: float) -> float | None:
        t0, t1 = t0 * 1e3 - PERIOD_S * 1e3, t1 * 1e3 + PERIOD_S * 1e3
        most = None
        for series in samples:
            # the series is in time order: the window by bisection, not a scan (the watch asks often)
            lo = bisect.bisect_left(series, (t0, -math.inf))
            hi = bisect.bisect_right(series, (t1, math.inf))
            if hi > lo:
                grew = series[hi - 1][1] - series[max(lo - 1, 0)][1]
                most = grew if most is None else max(most, grew)
        return None if most is None else round(most, 1)

    def worst(self, window_ms: float) -> float | None:
        """The most one vCPU thread waited within any window_ms of the run
        (to a sample period); None when nothing was sampled."""
        if not any(self.samples):
            return None
        most = 0.0
        for series in self.samples:
            i = 0
            for t, delay in series:  # two pointers: the earliest sample within window_ms before this one
                while series[i][0] < t - window_ms - PERIOD_S * 1e3:
                    i += 1
                most = max(most, delay - series[i][1])
        return round(most, 1)
