# SPDX-License-Identifier: GPL-2.0
"""Work on threads (harness/base/background.py): a queue that runs its pieces
in turn, hands each one's value or exception to its waiter, and, once closed,
runs nothing more. And no command imports logging (concurrent.futures does),
whose fork hooks drop a Ctrl-C."""
from __future__ import annotations

import subprocess
import sys
import threading

import pytest

from harness.base import background, paths


def test_a_serial_queue_runs_in_order_on_one_thread_after_its_setup():
    seen: list[tuple[str, str]] = []
    q = background.Serial("test", lambda: seen.append(("setup", threading.current_thread().name)))
    try:
        pieces = [q.submit(lambda n: seen.append((n, threading.current_thread().name)) or n.upper(), n)
                  for n in ("a", "b", "c")]
        assert [p.result(10) for p in pieces] == ["A", "B", "C"]
    finally:
        q.close()
    assert [s for s, _ in seen] == ["setup", "a", "b", "c"] and {t for _, t in seen} == {"kstall-test"}


def test_a_pieces_exception_is_raised_to_its_waiter_and_the_queue_goes_on():
    q = background.Serial("test")
    try:
        bad, good = q.submit(int, "not a number"), q.submit(int, "7")
        with pytest.raises(ValueError):
            bad.result(10)
        assert good.result(10) == 7
    finally:
        q.close()


def test_after_close_what_has_not_started_is_cancelled_and_what_runs_finishes():
    started, release = threading.Event(), threading.Event()

    def slow() -> str:
        started.set()
        release.wait(10)
        return "done"
    q = background.Serial("test")
    running = q.submit(slow)
    assert started.wait(10)
    queued = q.submit(str, "never")
    q.close()
    late = q.submit(str, "never either")
    release.set()
    assert running.result(10) == "done"
    for p in (queued, late):
        with pytest.raises(background.Cancelled):
            p.result(10)


def test_a_wait_is_bounded():
    never = threading.Event()
    p = background.Pending(never.wait, 10)
    with pytest.raises(TimeoutError):
        p.result(0.05)
    never.set()


def test_no_command_imports_logging():
    drivers = ["harness.cli", "harness.drivers.verify", "harness.drivers.matrix", "harness.drivers.bisect.debian",
               "harness.drivers.bisect.git"]
    code = f"import sys\nfor m in {drivers!r}: __import__(m)\nprint('logging' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], cwd=paths.REPO, capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "False", out.stderr
