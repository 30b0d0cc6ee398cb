# SPDX-License-Identifier: GPL-2.0
"""A kernel's own hang report, live: console-trigger makes a real kernel's
hung-task detector speak, and run.json carries the report with its
syzbot-style title and function."""
from __future__ import annotations

import pytest

from helpers import kstall_processes, verify_json

pytestmark = pytest.mark.e2e


def test_hung_task_report_is_titled_in_run_json(tmp_path):
    rc, doc, out = verify_json(tmp_path, "debian:7.3.4", "console-trigger")
    assert rc == 0 and doc["verdict"] == "NOT_REPRODUCED", out
    assert doc["evidence"]["count"] == 1
    hung = [r for r in doc["evidence"]["console_reports"] if r["name"] == "hung-task"]
    assert hung, doc["evidence"]["console_reports"]
    r = hung[0]
    assert r["kind"] == "stall" and r["function"] == "anon_pipe_write"
    assert r["title"] == "INFO: task hung in anon_pipe_write"
    assert r["fields"]["task"] == "blocked-writer" and r["message"].startswith("INFO: task blocked-writer:")
    assert {"title": r["title"], "kind": "stall", "count": 1} in doc["evidence"]["console_titles"]
    assert "console: INFO: task blocked-writer" in out  # progress output names it as it comes
    assert kstall_processes() == []
