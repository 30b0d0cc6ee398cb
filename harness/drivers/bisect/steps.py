# SPDX-License-Identifier: GPL-2.0
"""One bisection step: verify a kernel until its state is known.

Shared by the Debian version bisect and `kstall bisect-step` (git bisect run).
A step that reproduces is decided at once. A step that does not is repeated
until its P(miss) reaches the per-step target, computed from the reproducer's
calibration plus what the bad end of this bisection measured (how many passes
it took to hang there). ERROR and INCONCLUSIVE steps are skipped, and so is a
CRASHED one: a different failure says nothing about this hang.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

from harness.analysis import pmiss
from harness.base import reproducers
from harness.drivers import verify
from harness.drivers.bisect.search import CLEAN, REPRODUCES, SKIP, Step


@dataclass
class StepPolicy:
    reproducer: str
    opts: verify.Options
    pmiss_target: float = 1e-3
    max_runs: int = 4
    cal: pmiss.Calibration | None = None
    bad_end_runs: list[dict] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.cal is None:
            self.cal = pmiss.load(self.reproducer)

    def learn_from_bad_end(self, doc: dict) -> None:
        """The bad end's own reproduction joins the calibration."""
        ev = doc.get("evidence", {})
        first = ev.get("first_stall_count")
        count = first if first is not None else ev.get("count") or 0
        self.bad_end_runs.append({"verdict": "VULNERABLE", "count": count, "seconds": 0, "id": doc.get("id", "")})

    def calibration(self) -> pmiss.Calibration | None:
        base = self.cal
        if base is None and not self.bad_end_runs:
            return None
        runs = (base.runs if base else []) + self.bad_end_runs
        return pmiss.Calibration(reproducer=self.reproducer, kernel=base.kernel if base else "the bad end",
                                 cpus=base.cpus if base else 0, confidence=base.confidence if base else 0.95,
                                 measured=base.measured if base else "", runs=runs, path=base.path if base else None)


def run_step(spec: str, label: str, policy: StepPolicy, echo) -> tuple[Step, list[dict]]:
    """Verify spec until its state is known; the step and every run's run.json."""
    t0 = time.monotonic()
    docs: list[dict] = []
    total = 0
    cal = policy.calibration()
    # enough passes for the per-step target, and never fewer than a verdict needs
    count = max(reproducers.load(policy.reproducer).min_count, policy.opts.count or 0,
                pmiss.count_for(cal, policy.pmiss_target))
    for n in range(1, policy.max_runs + 1):
        opts = verify.Options(**{**policy.opts.__dict__, "count": count})
        res = verify.verify(spec, policy.reproducer, opts, echo)
        d = res.doc
        docs.append(d)
        v = d["verdict"]
        runs = [r["results_dir"] for r in docs if r.get("results_dir")]
        seconds = round(time.monotonic() - t0, 1)
        if v == "VULNERABLE":
            return Step(label, REPRODUCES, v, d["line"], "", seconds, runs, d["evidence"].get("count") or 0), docs
        if v != "NOT_REPRODUCED":
            why = f"crashed differently: {d['reason']}" if v == "CRASHED" else d["reason"]
            return Step(label, SKIP, v, why, "", seconds, runs, 0, error=v == "ERROR"), docs
        total += d["evidence"].get("count") or 0
        pm = pmiss.p_miss(cal, total, d["evidence"].get("count_name") or "passes")
        log10 = pm.get("p_miss_log10")
        if log10 is None or log10 <= math.log10(policy.pmiss_target):
            text = f"{pm['text']} over {total} passes in {n} run(s)"
            return Step(label, CLEAN, v, d["line"], text, seconds, runs, total), docs
        echo(f"{label}: not reproduced, but P(miss) {pm['text']} is above {policy.pmiss_target:g}: running again")
    return Step(label, SKIP, "NOT_REPRODUCED", f"P(miss) stayed above {policy.pmiss_target:g} after "
                f"{policy.max_runs} runs ({total} passes)", "", round(time.monotonic() - t0, 1),
                [r["results_dir"] for r in docs if r.get("results_dir")], total), docs
