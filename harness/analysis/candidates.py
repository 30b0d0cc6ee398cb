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
N seconds" counting from its last switch), which is what is followed here.
The rules are data: a guest environment's [report.confirm]
(harness/base/guest_env.py ConfirmRule)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from harness.analysis.console import Report
from harness.base.guest_env import ConfirmRule
from harness.base.untrusted import num

OPEN, HANG, WENT_ON = "open", "hang", "went on"
# a candidate the kernel has not said again for twice its period and this
# long (guest seconds, the guest running on) went on: a detector thread late
# on a busy guest is no wake-up
QUIET_SLACK_S = 10.0
MAX_THINGS = 64  # distinct things followed; more are the same hang's, said alike


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
    reports: int = 0
    state: str = OPEN
    stuck_s: float = 0.0            # how long it was stuck at its last report
    held_s: float = 0.0             # of that, the host held the vCPUs back
    decided_at: float | None = None  # host seconds it became a hang or went on
    doc: dict = field(default_factory=dict)  # shared with its reports' run.json entries

    def said(self, r: Report, now: float, guest: float | None,
             host_delay: Callable[[float, float], float | None] | None) -> None:
        self.last_at, self.last_guest, self.reports = now, guest, self.reports + 1
        stated = num(r.fields.get(self.rule.stated)) if self.rule.stated else None
        if stated is not None:
            self.stated_s = float(stated)
            self.stuck_s = self.stated_s
        else:
            span = (guest - self.first_guest) if guest is not None and self.first_guest is not None \
                else now - self.first_at
            self.stuck_s = self.rule.after_s + max(span, 0.0)
        held = host_delay(now - self.stuck_s, now) if host_delay is not None else None
        self.held_s = (held or 0.0) / 1e3
        if self.state == OPEN and self.stuck_s - self.held_s >= self.rule.hang_s:
            self.state, self.decided_at = HANG, now
        self._doc()

    def quiet(self, now: float, guest: float | None) -> None:
        """Not said again while the guest went on: it went on."""
        if self.state != OPEN or guest is None or self.last_guest is None:
            return
        if guest - self.last_guest > 2 * self.rule.repeat_s + QUIET_SLACK_S:
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
                         "syzbot_s": self.rule.syzbot_s, "reports": self.reports})


class Candidates:
    """The detectors' reports of one run, followed thing by thing."""

    def __init__(self, rules: tuple[ConfirmRule, ...],
                 host_delay: Callable[[float, float], float | None] | None = None) -> None:
        self.rules = {r.name: r for r in rules}
        self.host_delay = host_delay  # (t0, t1) -> ms the host held a vCPU back then
        self.things: dict[tuple[str, str], Stuck] = {}
        self.before_program = 0  # reports that came before the program started

    def followed(self, name: str) -> bool:
        return name in self.rules

    def feed(self, r: Report, now: float, guest: float | None) -> bool:
        """A report of a detector: whether it is a new thing's first (keep it)."""
        rule = self.rules.get(r.name)
        if rule is None:
            return False
        who = str(r.fields.get(rule.who, "?"))[:64] if rule.who else ""
        s = self.things.get((r.name, who))
        new = s is None
        if s is None:
            if len(self.things) >= MAX_THINGS:
                return False
            s = self.things[(r.name, who)] = Stuck(rule, who, r, now, guest)
        if s.state == WENT_ON:  # stuck again after it went on: a new wait, counted afresh
            s.state, s.first, s.first_at, s.first_guest, s.decided_at = OPEN, r, now, guest, None
            new = True
        s.said(r, now, guest, self.host_delay)
        r.stuck = s.doc
        return new

    def update(self, now: float, guest: float | None) -> None:
        for s in self.things.values():
            s.quiet(now, guest)

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

    def to_json(self) -> list[dict]:
        return [{"report": s.rule.name, "title": s.first.title, **s.doc} for s in self.things.values()]
