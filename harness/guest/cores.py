# SPDX-License-Identifier: GPL-2.0
"""Host cores shared by the guests of one kstall process.

Under TCG every running vCPU is a busy host thread, so guests running side by
side must not ask for more vCPUs than the host has cores. A guest holds one
core while it boots (the boot CPU does nearly all the work), none while it
waits at the agent's gate, and its vCPU count while the reproducer runs.
Requests are served in order, so the guest that became ready first runs first.
"""
from __future__ import annotations

import os
import threading
from collections import deque


class Cancelled(Exception):
    pass


class CoreBudget:
    def __init__(self, cores: int | None = None) -> None:
        self.cores = max(1, cores or os.cpu_count() or 1)
        self.free = self.cores
        self.cond = threading.Condition()
        self.queue: deque[Ticket] = deque()

    def request(self, n: int) -> "Ticket":
        t = Ticket(self, min(max(n, 1), self.cores))
        with self.cond:
            self.queue.append(t)
        return t

    def acquire(self, n: int, cancel: threading.Event | None = None) -> "Ticket":
        """Wait for n cores (in turn); raises Cancelled if cancel is set first."""
        t = self.request(n)
        with self.cond:
            while not self.cond.wait_for(t._try_locked, 0.2):
                if cancel is not None and cancel.is_set():
                    self.queue.remove(t)
                    self.cond.notify_all()
                    raise Cancelled("cancelled while waiting for cores")
        return t


class Ticket:
    def __init__(self, budget: CoreBudget, n: int) -> None:
        self.budget = budget
        self.n = n
        self.granted = False
        self.released = False

    def _try_locked(self) -> bool:
        b = self.budget
        if self.granted:
            return True
        if b.queue and b.queue[0] is self and b.free >= self.n:
            b.free -= self.n
            b.queue.popleft()
            self.granted = True
            b.cond.notify_all()
        return self.granted

    def ready(self) -> bool:
        """Non-blocking: take the cores if it is this ticket's turn."""
        with self.budget.cond:
            return self._try_locked()

    def release(self) -> None:
        b = self.budget
        with b.cond:
            if self.released:
                return
            self.released = True
            if self.granted:
                b.free += self.n
            elif self in b.queue:
                b.queue.remove(self)
            b.cond.notify_all()


class Gate:
    """The agent's gate for one guest: holds a boot core until the guest is
    ready, then waits its turn for the cores its reproducer needs."""

    def __init__(self, budget: CoreBudget, vcpus: int, cancel: threading.Event | None = None) -> None:
        self.budget = budget
        self.vcpus = vcpus
        self.boot = budget.acquire(1, cancel)
        self.run: Ticket | None = None

    def try_open(self) -> bool:
        if self.run is None:
            self.boot.release()
            self.run = self.budget.request(self.vcpus)
        return self.run.ready()

    def close(self) -> None:
        self.boot.release()
        if self.run is not None:
            self.run.release()
