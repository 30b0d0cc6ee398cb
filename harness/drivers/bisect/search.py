# SPDX-License-Identifier: GPL-2.0
"""The search behind `kstall bisect`: ordered candidates, old and new states.

Like git's old/new terms, a bisection does not care which way the bug went:
the old end's state ("reproduces" or "does not") is one term, the new end's
the other, and the search finds the first candidate in the new state. A
regression hunt has old = does not reproduce; a fix hunt has old = reproduces.

Both ends are tested first (ktest's BISECT_CHECK), an end that ends in
ERROR twice: if they agree there is nothing to find. A clean step the host
starved (Step.unsure) is confirmed before an answer rests on it: the clean
end when both ends are clean, else the clean side of the boundary. That one
is enough while the bug is in a range of versions: an affected version
wrongly clean moves the boundary past itself, and every version on the clean
side of that wrong boundary up to it is affected too, the one next to the
boundary with them. A step that can not be judged (ERROR, INCONCLUSIVE, a
different crash) is skipped and a neighbour tried instead; too many ERRORs
end the bisection with the reason. Every step is recorded as it completes so
an interrupted bisection resumes where it stopped.
"""
from __future__ import annotations

import dataclasses
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from harness.base.procs import Interrupted

REPRODUCES, CLEAN, SKIP = "reproduces", "clean", "skip"


@dataclass
class Step:
    candidate: str
    state: str               # reproduces | clean | skip
    verdict: str
    line: str = ""
    p_miss: str = ""
    seconds: float = 0.0
    runs: list[str] = field(default_factory=list)  # run directories
    count: int = 0
    error: bool = False      # an ERROR verdict (counts toward giving up)
    unsure: bool = False     # clean by runs the host starved: confirmed before an answer rests on it
    # git bisections: the commit, and how long its build took (0 when cached)
    commit: str | None = None
    subject: str | None = None
    build_s: float | None = None
    build_cached: bool | None = None

    def to_json(self, base: Path | None = None) -> dict:
        """base: the bisection's directory, which its run directories are
        named from: it is renamed when the bisection ends (.NAME.incomplete
        to NAME) and may be moved, so a name from / would point nowhere. A
        run elsewhere is named from /, never from the working directory."""
        d = asdict(self)
        if base is not None:
            home = base.resolve()  # a step process names its runs through the resolved state path
            d["runs"] = [os.path.relpath(p, home) if (p := Path(r).resolve()).is_relative_to(home) else str(p)
                         for r in self.runs]
        return d

    @classmethod
    def from_json(cls, d: dict, base: Path) -> "Step":
        """A step as to_json(base) wrote it, its run directories found again
        under base, from /; an older record's runs named inside the
        bisection's .NAME.incomplete are found under NAME."""
        home = base.resolve()
        kept = f".{home.name}.incomplete"
        runs = []
        for r in d.get("runs", []):
            p = Path(r)
            if kept in p.parts:
                p = Path(*p.parts[p.parts.index(kept) + 1:])
            runs.append(str(home / p))
        return dataclasses.replace(cls(**d), runs=runs)


@dataclass
class Outcome:
    direction: str           # regression | fix | none
    last_old: str | None = None
    first_new: str | None = None
    skipped_between: list[str] = field(default_factory=list)
    message: str = ""


class TooManyErrors(RuntimeError):
    pass


class Bisection:
    def __init__(self, candidates: list[str], test: Callable[[str], Step], done: dict[str, Step] | None = None,
                 prefetch: Callable[[list[str]], None] | None = None, on_step: Callable[[Step], None] | None = None,
                 max_errors: int = 3, confirm: Callable[[Step], Step] | None = None) -> None:
        if len(candidates) < 2:
            raise ValueError("a bisection needs at least two candidates")
        self.c = candidates
        self.test = test
        self.steps: dict[str, Step] = dict(done or {})
        self.prefetch = prefetch
        self.on_step = on_step
        self.max_errors = max_errors
        self.confirm = confirm
        self.unconfirmed: dict[str, str] = {}  # an unsure clean step whose confirmation could not be judged: why

    def _state(self, candidate: str) -> Step:
        if candidate not in self.steps:
            step = self.test(candidate)
            self.steps[candidate] = step
            if self.on_step:
                self.on_step(step)
            errors = [s for s in self.steps.values() if s.error]
            if len(errors) >= self.max_errors:
                raise TooManyErrors(f"{len(errors)} steps ended in ERROR (last: {errors[-1].candidate}: "
                                    f"{errors[-1].line})")
        return self.steps[candidate]

    def _end(self, candidate: str) -> Step:
        """An end: everything rests on it, so an ERROR there (an emulator
        fault met in every attempt, a QEMU that died) gets one more go."""
        s = self._state(candidate)
        if s.state == SKIP and s.error:
            del self.steps[candidate]
            s = self._state(candidate)
        return s

    def _is(self, i: int, state: str) -> bool:
        return self.c[i] in self.steps and self.steps[self.c[i]].state == state

    def _confirmed(self, i: int) -> Step:
        """Candidate i's step, confirmed if it is clean but unsure (a
        confirmation that can not be judged leaves it as it was)."""
        s = self.steps[self.c[i]]
        if s.state != CLEAN or not s.unsure or self.confirm is None:
            return s
        again = self.confirm(s)
        if again.state == SKIP:  # the answer rests on one run: said in the outcome
            self.unconfirmed[s.candidate] = again.line
            return s
        self.steps[self.c[i]] = again
        if self.on_step:
            self.on_step(again)
        return again

    def _pick(self, lo: int, hi: int) -> int | None:
        """The untested candidate in (lo, hi) nearest the middle."""
        mid = (lo + hi) / 2
        free = [i for i in range(lo + 1, hi) if self.steps.get(self.c[i]) is None
                or self.steps[self.c[i]].state != SKIP]
        untested = [i for i in free if self.c[i] not in self.steps]
        known = [i for i in free if self.c[i] in self.steps]
        if known:  # resumed: a result already in the range narrows it first
            return min(known, key=lambda i: abs(i - mid))
        return min(untested, key=lambda i: (abs(i - mid), i)) if untested else None

    def _next_candidates(self, lo: int, mid: int, hi: int) -> list[str]:
        """What the step after mid will test either way: fetch both ahead."""
        out = []
        for a, b in ((mid, hi), (lo, mid)):
            i = self._pick(a, b)
            if i is not None:
                out.append(self.c[i])
        return out

    def run(self) -> Outcome:
        if self.prefetch:  # while the ends run: the other end and the first midpoint
            first = self._pick(0, len(self.c) - 1)
            self.prefetch([self.c[-1]] + ([self.c[first]] if first is not None else []))
        old, new = self._end(self.c[0]), self._end(self.c[-1])
        for end, s in (("old", old), ("new", new)):
            if s.state == SKIP:
                return Outcome("none", message=f"the {end} end {s.candidate} could not be judged: {s.line}")
        if old.state == new.state == CLEAN:
            old, new = self._confirmed(0), self._confirmed(len(self.c) - 1)
        if old.state == new.state:
            return self._agree(old.state)
        direction = "regression" if old.state == CLEAN else "fix"
        lo, hi = 0, len(self.c) - 1
        while True:
            while hi - lo > 1:
                i = self._pick(lo, hi)
                if i is None:
                    break
                if self.prefetch and self.c[i] not in self.steps:
                    self.prefetch([self.c[i]] + self._next_candidates(lo, i, hi))
                s = self._state(self.c[i])
                if s.state == old.state:
                    lo = i
                elif s.state == new.state:
                    hi = i
            side = lo if direction == "regression" else hi
            if self._confirmed(side).state != REPRODUCES:
                break
            # the clean side reproduces after all: the boundary is beyond it
            if side in (0, len(self.c) - 1):
                return self._agree(REPRODUCES)
            if direction == "regression":
                hi, lo = side, max(j for j in range(side) if self._is(j, CLEAN))
            else:
                lo, hi = side, min(j for j in range(side + 1, len(self.c)) if self._is(j, CLEAN))
        skipped = [self.c[i] for i in range(lo + 1, hi)]
        said = [f"{len(skipped)} candidate(s) between could not be judged: {', '.join(skipped)}"] if skipped else []
        if (clean := self.c[lo if direction == "regression" else hi]) in self.unconfirmed:
            said.append(f"the clean step next to the boundary, {clean}, rests on one run: its confirming run "
                        f"could not be judged ({self.unconfirmed[clean]})")
        msg = "; ".join(said)
        return Outcome(direction, self.c[lo], self.c[hi], skipped, msg)

    def _agree(self, state: str) -> Outcome:
        what = "reproduces" if state == REPRODUCES else "does not reproduce"
        return Outcome("none", message=f"both ends agree: {self.c[0]} and {self.c[-1]} {what}; nothing to bisect")


def ending(e: BaseException) -> dict:
    """A bisection record's status when e ended it: interrupted by a signal,
    or an error with its text (a kstall bug, a host failure)."""
    if isinstance(e, (KeyboardInterrupt, Interrupted)):
        return {"status": "interrupted"}
    return {"status": "error", "error": f"{type(e).__name__}: {e}"}
