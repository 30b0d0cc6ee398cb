# SPDX-License-Identifier: GPL-2.0
"""`kstall analyze`: recorded real hangs read again offline with today's
signatures give their recorded reading, and a signature changed on purpose
shows as a difference."""
import json
import subprocess
import sys
import time

from recorded import FIXTURES

from harness.analysis import classify
from harness.drivers import analyze

AGREE = ("perf-refresh-6.16.12-4cpu", "bpf-ringbuf-6.16.12-nmi-culprit", "perf-refresh-6.16.12-arm64")


def test_three_recorded_runs_read_as_they_were_recorded():
    for name in AGREE:
        r = analyze.read(FIXTURES / name)
        assert r.agrees, r.text()
        assert r.culprit_now == r.culprit_before != ""


def test_a_signature_taken_away_shows_as_a_difference(monkeypatch):
    kept = [s for s in classify.load_signatures() if s.name != "hrtimer_cancel_self_deadlock"]
    monkeypatch.setattr(analyze, "_signatures", lambda doc: kept)
    r = analyze.read(FIXTURES / "perf-refresh-6.16.12-arm64")
    assert not r.agrees
    assert "culprit signature: recorded hrtimer_cancel_self_deadlock, today none" in r.differences
    assert any(d.startswith("CPU1: recorded hrtimer_cancel_self_deadlock (culprit), today unknown")
               for d in r.differences)


def test_the_command_is_quick_and_says_so_by_its_exit_status(tmp_path):
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "harness/kstall", "analyze", *(str(FIXTURES / n) for n in AGREE)],
                       capture_output=True, text=True, cwd=FIXTURES.parents[1], timeout=60)
    took = time.monotonic() - t0
    assert p.returncode == 0 and p.stdout.count("the same reading as recorded") == 3, p.stdout + p.stderr
    print(f"analyze on 3 recorded runs: {took:.2f}s")
    changed = subprocess.run([sys.executable, "harness/kstall", "analyze",
                              str(FIXTURES / "perf-sigtrap-6.1.192-int3-loop")],
                             capture_output=True, text=True, cwd=FIXTURES.parents[1], timeout=60)
    assert changed.returncode == 1 and "read differently today" in changed.stdout  # recorded before its signature
    bad = subprocess.run([sys.executable, "harness/kstall", "analyze", str(tmp_path)], capture_output=True, text=True,
                         cwd=FIXTURES.parents[1], timeout=60)
    assert bad.returncode == 2 and "no readable run.json" in bad.stderr


def _console_run(tmp_path, log: str, recorded_title: str):
    from harness.analysis import console
    text = (FIXTURES / "consoles" / log).read_text(errors="replace")
    first = console.scan(text)[0]
    report = first.to_json() | {"title": recorded_title}
    (tmp_path / "console.log").write_text(text)
    (tmp_path / "run.json").write_text(json.dumps({"reproducer": {"name": "console-trigger"}, "cpus": [],
                                                   "evidence": {"console_reports": [report]}}))
    return first.title


def test_the_console_is_titled_again_and_a_changed_title_is_a_difference(tmp_path):
    title = _console_run(tmp_path, "6.16.12-hung-task.log", "")  # (today's title, to record it as it was)
    _console_run(tmp_path, "6.16.12-hung-task.log", title)
    r = analyze.read(tmp_path)
    assert r.agrees and title in r.titles, r.text()
    _console_run(tmp_path, "6.16.12-hung-task.log", "INFO: task hung in something_else")
    r = analyze.read(tmp_path)
    assert r.differences == [f"console: recorded 'INFO: task hung in something_else', today {title!r}"]


def test_a_verdict_its_own_judge_reached_reads_the_same_when_nothing_changed():
    """bpf-ringbuf on 6.16.12: VULNERABLE by the reproducer's own latency
    measurement, with no CPU culprit: today's reading of its samples (no CPU
    culprit) is the same, not "recorded reserve-latency-stall, today none"."""
    r = analyze.read(FIXTURES / "bpf-ringbuf-6.16.12-rqspinlock")
    assert r.agrees, r.differences
    assert analyze.recorded_culprit({"signature": "reserve-latency-stall", "cpus": [
        {"cpu": 0, "signature": "unknown", "role": "unknown"}]}) == ""
    assert analyze.recorded_culprit({"cpus": [{"cpu": 1, "signature": "hrtimer_cancel_self_deadlock",
                                               "role": "culprit"}]}) == "hrtimer_cancel_self_deadlock"
