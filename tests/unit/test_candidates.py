# SPDX-License-Identifier: GPL-2.0
"""A kernel detector's report is a candidate hang until what it reports was
stuck syzbot's time (harness/analysis/candidates.py): the cases a review
found it wrong in, each on the detector's own words."""
from __future__ import annotations

import pytest

from harness.analysis import console
from harness.analysis.candidates import MAX_OPEN, Candidates
from harness.base import guest_env

P = console.default_patterns()


def reports(text: str) -> list[console.Report]:
    """The console's reports, each with its own lines (as the watch's Tracker gathers them)."""
    return console.scan(text, P)


def feed_all(c: Candidates, text: str, step: float = 1.0) -> None:
    """Each report fed at its printk time, heartbeats (guest time) going on with it."""
    for r in reports(text):
        t = r.guest_time or 0.0
        c.update(1000 + t, t)
        c.feed(r, 1000 + t, t)
        c.update(1000 + t + step, t + step)


def test_a_report_with_no_rule_is_a_hang_at_once_even_on_a_busy_host():
    """A hard lockup has no [report.confirm] row: a hang at once. The host's
    delay over a window of no length (padded by the sampling period) made
    it 'open', then 'went on': a slow wait."""
    rules = guest_env.get("syzkaller").confirm_for("tcg")
    c = Candidates(rules + (guest_env.ConfirmRule("hard-lockup", 0, 0, 0),), host_delay=lambda t0, t1: 3.0)
    [r] = reports("[  50.0] NMI watchdog: Watchdog detected hard LOCKUP on cpu 1\n")
    c.feed(r, 1050.0, 50.0)
    assert c.hang is not None and c.hang.rule.name == "hard-lockup"


RCU = """[  {t}.0] rcu: INFO: rcu_preempt self-detected stall on CPU
[  {t}.0] rcu: \t1-....: (20999 ticks this GP) idle=4a4/1/0x4000000000000000 softirq=1/1 fqs=5000
[  {t}.0] \t(t={j} jiffies g=5905 q=81 ncpus=2)
[  {t}.0] CPU: 1 PID: 99 Comm: syz Not tainted 6.1.0-47-amd64 #1
"""


def test_separate_rcu_stalls_are_not_added_into_one_and_one_that_goes_on_is_a_hang():
    """Three stalls each reported once (t= restarts at the timeout each
    time), 60-70 s apart: each was a wait of about 21 s, never a hang. One
    stall reported again and again, its t= growing, is one."""
    rules = guest_env.get("syzkaller").confirm_for("kvm")  # a hang after 100 s
    c = Candidates(rules)
    feed_all(c, "".join(RCU.format(t=t, j=5250) for t in (21, 81, 150)))
    assert c.hang is None and all(s.stuck_s < 100 for s in c.things.values()), \
        [(s.state, s.stuck_s) for s in c.things.values()]
    c = Candidates(rules)
    feed_all(c, "".join(RCU.format(t=t, j=(t * 250)) for t in (21, 84, 147)))
    assert c.hang is not None and c.hang.stuck_s >= 100, [(s.state, s.stuck_s) for s in c.things.values()]


def test_waits_that_went_on_never_crowd_out_a_later_hang():
    """Sixty-four short hung-task waits that went on filled the table and the
    65th task, a real hang, was never followed."""
    rules = guest_env.get("syzkaller").confirm_for("kvm", hang_after=60)
    c = Candidates(rules)
    t = 0.0
    for pid in range(100, 100 + MAX_OPEN):
        [r] = reports(f"[{t:8.1f}] INFO: task syz:{pid} blocked for more than 31 seconds.\n")
        c.feed(r, 1000 + t, t)
        t += 45.0
        c.update(1000 + t, t)  # not said again: it went on
    assert len(c.went_on) == MAX_OPEN and not c.open
    for secs in (31, 61):
        [r] = reports(f"[{t + secs:8.1f}] INFO: task syz:9999 blocked for more than {secs} seconds.\n")
        c.feed(r, 1000 + t + secs, t + secs)
    assert c.hang is not None and c.hang.who == "9999"


def test_the_boots_environment_steps_do_not_start_the_program():
    """A cold boot's agent says how its environment's steps went before its
    gate ("# kstall-env: nodes: ..."): those lines started the program's
    clock, and the boot's detector reports counted as the program's."""
    from harness.guest.agent import AgentChannel
    a = AgentChannel(lambda s: None, 2)
    a.feed("# kstall-env: nodes: 18 device nodes load their modules on first open", 1.0)
    assert a.repro_started_at is None
    a.feed("KTAP version 1", 2.0)
    assert a.repro_started_at == 2.0


def test_the_time_a_killed_task_has_to_die_is_scaled_for_the_accelerator_as_the_detectors_are():
    """A task still there dying_s after the time-up kill is a hang whatever
    its state: under TCG, where an exit's writeback takes about twice its
    KVM time, the same 35 s would call a task slow to die a hang."""
    env = guest_env.get("syzkaller")
    assert env.dying_for("kvm") == env.dying_s
    scale = dict(env.confirm_scale)["tcg"]
    assert scale > 1 and env.dying_for("tcg") == env.dying_s * scale
    tcg, kvm = env.confirm_for("tcg")[0], env.confirm_for("kvm")[0]
    assert env.dying_for("tcg") / env.dying_for("kvm") == tcg.hang_s / kvm.hang_s


def hung(t: float, secs: int, pid: int = 263) -> console.Report:
    [r] = reports(f"[{t:12.6f}] INFO: task jbd2/vdb-8:{pid} blocked for more than {secs} seconds.\n")
    return r


@pytest.mark.parametrize("cadence", [20.47, 35.0])
def test_a_task_the_kernel_says_again_late_never_went_on_and_keeps_its_first_report(cadence):
    """e7c786ece54b on 6.1.192 (2026-12-04): khungtaskd's checks came 20.5 s
    apart, not 5, so jbd2's report at 172.97 s came just after the quiet
    window of the one at 152.5 s had taken it for gone on, and it was
    counted afresh from then: past the time its kill was held for, so the
    kill came and the run ended "still stuck". A report whose stated time
    grew by the time between the two is the same wait: it never went on,
    and the later gaps widen the window it is followed in (a cadence
    slower still, 35 s, past the rule's window, is followed the same)."""
    c = Candidates(guest_env.get("syzkaller").confirm_for("tcg"))
    times = [(91.05, 40), (152.5, 40), (152.5 + cadence, round(40 + cadence)),
             (152.5 + 2 * cadence, round(40 + 2 * cadence))]
    for i, (t, secs) in enumerate(times):
        c.feed(hung(t, secs), 1000 + t, t)
        if i == 1:
            first = c.open[0].first_at
        end = times[i + 1][0] if i + 1 < len(times) else t + 40
        for g in range(int(t) + 1, int(end) + 1):  # heartbeats every second until the next report
            c.update(1000 + g, float(g))
        if i == 0:
            assert not c.open and c.went_on, "not said again for a minute: it went on"
    [s] = c.open
    assert s.first_at == first and s.stated_s == times[-1][1], "the wait of 152.5 s, followed on"
    assert s.period_s >= cadence - 0.01 and s.quiet_after() > 2 * cadence
    last = times[-1][0]
    c.update(1000 + last + s.quiet_after() + 1, last + s.quiet_after() + 1)
    assert not c.open and c.went_on, "then silent for twice its cadence and the slack: it went on"


def test_a_wait_that_ended_and_began_again_is_counted_afresh():
    """Said again after it went on with less time than the gap: the task
    switched in between, so this is another wait, its first report now."""
    c = Candidates(guest_env.get("syzkaller").confirm_for("tcg"))
    c.feed(hung(100.0, 40), 1100.0, 100.0)
    c.update(1150.0, 150.0)
    assert c.went_on
    assert c.feed(hung(160.0, 45), 1160.0, 160.0), "a new wait: its report is kept as a first"
    [s] = c.open
    assert s.first_at == 1160.0 and s.stated_s == 45
