# SPDX-License-Identifier: GPL-2.0
"""`kstall threads` on a live process whose two threads took two mutexes in
opposite orders: the cycle is named, the pthread_join wait too, exit 1, and
the process is left as it was."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from helpers import kstall

from harness.base import procs

pytestmark = pytest.mark.e2e
SOURCE = Path(__file__).parents[1] / "programs" / "lock_inversion.c"


def test_a_lock_order_inversion_is_a_deadlock_cycle(tmp_path):
    exe = tmp_path / "lock-inversion"
    subprocess.run(["gcc", "-O0", "-g", "-pthread", "-o", str(exe), str(SOURCE)], check=True)
    proc = subprocess.Popen([str(exe)], stdout=subprocess.PIPE, text=True, preexec_fn=procs.die_with_parent)
    try:
        assert proc.stdout.readline().strip() == "ready"
        p = kstall("threads", str(proc.pid), "--json", timeout=120)
        assert p.returncode == 1, p.stderr[-2000:]
        doc = json.loads(p.stdout)
        workers = sorted(doc["cycles"][0])
        assert len(doc["cycles"]) == 1 and len(workers) == 2
        assert doc["summary"].startswith(f"deadlock: LWP {workers[0]} <-> LWP {workers[1]}")
        joins = [w for w in doc["waits"] if w["kind"] == "join"]
        assert len(joins) == 2 and {w["other"] for w in joins} & set(workers)  # the joiner; main joins it
        text = kstall("threads", str(proc.pid))
        assert text.returncode == 1 and "deadlock: LWP" in text.stdout and "join LWP" in text.stdout
        assert procs.stat_fields(f"/proc/{proc.pid}/stat")[0] in ("S", "R")  # left as it was found
    finally:
        proc.kill()
        proc.wait()
