# SPDX-License-Identifier: GPL-2.0
"""Work done on a thread while the main one waits: for QEMU or the guest (a
restore, a heartbeat silence), so that it is done by the time the path to the
verdict needs it; or for the runs before it (kernels downloaded in turn,
ahead of the matrix cells or bisection steps that will boot them).

Not concurrent.futures: it imports logging, whose fork hooks run in kstall
before every child it starts, and a Ctrl-C that lands in one is dropped by
Python (the run went on to its verdict)."""
from __future__ import annotations

import queue
import threading
from typing import Callable, Generic, TypeVar

T = TypeVar("T")


class Cancelled(Exception):
    """Work that never ran: its queue was closed first."""


class Pending(Generic[T]):
    """fn(*args), running on a daemon thread of its own (or, made by a
    Serial, on the queue's thread in its turn)."""

    def __init__(self, fn: Callable[..., T], *args, own_thread: bool = True) -> None:
        self._done = threading.Event()
        self._value: T | None = None
        self._error: BaseException | None = None
        self._fn, self._args = fn, args
        self._name = getattr(fn, "__name__", "work")
        if own_thread:
            threading.Thread(target=self.run, name=f"kstall-{self._name}", daemon=True).start()

    def run(self) -> None:
        try:
            self._value = self._fn(*self._args)
        except BaseException as e:  # noqa: BLE001 - result() raises it in the caller
            self._error = e
        finally:
            self._done.set()

    def cancel(self) -> None:
        """It will not run: result() raises Cancelled."""
        self._error = Cancelled(f"{self._name} was cancelled before it ran")
        self._done.set()

    def result(self, timeout: float) -> T:
        """Its value, once done (its exception, raised here); TimeoutError after timeout seconds."""
        if not self._done.wait(timeout):
            raise TimeoutError(f"{self._name} took longer than {timeout:g}s")
        if self._error is not None:
            raise self._error
        return self._value  # type: ignore[return-value]


class Serial:
    """Work done one piece at a time, in the order given, on one daemon
    thread (setup runs on it first: a lower priority, say)."""

    def __init__(self, name: str, setup: Callable[[], None] | None = None) -> None:
        self._todo: queue.SimpleQueue[Pending | None] = queue.SimpleQueue()
        self._closed = threading.Event()
        self._lock = threading.Lock()  # nothing is queued behind close()'s end mark
        threading.Thread(target=self._work, args=(setup,), name=f"kstall-{name}", daemon=True).start()

    def submit(self, fn: Callable[..., T], *args) -> Pending[T]:
        p: Pending[T] = Pending(fn, *args, own_thread=False)
        with self._lock:
            if self._closed.is_set():
                p.cancel()
            else:
                self._todo.put(p)
        return p

    def _work(self, setup: Callable[[], None] | None) -> None:
        if setup is not None:
            setup()
        while (p := self._todo.get()) is not None:
            if self._closed.is_set():
                p.cancel()
            else:
                p.run()

    def close(self) -> None:
        """What has not started never runs; what runs finishes on its own."""
        with self._lock:
            if not self._closed.is_set():
                self._closed.set()
                self._todo.put(None)
