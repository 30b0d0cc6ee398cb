# SPDX-License-Identifier: GPL-2.0
"""Version bisect on real Debian kernels: interrupted after its first steps,
resumed from its results directory, and still naming the boundary."""
from __future__ import annotations

import json
import math
import signal
import subprocess
import time
from pathlib import Path

import pytest

from helpers import KSTALL, interruptible, kstall, kstall_processes

pytestmark = pytest.mark.e2e


def recorded_steps(root: Path) -> list[dict]:
    for p in root.glob(".*-bisect-debian-*.incomplete/bisect.json"):
        try:
            return json.loads(p.read_text()).get("steps", [])
        except (OSError, ValueError):  # being replaced
            return []
    return []


def test_interrupted_bisection_resumes_without_running_its_steps_again(tmp_path):
    res = tmp_path / "r"
    proc = subprocess.Popen([*KSTALL, "bisect", "debian", "--old", "6.12.107", "--new", "6.16.12", "perf-refresh",
                             "--results", str(res)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=interruptible)
    try:
        deadline = time.monotonic() + 300
        while proc.poll() is None and time.monotonic() < deadline and len(recorded_steps(res)) < 2:
            time.sleep(0.5)
        assert proc.poll() is None, "the bisection ended before it could be interrupted"
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130
    assert kstall_processes() == []
    first = next(res.glob("*-bisect-debian-*"))
    done = json.loads((first / "bisect.json").read_text())
    assert done["status"] == "interrupted" and len(done["steps"]) >= 2
    before = {s["candidate"] for s in done["steps"]}

    p = kstall("bisect", "debian", "--resume", str(first), "--results", str(res), timeout=900)
    assert p.returncode == 0, p.stderr[-2000:]
    again = [c for c in before if f": debian:{c} ...\n" in p.stderr]
    assert again == [], f"recorded steps ran again: {again}"
    resumed = max(res.glob("*-bisect-debian-*"), key=lambda d: d.stat().st_mtime)
    doc = json.loads((resumed / "bisect.json").read_text())
    assert doc["direction"] == "regression" and doc["status"] == "done"
    states = {s["candidate"]: s["state"] for s in doc["steps"]}
    assert states[doc["last_old"]] == "clean" and states[doc["first_new"]] == "reproduces"
    n_between = len(doc["candidates"]) - 2
    # binary search over N candidates needs ceil(log2(N + 1)) middles: with N = 1, one
    assert doc["verifies"] <= math.ceil(math.log2(n_between + 1)) + 2
    assert kstall_processes() == []
