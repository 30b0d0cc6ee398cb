# SPDX-License-Identifier: GPL-2.0
"""Work started on a thread while the main one waits for QEMU or the guest
(a restore, a heartbeat silence), so that it is done by the time the path to
the verdict needs it.

Not concurrent.futures: it imports logging, whose fork hooks run in kstall
before every child it starts, and a Ctrl-C that lands in one is dropped by
Python (the run went on to its verdict)."""
from __future__ import annotations

import threading
from typing import Callable, Generic, TypeVar

T = TypeVar("T")


class Pending(Generic[T]):
    """fn(*args), running on a daemon thread."""

    def __init__(self, fn: Callable[..., T], *args) -> None:
        self._done = threading.Event()
        self._value: T | None = None
        self._error: BaseException | None = None
        self._name = getattr(fn, "__name__", "work")
        threading.Thread(target=self._run, args=(fn, args), name=f"kstall-{self._name}", daemon=True).start()

    def _run(self, fn: Callable[..., T], args: tuple) -> None:
        try:
            self._value = fn(*args)
        except BaseException as e:  # noqa: BLE001 - result() raises it in the caller
            self._error = e
        finally:
            self._done.set()

    def result(self, timeout: float) -> T:
        """Its value, once done (its exception, raised here); TimeoutError after timeout seconds."""
        if not self._done.wait(timeout):
            raise TimeoutError(f"{self._name} took longer than {timeout:g}s")
        if self._error is not None:
            raise self._error
        return self._value  # type: ignore[return-value]
