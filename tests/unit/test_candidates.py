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
    assert s.period_s >= min(cadence, 3 * s.rule.repeat_s) - 0.01 and s.quiet_after() > 2 * min(cadence, 30)
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


def blocked(t: float, secs: int, func: str, pid: int = 263) -> console.Report:
    """A hung-task report of pid, its stack in func, at printk time t."""
    lines = [f"INFO: task syz:{pid} blocked for more than {secs} seconds.", "      Not tainted 6.1.0-47-amd64 #1",
             f"task:syz             state:D stack:0     pid:{pid}  ppid:1      flags:0x00004004",
             "Call Trace:", " <TASK>", " __schedule+0x3a0/0xc90", " schedule+0x5a/0xd0",
             " jbd2_log_wait_commit+0x10/0x20 [jbd2]", f" {func}+0x1d0/0x3c0 [ext4]", " __x64_sys_fsync+0x34/0x60",
             " do_syscall_64+0x58/0xc0", " entry_SYSCALL_64_after_hwframe+0x64/0xce", " </TASK>"]
    [r] = console.scan("".join(f"[{t:12.6f}] {x}\n" for x in lines), P)
    return r


def follow(c: Candidates, events: list[tuple[float, console.Report]], until: float) -> list[bool]:
    """Each report fed at its guest time, heartbeats every second between (host = 1000 + guest)."""
    kept, g = [], 0.0
    for t, r in events:
        while g + 1 < t:
            g += 1
            c.update(1000 + g, g)
        kept.append(c.feed(r, 1000 + t, t))
        g = t
    while g + 1 < until:
        g += 1
        c.update(1000 + g, g)
    return kept


def test_a_new_wait_said_while_the_last_is_still_followed_is_another_wait():
    """Review: said at 100 s (40) and 20.5 s late at 120.5 s (60), the
    window grew to 51 s; the task woke, blocked in another function, and
    was said at 160 s stating 34 s, less than the 39.5 s between: another
    wait. Merged into the first, its hang was titled after the first's
    function."""
    c = Candidates(guest_env.get("syzkaller").confirm_for("kvm"))
    ev = [(100.0, blocked(100.0, 40, "ext4_sync_file")), (120.5, blocked(120.5, 60, "ext4_sync_file"))]
    ev += [(160.0 + 5 * i, blocked(160.0 + 5 * i, 34 + 5 * i, "ext4_evict_inode")) for i in range(23)]
    kept = follow(c, ev, 160 + 5 * 22 + 1)
    assert kept[2] is True, "the second wait's first report is a new thing's first"
    assert c.hang is not None and "ext4_evict_inode" in c.hang.first.title and c.hang.first_at == 1160.0


def test_a_soft_lockup_said_late_is_the_same_lockup_though_its_seconds_run_slow():
    """A soft lockup's "stuck for Ns" counts 2^30 ns as a second: 7% slower
    than printk's clock. Said at 100, 120 and, its timer late, at 180 s,
    the same CPU stuck since 76 s keeps its first report."""
    c = Candidates(guest_env.get("syzkaller").confirm_for("kvm"))

    def lockup(t: float) -> console.Report:
        secs = int(t * 1e9) // (1 << 30) - int(76.0 * 1e9) // (1 << 30)
        [r] = console.scan(f"[{t:12.6f}] watchdog: BUG: soft lockup - CPU#1 stuck for {secs}s! [syz:263]\n", P)
        return r
    follow(c, [(t, lockup(t)) for t in (100.0, 120.0, 180.0)], 181)
    assert c.things[("soft-lockup", "1")].first_at == 1100.0


def test_the_window_a_wait_is_followed_in_stays_bounded_however_late_the_kernel_speaks():
    """Review: each late report, taken into the cadence, doubled the window
    (41 s, then 93 s late), so a slow wait held the kill past the run's
    bound. The cadence is learnt from reports said in time, at most three
    of the rule's periods; and a slow wait of KVM's time that woke just
    before it was a hang goes on, and its tasks die, within the bound."""
    env = guest_env.get("syzkaller")
    c = Candidates(env.confirm_for("kvm"))
    ev, t, secs = [], 100.0, 30
    for gap in (5, 5, 41, 5, 93, 5):
        ev.append((t, blocked(t, secs, "f")))
        t, secs = t + gap, secs + gap
    follow(c, ev + [(t, blocked(t, secs, "f"))], t + 1)
    s = c.things[("hung-task", "263")]
    rule = env.confirm_for("kvm")[0]
    assert s.quiet_after() <= 2 * 3 * rule.repeat_s + 10
    # said from the program's time on (its kill held), 60 s late once, the last at 139 s of 140
    rules = env.confirm_for("kvm")
    bound = 60 + env.detect_s + max(r.hang_s for r in rules) + env.dying_for("kvm")
    c = Candidates(rules)
    ev, t, secs = [], 40.0, 30
    while secs < 139:
        ev.append((t, blocked(t, secs, "f")))
        gap = 60 if t == 50.0 else min(5, 139 - secs)
        t, secs = t + gap, secs + gap
    follow(c, ev + [(t, blocked(t, secs, "f"))], 400)
    s = c.things[("hung-task", "263")]
    assert s.state == "went on" and (s.decided_at or 0) - 1000 + env.dying_for("kvm") < bound
