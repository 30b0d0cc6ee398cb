# SPDX-License-Identifier: GPL-2.0
"""Work started on a thread while the main one waits for QEMU or the guest
(a restore, a heartbeat silence), so that it is done by the time the path to
the verdict needs it."""
from __future__ import annotations

import threading
from concurrent.futures import Future
from typing import Callable, TypeVar

T = TypeVar("T")


def start(fn: Callable[..., T], *args) -> "Future[T]":
    """fn(*args) on a daemon thread; its result (or exception) comes from the
    future's result(), which the caller bounds with a timeout."""
    f: Future[T] = Future()

    def run() -> None:
        try:
            f.set_result(fn(*args))
        except BaseException as e:  # noqa: BLE001 - the caller's result() raises it
            f.set_exception(e)
    threading.Thread(target=run, name=f"kstall-{getattr(fn, '__name__', 'work')}", daemon=True).start()
    return f
