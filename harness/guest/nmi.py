# SPDX-License-Identifier: GPL-2.0
"""NMIs for guests without a PMU: QMP inject-nmi at a steady rate.

QEMU raises the NMI through LINT1, which Linux leaves unmasked only on the
boot CPU, so every injected NMI lands on CPU0 (where tp_btf/nmi_handler then
runs in NMI context). The injector runs in its own thread, keeps an absolute
schedule (no drift), is bounded in time and count, and stops on request.
"""
from __future__ import annotations

import threading
import time

from harness.guest.qmp import QMP, QMPError


class NmiInjector:
    def __init__(self, qmp: QMP, rate: float, max_seconds: float) -> None:
        self.qmp = qmp
        self.rate = rate
        self.max_seconds = max_seconds
        self.sent = 0
        self.errors: list[str] = []
        self.started_at: float | None = None
        self.stopped_at: float | None = None
        self.active_s = 0.0  # time spent injecting (paused while a debugger looks)
        self._segment: float | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start, or resume after stop(); the time bound counts from the first start."""
        if self.rate <= 0 or (self._thread is not None and self._thread.is_alive()):
            return
        if self.started_at is None:
            self.started_at = time.monotonic()
        self._segment = time.monotonic()
        self.stopped_at = None
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="kstall-nmi", daemon=True)
        self._thread.start()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _run(self) -> None:
        period = 1.0 / self.rate
        deadline = self.started_at + self.max_seconds
        nxt = time.monotonic()
        while not self._stop.is_set() and time.monotonic() < deadline:
            try:
                self.qmp.cmd("inject-nmi", timeout=5)
                self.sent += 1
            except (QMPError, OSError) as e:
                self.errors.append(str(e))
                if len(self.errors) > 5:
                    return
            nxt += period
            self._stop.wait(max(0.0, nxt - time.monotonic()))

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
        if self._segment is not None:
            self.active_s += time.monotonic() - self._segment
            self._segment = None
        if self.started_at is not None and self.stopped_at is None:
            self.stopped_at = time.monotonic()

    def summary(self) -> dict:
        active = self.active_s + (time.monotonic() - self._segment if self._segment is not None else 0)
        return {"rate": self.rate, "sent": self.sent, "seconds": round(active, 2),
                "achieved_rate": round(self.sent / active, 1) if active else 0, "errors": self.errors[:3]}
