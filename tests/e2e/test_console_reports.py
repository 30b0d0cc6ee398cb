# SPDX-License-Identifier: GPL-2.0
"""A kernel's own hang report, live: console-trigger makes a real kernel's
hung-task detector speak, and run.json carries the report with its
syzbot-style title and function."""
from __future__ import annotations

import pytest

from helpers import kstall_processes, verify_json

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize("version,function,how", [
    ("7.3.4", "anon_pipe_write", "certain"),              # the task's blocker field names the mutex
    ("6.1.170", "pipe_write", "read from the stacks")])   # no such field: the waiter on the stack does
def test_hung_task_report_is_titled_in_run_json_with_who_holds_what_it_waits_for(tmp_path, version, function, how):
    rc, doc, out = verify_json(tmp_path, f"debian:{version}", "console-trigger")
    assert rc == 0 and doc["verdict"] == "NOT_REPRODUCED", out
    assert doc["evidence"]["count"] == 1
    hung = [r for r in doc["evidence"]["console_reports"] if r["name"] == "hung-task"]
    assert hung, doc["evidence"]["console_reports"]
    r = hung[0]
    assert r["kind"] == "stall" and r["function"] == function
    assert r["title"] == f"INFO: task hung in {function}"
    # read from the kernel's memory while the writer slept: the mutex, its holder, and the holder's wait
    waits = doc["waits"]
    writer = next(t for t in waits["tasks"] if t["comm"] == "blocked-writer")
    holder = next(t for t in waits["tasks"] if t["comm"] == "uffd-writer")
    assert len(waits["waits"]) == 1, waits
    w = waits["waits"][0]
    assert (w["kind"], w["owner"], w["pid"]) == ("mutex", holder["task"], writer["pid"]), waits
    if how == "read from the stacks":
        # the kind is decided by the slow path on the writer's own stack, among the locks its
        # wait list could belong to (6.1.170: the pipe's mutex beside a semaphore's count)
        assert (w["in"], w["primitive"]) == ("__mutex_lock", "mutex"), w
        assert w["lock"] in {c["lock"] for c in w["candidates"]}, w
    assert waits["findings"][0] == (
        f"pid {writer['pid']} (blocked-writer) waits for pipe->mutex held by pid {holder['pid']} (uffd-writer), "
        f"blocked in handle_userfault (userfaultfd) [{how}]"), waits
    # neither writer runs (measured: every CPU idle, or running a kernel thread such as khungtaskd,
    # kdamond, or kstall's agent)
    assert not {writer["pid"], holder["pid"]} & {c["pid"] for c in waits["cpus"].values()}, waits["cpus"]
    assert "who holds what the sleeping tasks wait for" in out
    assert r["fields"]["task"] == "blocked-writer" and r["message"].startswith("INFO: task blocked-writer:")
    # once, or again as the hang is held for the graph (the detector looks every 2 s here)
    assert any(t["title"] == r["title"] and t["kind"] == "stall" and t["count"] in (1, 2)
               for t in doc["evidence"]["console_titles"]), doc["evidence"]["console_titles"]
    assert "console: INFO: task blocked-writer" in out  # progress output names it as it comes
    assert kstall_processes() == []
