# SPDX-License-Identifier: GPL-2.0
"""A kernel detector's report (a hung task, a soft lockup, an RCU stall) is a
candidate, not yet a hang. The guest's detectors are set to speak early (a
hung task after 30 s) so that the hang's tasks and stacks are seen soon;
syzbot's wait far longer before they say anything (140 s). A candidate is
a hang once what it reports has been stuck that long (scaled for the
accelerator, less what the host held the vCPUs back meanwhile); it "went
on" when the kernel stopped saying it while the guest went on: a slow wait,
which a verdict may mention and never calls a hang. The kernel says each
again while it lasts (a blocked task at every check, "blocked for more than
N seconds" counting from its last switch), which is what is followed here;
where it says no duration, the reports' own times (printk's clock) measure
it, an episode ending where they pause or where a count the kernel gives
(an RCU stall's "t=N jiffies") starts again. A report with no rule is a
hang at once. The rules are data: a guest environment's [report.confirm]
(harness/base/guest_env.py ConfirmRule)."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable

from harness.analysis.console import Report, own_lines
from harness.base.guest_env import ConfirmRule
from harness.base.untrusted import num

OPEN, HANG, WENT_ON = "open", "hang", "went on"
# a candidate the kernel has not said again for twice its period (its rule's,
# or the longest gap its reports showed) and this long (guest seconds, the
# guest running on) went on: a detector thread late on a busy guest is no wake-up
QUIET_SLACK_S = 10.0
# a stated duration at least this share of the time between two reports
# more than the last one's, less this slack (seconds: the kernel's rounding,
# the reports' own times), is the same wait: a soft lockup's "stuck for Ns"
# counts 2^30 ns as a second (watchdog.c get_timestamp), 7% slow
CONTINUES_RATE = 0.92
CONTINUES_SLACK_S = 2.0
# the cadence learnt from a wait's reports is at most this many of its rule's
# periods: a window that grew without end would hold a run's kill past its bound
PERIOD_CAP = 3.0
# a gap between two reports of a rule with no stated duration this many
# periods long: the first wait ended, the second is another
EPISODE_GAP = 1.5
MAX_OPEN = 64  # distinct things followed at once; more are the same hang's, said alike
MAX_REPORTS = 32  # of one thing's reports, kept to measure it (the first and the latest)


@dataclass
class Stuck:
    """One thing a detector says is stuck (a task, a CPU, a pool), over its reports."""
    rule: ConfirmRule
    who: str
    first: Report
    first_at: float                 # host seconds of its first report
    first_guest: float | None       # the guest's clock then (its last heartbeat's)
    last_at: float = 0.0
    last_guest: float | None = None
    stated_s: float | None = None   # the latest the kernel said it had been stuck
    reports: list[Report] = field(default_factory=list)  # this episode's, bounded
    said_n: int = 0                 # how often the kernel said it
    state: str = OPEN
    stuck_s: float = 0.0            # how long it was stuck at its last report
    held_s: float = 0.0             # of that, the host held the vCPUs back
    decided_at: float | None = None  # host seconds it became a hang or went on
    # the longest the kernel took to say it again within one wait, while it was open (guest
    # seconds, at most PERIOD_CAP periods): its detector's cadence here, which a busy guest
    # stretches (khungtaskd's 5 s checks came 20.5 s apart, 2026-12-04)
    period_s: float = 0.0
    doc: dict = field(default_factory=dict)  # shared with its reports' run.json entries

    def said(self, r: Report, now: float, guest: float | None) -> None:
        gap = self._span_to(r, guest, now)
        if not self.rule.stated and self.reports and gap > EPISODE_GAP * self.rule.repeat_s > 0:
            self.restart(r, now, guest)  # the last wait ended unseen: this is another
        elif self.reports and self.rule.stated and self.state == OPEN:  # said in time: its cadence
            self.period_s = min(max(self.period_s, gap), PERIOD_CAP * self.rule.repeat_s)
        self.last_at, self.last_guest, self.said_n = now, guest, self.said_n + 1
        self.reports = (self.reports + [r])[-MAX_REPORTS:] if len(self.reports) < MAX_REPORTS else \
            [self.reports[0], *self.reports[-(MAX_REPORTS - 2):], r]
        stated = num(r.fields.get(self.rule.stated)) if self.rule.stated else None
        if stated is not None:
            self.stated_s = float(stated)

    def continues(self, r: Report, guest: float | None, now: float) -> bool | None:
        """Whether r is of the same wait as the reports before it: the
        duration the kernel states grew by the time between the two (a wait
        that ended and began again states less). None where the rule states
        no duration, or nothing was said before."""
        stated = num(r.fields.get(self.rule.stated)) if self.rule.stated else None
        if stated is None or self.stated_s is None or not self.reports:
            return None
        span = max(self._span_to(r, guest, now), 0.0)
        return float(stated) >= self.stated_s + CONTINUES_RATE * span - CONTINUES_SLACK_S

    def reopen(self) -> None:
        """It had not gone on: the kernel was late to say it again."""
        self.state, self.decided_at = OPEN, None

    def quiet_after(self) -> float:
        """Seconds without a word of it, the guest going on, after which it went on."""
        return 2 * max(self.rule.repeat_s, self.period_s) + QUIET_SLACK_S

    def restart(self, r: Report, now: float, guest: float | None) -> None:
        self.first, self.first_at, self.first_guest, self.reports = r, now, guest, []
        self.state, self.decided_at, self.stated_s, self.period_s = OPEN, None, None, 0.0

    def _span_to(self, r: Report, guest: float | None, now: float) -> float:
        """From the episode's last report to r: printk's clock where both
        have it, else the heartbeats', else the host's."""
        last = self.reports[-1] if self.reports else self.first
        if r.guest_time is not None and last.guest_time is not None:
            return r.guest_time - last.guest_time
        if guest is not None and self.last_guest is not None:
            return guest - self.last_guest
        return now - self.last_at

    def measure(self, now: float, host_delay: Callable[[float, float], float | None] | None) -> None:
        """How long it has been stuck, and whether that is a hang."""
        if self.state != OPEN:
            return
        if self.rule.hang_s <= 0:  # no rule: a hang at once, whatever the host did
            self.state, self.decided_at = HANG, now
            self._doc()
            return
        if self.rule.grows:
            self._episode_by_count()
        if self.stated_s is not None:
            self.stuck_s = self.stated_s
        else:
            first, last = self.reports[0] if self.reports else self.first, self.reports[-1] if self.reports else None
            if last is not None and first.guest_time is not None and last.guest_time is not None:
                span = last.guest_time - first.guest_time
            elif self.last_guest is not None and self.first_guest is not None:
                span = self.last_guest - self.first_guest
            else:
                span = self.last_at - self.first_at
            self.stuck_s = self.rule.after_s + max(span, 0.0)
        held = host_delay(self.last_at - self.stuck_s, self.last_at) if host_delay is not None else None
        self.held_s = (held or 0.0) / 1e3
        if self.stuck_s - self.held_s >= self.rule.hang_s:
            self.state, self.decided_at = HANG, now
        self._doc()

    def _episode_by_count(self) -> None:
        """Where the count the kernel gives in a report's lines (grows) fell
        between two reports, a new wait began: the episode starts there."""
        counts = [_count(r, self.rule.grows) for r in self.reports]
        start = 0
        for i in range(1, len(counts)):
            a = next((c for c in reversed(counts[:i]) if c is not None), None)
            if a is not None and (b := counts[i]) is not None and b <= a:
                start = i
        if start:
            self.first, self.reports = self.reports[start], self.reports[start:]

    def quiet(self, now: float, guest: float | None) -> None:
        """Not said again while the guest went on: it went on."""
        if self.state != OPEN or guest is None or self.last_guest is None:
            return
        if guest - self.last_guest > self.quiet_after():
            self.state, self.decided_at = WENT_ON, now
            self._doc()

    def due_in(self, now: float) -> float:
        """Host seconds until it would be a hang, were it still stuck (0: is one)."""
        if self.state != OPEN:
            return 0.0
        return max(self.rule.hang_s + self.held_s - (self.stuck_s + now - self.last_at), 0.0)

    def _doc(self) -> None:
        self.doc.update({"who": f"{self.rule.who} {self.who}".strip(), "state": self.state,
                         "stuck_s": round(self.stuck_s, 1),
                         "held_s": round(self.held_s, 1), "hang_s": self.rule.hang_s,
                         "syzbot_s": self.rule.syzbot_s, "reports": self.said_n})


def _count(r: Report, pattern: str) -> int | None:
    """The count a report's own lines give (its rule's grows: a group n)."""
    rx = re.compile(pattern)
    lines = own_lines(r.excerpt, r.patterns, r.end) if r.patterns else r.excerpt
    for line in lines[:40]:
        if m := rx.search(line):
            return num(m.group("n"))
    return None


class Candidates:
    """The detectors' reports of one run, followed thing by thing."""

    def __init__(self, rules: tuple[ConfirmRule, ...],
                 host_delay: Callable[[float, float], float | None] | None = None) -> None:
        self.rules = {r.name: r for r in rules}
        self.host_delay = host_delay  # (t0, t1) -> ms the host held a vCPU back then
        self.things: dict[tuple[str, str], Stuck] = {}
        self.before_program = 0  # reports that came before the program started
        self.boots: set[tuple[str, str, str]] = set()  # the tasks they were of: the boot's, whenever said again
        self.granted_s = 0.0  # the most held_s() has given the run's bound

    def followed(self, name: str) -> bool:
        return name in self.rules

    def _task(self, r: Report) -> tuple[str, str, str] | None:
        """A report of one task: its detector, pid and name (a CPU or a pool
        is no one's: the program may stall it later on its own)."""
        rule = self.rules.get(r.name)
        if rule is None or rule.who != "pid":
            return None
        return r.name, str(r.fields.get("pid", "?")), str(r.fields.get("task", ""))

    def of_boot(self, r: Report) -> None:
        """A report before the program started: its task stays the boot's (a
        task stuck since the boot, said again later, is not the program's)."""
        self.before_program += 1
        r.before_program = True
        if (task := self._task(r)) is not None:
            self.boots.add(task)

    def feed(self, r: Report, now: float, guest: float | None) -> bool:
        """A report of a detector: whether it is a new thing's first (keep it)."""
        rule = self.rules.get(r.name)
        if rule is None:
            return False
        if self._task(r) in self.boots:
            self.of_boot(r)
            return False
        who = str(r.fields.get(rule.who, "?"))[:64] if rule.who else ""
        key = (r.name, who)
        s = self.things.get(key)
        new = s is None
        if s is None:
            if len(self.open) >= MAX_OPEN:
                return False
            s = self.things[key] = Stuck(rule, who, r, now, guest)
        else:
            same = s.continues(r, guest, now)
            if s.state == WENT_ON and same:
                s.reopen()  # said late, of the same wait: it never went on (its first report's time kept)
            elif s.state == WENT_ON or (s.state == OPEN and same is False):
                s.restart(r, now, guest)  # stuck again after it went on, or it switched between: a new wait
                new = True
        s.said(r, now, guest)
        s.measure(now, self.host_delay)
        r.stuck = s.doc
        return new

    def update(self, now: float, guest: float | None) -> None:
        for s in self.things.values():
            s.quiet(now, guest)
            if s.state == OPEN and s.rule.grows:  # its reports' lines are in by now
                s.measure(now, self.host_delay)

    @property
    def hang(self) -> Stuck | None:
        """The first thing stuck long enough to be a hang."""
        hangs = [s for s in self.things.values() if s.state == HANG]
        return min(hangs, key=lambda s: s.decided_at or 0.0) if hangs else None

    @property
    def open(self) -> list[Stuck]:
        return [s for s in self.things.values() if s.state == OPEN]

    @property
    def went_on(self) -> list[Stuck]:
        return [s for s in self.things.values() if s.state == WENT_ON]

    def due_in(self, now: float) -> float:
        """Host seconds until the latest open candidate would be a hang (0: none open)."""
        return max((s.due_in(now) for s in self.open), default=0.0)

    def held_s(self) -> float:
        """The most the host held an open candidate back: the run's bound grows
        by it, and never shrinks back when the candidate is decided (the
        bound would fall behind the clock, and a run whose report had just
        become a hang, or a slow wait, would end as the host's timeout)."""
        self.granted_s = max(self.granted_s, max((s.held_s for s in self.open), default=0.0))
        return self.granted_s

    def to_json(self) -> list[dict]:
        """Each thing, the hangs first in the order they became hangs (the
        first is the one a run it ended is named after), then the rest as seen."""
        hangs = sorted((s for s in self.things.values() if s.state == HANG), key=lambda s: s.decided_at or 0.0)
        rest = [s for s in self.things.values() if s.state != HANG]
        return [{"report": s.rule.name, "title": s.first.title, **s.doc} for s in [*hangs, *rest]]
