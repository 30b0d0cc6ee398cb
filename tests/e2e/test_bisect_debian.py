# SPDX-License-Identifier: GPL-2.0
"""Version bisect on real Debian kernels: interrupted (SIGINT, SIGTERM) and
killed (SIGKILL) between its steps, resumed from its results directory each
time, and still naming the boundary without running a step twice."""
from __future__ import annotations

import json
import math
import signal
import subprocess
import time
from pathlib import Path

import pytest

from helpers import KSTALL, interruptible, kstall, kstall_processes, wait_for

pytestmark = pytest.mark.e2e


def recorded_steps(root: Path) -> list[dict]:
    for p in root.glob(".*-bisect-debian-*.incomplete/bisect.json"):
        try:
            return json.loads(p.read_text()).get("steps", [])
        except (OSError, ValueError):  # being replaced
            return []
    return []


def run_until(args: list[str], res: Path, steps: int, sig: signal.Signals) -> subprocess.Popen:
    """A bisection, sent sig once it has recorded `steps` steps; what it
    printed to stderr is its `err`, for a failing assertion to show."""
    proc = subprocess.Popen([*KSTALL, "bisect", "debian", *args, "--results", str(res)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=interruptible)
    try:
        deadline = time.monotonic() + 300
        while proc.poll() is None and time.monotonic() < deadline and len(recorded_steps(res)) < steps:
            time.sleep(0.5)
        assert proc.poll() is None, "the bisection ended before it could be interrupted"
        proc.send_signal(sig)
        proc.err = proc.communicate(timeout=120)[1]  # type: ignore[attr-defined]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc


def newest(res: Path) -> Path:
    return max((d for d in res.glob("*-bisect-debian-*") if not d.name.startswith(".")),
               key=lambda d: d.stat().st_mtime)


def test_a_bisection_interrupted_killed_and_resumed_never_runs_a_step_twice(tmp_path):
    res = tmp_path / "r"
    args = ["--old", "6.12.107", "--new", "6.16.12", "perf-refresh"]
    before: set[str] = set()
    for n, (sig, rc) in enumerate(((signal.SIGINT, 130), (signal.SIGTERM, 143), (signal.SIGKILL, -9)), 1):
        proc = run_until(args, res, n, sig)
        assert proc.returncode == rc, (sig.name, proc.returncode)
        if sig == signal.SIGKILL:
            # its children get their death signal as it dies and take a moment to end; its
            # directory is still .incomplete: the next kstall keeps it
            assert wait_for(lambda: not kstall_processes(), 10) is not None, kstall_processes()
            killed = next(res.glob(".*-bisect-debian-*.incomplete"))
            last = killed.with_name(killed.name[1:-len(".incomplete")])
            state = "running"
        else:  # it reaped them itself before it exited
            assert kstall_processes() == []
            last, state = newest(res), "interrupted"
        done = json.loads(((killed if sig == signal.SIGKILL else last) / "bisect.json").read_text())
        assert done["status"] == state and len(done["steps"]) >= n, \
            (sig.name, done["status"], len(done["steps"]), proc.err[-2000:])
        now = {s["candidate"] for s in done["steps"]}
        assert before <= now, f"{sig.name}: steps were lost"
        before = now
        args = ["--resume", str(last)]

    p = kstall("bisect", "debian", *args, "--results", str(res), timeout=900)
    assert p.returncode == 0, p.stderr[-2000:]
    assert f"kept the killed bisection {last}" in p.stderr, p.stderr[-2000:]
    again = [c for c in before if f": debian:{c} ...\n" in p.stderr]
    assert again == [], f"recorded steps ran again: {again}"
    doc = json.loads((newest(res) / "bisect.json").read_text())
    assert doc["direction"] == "regression" and doc["status"] == "done"
    states = {s["candidate"]: s["state"] for s in doc["steps"]}
    assert states[doc["last_old"]] == "clean" and states[doc["first_new"]] == "reproduces"
    n_between = len(doc["candidates"]) - 2
    # binary search over N candidates needs ceil(log2(N + 1)) middles: with N = 1, one
    assert doc["verifies"] <= math.ceil(math.log2(n_between + 1)) + 2
    assert kstall_processes() == []
