# SPDX-License-Identifier: GPL-2.0
"""The console-report corpus: real recorded consoles, each report's kind and
syzbot-style title against tests/fixtures/consoles/golden.toml; and the title's
function taken from the same real reports made messy the ways consoles are."""
import random
import tomllib

import pytest
from recorded import FIXTURES

from harness.analysis import console
from harness.reports import views

CONSOLES = FIXTURES / "consoles"
GOLDEN = tomllib.loads((CONSOLES / "golden.toml").read_text())["log"]


def scan(name):
    return console.scan((CONSOLES / name).read_text(errors="replace"))


@pytest.mark.parametrize("log", GOLDEN, ids=[g["file"] for g in GOLDEN])
def test_recorded_console_gives_its_golden_reports(log):
    got = [[r.kind, r.name, r.title] for r in scan(log["file"])]
    assert got == log["reports"]


def test_the_corpus_is_real_and_large_enough():
    reports = [r for g in GOLDEN for r in g["reports"]]
    assert len(reports) >= 12
    assert all(g["recorded"].startswith("kstall ") for g in GOLDEN)
    kinds = {r[1] for r in reports}
    assert {"hung-task", "soft-lockup", "rcu-stall", "csd-lock-timeout", "hard-lockup", "workqueue-lockup"} <= kinds


def _hung_task_lines():
    text = (CONSOLES / "7.3.4-hung-task.log").read_text().splitlines()
    return text[:text.index(next(l for l in text if l.strip().endswith("</TASK>"))) + 1]


def _title(lines):
    rs = console.scan("\n".join(lines))
    return rs[0].title


def test_title_survives_interleaved_cpus_and_garbled_timestamps():
    lines = _hung_task_lines()
    base = _title(lines)
    assert base == "INFO: task hung in anon_pipe_write"
    other = (CONSOLES / "6.16.12-rcu-stall.log").read_text().splitlines()
    # another CPU's output that is not frames or trace markers (without printk
    # caller ids those cannot be told apart from the report's own)
    noise = [l for l in other if not any(k in l for k in ("RIP:", "+0x", "TASK>", "IRQ>", "Call Trace"))][:40]
    rng = random.Random(13)
    messy = [lines[0]]
    for line in lines[1:]:
        if rng.random() < 0.5:
            messy.append(rng.choice(noise))
        messy.append(line)
    assert _title(messy) == base
    # the UART drops and doubles digits of timestamps; some lines have none
    garbled = [lines[0]] + [l.replace("[    6.", "[    66.", 1) if i % 3 else l.split("] ", 1)[-1]
                            for i, l in enumerate(lines[1:])]
    assert _title(garbled) == base


def test_title_with_old_style_frames_and_unreliable_ones():
    lines = _hung_task_lines()
    old = []
    for line in lines:
        body, _ = console.strip_prefix(line)
        if console.frame_function(line):
            old.append(f"[    6.98] [<ffffffff8110abcd>] {body.strip()}")
        else:
            old.append(line)
    assert _title(old) == "INFO: task hung in anon_pipe_write"
    # an unreliable frame above the real one is passed over
    i = next(i for i, l in enumerate(lines) if "anon_pipe_write" in l)
    assert _title(lines[:i] + ["[    6.98]  ? pipe_lock_nested+0x1/0x2"] + lines[i:]) == \
        "INFO: task hung in anon_pipe_write"


def test_printk_caller_ids_keep_other_tasks_frames_out():
    lines = _hung_task_lines()
    tagged = [l.replace("] ", "][  T104] ", 1) for l in lines]
    i = next(i for i, l in enumerate(tagged) if "schedule_preempt_disabled" in l)
    intruder = "[    6.984900][    C1]  smp_call_function_single+0x9d/0x140"  # a frame, but CPU1's
    assert _title(tagged[:i] + [intruder] + tagged[i:]) == "INFO: task hung in anon_pipe_write"


def test_report_kinds_without_a_recording_here():
    # formats of reports Debian's kernels do not print (lockdep, might_sleep,
    # workqueue watchdog) or that modern kernels dropped (spinlock lockup)
    pats = console.load_patterns()
    cases = {
        "[ 40.1] BUG: workqueue lockup - pool cpus=0 node=0 flags=0x0 nice=0 stuck for 31s!":
            ("stall", "workqueue-lockup", "BUG: workqueue lockup"),
        "[ 12.3] csd: CSD lock (#1) got unstuck on CPU#02, CPU#01 released the lock.":
            ("stall", "csd-lock-unstuck", "INFO: csd lock got unstuck"),
        # a lockdep report without its lines is titled by its first line, as syzbot does
        "[  3.0] WARNING: possible circular locking dependency detected":
            ("warning", "lockdep-deadlock", "WARNING: possible circular locking dependency detected"),
        "[  3.0] WARNING: possible recursive locking detected":
            ("warning", "lockdep-deadlock", "WARNING: possible recursive locking detected"),
        # a report whose stack is missing is "in corrupted"
        "[  2.0] BUG: scheduling while atomic: kworker/0:1/12/0x00000002":
            ("warning", "scheduling-while-atomic", "BUG: scheduling while atomic in corrupted"),
        "[  9.0] BUG: spinlock lockup suspected on CPU#1, perf/77":
            ("stall", "spinlock", "BUG: spinlock lockup suspected in corrupted"),
        "[  7.0] INFO: task kworker/u8:2:55 blocked for more than 122 seconds.":
            ("stall", "hung-task", "INFO: task hung in corrupted"),
        "[  7.0] rcu: INFO: rcu_preempt detected expedited stalls on CPUs/tasks: { 1-... } 21 jiffies s: 77 "
        "root: 0x2/.":
            ("stall", "rcu-stall", "INFO: rcu detected stall in corrupted"),
    }
    for line, want in cases.items():
        r = console.match_line(line, pats)
        assert r is not None and (r.kind, r.name, r.title) == want, line
    hung = console.match_line("[  7.0] INFO: task kworker/u8:2:55 blocked for more than 122 seconds.", pats)
    assert hung.fields["task"] == "kworker/u8:2" and hung.fields["pid"] == "55"


def test_titles_are_counted_for_reports():
    reports = [r.to_json() for r in scan("6.16.12-2cpu-perf-freeze.log")]
    t = {x["title"]: x["count"] for x in console.titles(reports)}
    assert t["BUG: soft lockup in smp_call_function"] == 5
    assert "INFO: rcu detected stall in perf_ioctl" in views.titles_text(console.titles(reports))
