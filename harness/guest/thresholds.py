# SPDX-License-Identifier: GPL-2.0
"""When a silence is a freeze and a still count is stuck: the watch's limits
as the host's own delay of the guest widens them, and as a false alarm
doubles them (rearm). A part of Watch (harness/guest/watch.py), which has
the agent's clocks, the limits and the host's delay reading."""
from __future__ import annotations

import math
import time
from harness.analysis.outcome import Outcome, OutcomeKind
from harness.guest.agent import AgentChannel
from harness.guest.limits import Calls, Limits


class Thresholds:
    agent: AgentChannel
    limits: Limits
    calls: Calls
    looked_s: float
    suspected: bool
    _returned_at: float | None

    def freeze_after(self, now: float) -> float:
        """The silence that is a freeze now: the floor plus what the host held
        the guest back by since the last heartbeat, within freeze_after; the
        fixed freeze_after without a floor or a reading of the host."""
        L, last = self.limits, self.agent.last_hb_at
        if L.freeze_floor is None or self.calls.host_delay is None or last is None:
            return L.freeze_after
        if now - last < L.freeze_floor:  # no freeze yet, whatever the host did
            return L.freeze_floor
        held = self.calls.host_delay(last, now)
        return L.freeze_after if held is None else min(L.freeze_after, L.freeze_floor + held / 1e3)

    def stuck_after(self, now: float) -> float:
        """The stillness of the progress count that is stuck now: its limit,
        plus what the host held the guest back by since the count last moved
        (beside another kstall's guests, a kselftest runner's start took
        more than perf-refresh's 3 s and was called stuck)."""
        L, since = self.limits, self.agent.count_changed_at
        if self.calls.host_delay is None or since is None or math.isinf(L.stuck_after):
            return L.stuck_after
        held = self.calls.host_delay(since, now)
        return L.stuck_after + (held or 0.0) / 1e3

    def host_share(self, outcome: Outcome) -> float | None:
        """Of a freeze's silence or a stuck count's stillness, the share the
        host held one of the guest's threads back (0-1); None: not known. The
        limits already allow for that wait, but a program whose every step
        needs its vCPUs together is slowed by more than any one's wait."""
        a = self.agent
        since = {OutcomeKind.STUCK: a.count_changed_at, OutcomeKind.FREEZE: a.last_hb_at}.get(outcome.kind)
        if since is None or self.calls.host_delay is None or outcome.at <= since:
            return None
        held = self.calls.host_delay(since, outcome.at)
        return None if held is None else min(1.0, held / 1e3 / (outcome.at - since))

    def rearm(self, widen: bool = True) -> None:
        """After a false alarm: start the freeze and stuck clocks afresh, with
        doubled thresholds unless widen is false."""
        now = time.monotonic()
        if self._returned_at is not None:
            self.looked_s += now - self._returned_at
            self._returned_at = None
        self.agent.restart_clocks(now)
        if widen:
            self.limits.stuck_after *= 2
            self.limits.freeze_after *= 2
            if self.limits.freeze_floor is not None:
                self.limits.freeze_floor *= 2
        self.suspected = False

    def rearm_for(self, seconds: float) -> None:
        """After a look whose finding waits for the kernel's own report: the
        clocks afresh, and only a silence of that many seconds more (fixed,
        no floor) is a freeze now."""
        self.rearm(widen=False)
        self.limits.freeze_after, self.limits.freeze_floor = seconds, None

    def unexplained_gap(self) -> float | None:
        """The longest heartbeat gap less what the host held the guest back
        by meanwhile: how long a guest that went on fell silent by itself,
        which the freeze floor must stay above. Only gaps the host was read
        over count (the others are held to the fixed ceiling); None: none."""
        if self.calls.host_delay is None:
            return None
        worst = None
        for t0, t1 in self.agent.long_gaps:
            if (held := self.calls.host_delay(t0, t1)) is not None:
                worst = max(worst or 0.0, t1 - t0 - held / 1e3)
        return None if worst is None else round(worst, 3)
