# SPDX-License-Identifier: GPL-2.0
"""One bisection step: verify a kernel until its state is known.

Shared by the Debian version bisect and `kstall bisect-step` (git bisect run).
A step that reproduces is decided at once. A step that does not is repeated
until its P(miss) reaches the per-step target, computed from the reproducer's
calibration plus what the bad end of this bisection measured (how many passes
it took to hang there). ERROR and INCONCLUSIVE steps are skipped, and so is a
CRASHED one: a different failure says nothing about this hang. So is a hang
other than the bad end's (another signature, or another title for a hang no
signature names): an unrelated hang in one step is how bisections go wrong.
A reproducer with signatures of its own is already INCONCLUSIVE on any other.

A syzkaller program runs for its time and has no P(miss) to lean on: a
clean step is one clean run of its time, unsure, and the clean step the
answer rests on gets one more run before it counts (Bisection.confirm).
"""
from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field

from harness.analysis import pmiss
from harness.analysis.record import RunRecord
from harness.analysis.verdict import Verdict, VerdictKind
from harness.base import arch, syzkaller
from harness.drivers import case as cases, verify
from harness.drivers.bisect.search import CLEAN, REPRODUCES, SKIP, Step
from harness.drivers.options import Options
from harness.guest import accel


def hang_key(v: Verdict) -> str:
    """What makes two hangs the same: the signature, or the title of one no signature names."""
    return v.signature or v.title or ""


@dataclass
class StepPolicy:
    reproducer: str
    opts: Options
    pmiss_target: float = 1e-3
    max_runs: int = 4
    cal: pmiss.Calibration | None = None
    bad_end_runs: list[dict] = field(default_factory=list)
    loaded: cases.Loaded | None = None  # the reproducer, read once for every step

    def __post_init__(self) -> None:
        if self.loaded is None:
            self.loaded = cases.load(self.reproducer, lambda msg: None)
        self.own_bug = self.loaded.own_bug

    @property
    def timed(self) -> bool:
        """A program judged by one run of its time (syzkaller's): no pass count tells a rate."""
        assert self.loaded is not None
        return self.loaded.spec.env == syzkaller.ENV

    def base(self, accel_kind: str, arch_name: str) -> pmiss.Calibration | None:
        """The calibration (self.cal when one was given) that holds for runs
        under this accelerator on this architecture."""
        assert self.loaded is not None
        if self.cal is not None:
            return self.cal
        return self.loaded.calibration_for(cases.key_for(self.loaded, self.opts, accel_kind, arch_name))[0]

    def learn_from_bad_end(self, rec: RunRecord) -> None:
        """The bad end's own reproduction joins the calibration, and its hang
        is the one every step must show to count as reproducing."""
        self.bad_end_runs.append({"verdict": VerdictKind.VULNERABLE, "count": rec.passes_before_hang, "seconds": 0,
                                  "id": rec.id, "hang": hang_key(rec.verdict)})

    @property
    def bad_hang(self) -> str:
        return next((r["hang"] for r in self.bad_end_runs if r.get("hang")), "")

    def different_hang(self, v: Verdict) -> str:
        """Why a VULNERABLE step is not the bad end's hang, or ""."""
        if self.own_bug or not self.bad_hang or hang_key(v) == self.bad_hang:
            return ""
        return f"a different hang than at the bad end: {hang_key(v)} (the bad end: {self.bad_hang})"


    def calibration(self, accel_kind: str, arch_name: str = arch.DEFAULT) -> pmiss.Calibration | None:
        """The calibration for runs under accel_kind on arch_name, with the bad end's runs."""
        if self.timed:
            return None
        base = self.base(accel_kind, arch_name)
        # a bad end that hung before its first pass (a program run as it is
        # hangs in its first run) tells no rate on its own
        if base is None and not any(r["count"] for r in self.bad_end_runs):
            return None
        runs = (base.runs if base else []) + self.bad_end_runs
        return pmiss.Calibration(reproducer=self.reproducer, kernel=base.kernel if base else "the bad end",
                                 cpus=base.cpus if base else 0, confidence=base.confidence if base else 0.95,
                                 measured=base.measured if base else "", runs=runs, path=base.path if base else None)


def run_step(spec: str, label: str, policy: StepPolicy, echo, provisional: bool = False,
             after: Step | None = None) -> tuple[Step, list[RunRecord]]:
    """Verify spec until its state is known; the step and every run's record.

    A run whose vCPUs the host kept waiting (pmiss.too_busy) tells no
    calibrated P(miss). Its passes are not counted and the step runs again,
    unless provisional: a search that confirms the clean step its answer
    rests on (Bisection.confirm) counts them and marks the step unsure.
    after: the unsure step a confirmation goes on from."""
    t0 = time.monotonic()
    recs: list[RunRecord] = []
    earlier = list(after.runs) if after else []
    total, uncounted = 0, after.count if after else 0  # passes P(miss) counts; passes on a busy host
    busiest = 0.0
    # the first run is sized for the accelerator it will most likely get;
    # every run is judged by the calibration for the one its record says it got
    cal = policy.calibration(accel.likely(policy.opts.guest.accel), policy.opts.kernel.arch or arch.DEFAULT)
    assert policy.loaded is not None
    first = min(len(earlier), policy.max_runs - 1) + 1
    for n in range(first, policy.max_runs + 1):
        # enough passes for the per-step target, and never fewer than a verdict needs
        count = max(policy.loaded.spec.min_count, policy.opts.run.count or 0,
                    pmiss.count_for(cal, policy.pmiss_target))
        # the step judges P(miss) over all its runs: a run need not reach the target alone
        opts = dataclasses.replace(policy.opts, run=dataclasses.replace(policy.opts.run, count=count,
                                                                        pmiss_target=1.0, pmiss_given=False))
        res = verify.verify(spec, policy.loaded, opts, echo)
        if res.held is not None:  # bisect-step --hold: the developer looks before git bisect goes on
            res.held.serve(echo)
        rec = res.record
        recs.append(rec)
        v = rec.verdict.verdict
        runs = earlier + [r.results_dir for r in recs if r.results_dir]
        seconds = round(time.monotonic() - t0 + (after.seconds if after else 0), 1)
        if v == VerdictKind.VULNERABLE and (other := policy.different_hang(rec.verdict)):
            echo(f"{label}: {other}: skipped")
            return Step(label, SKIP, v, other, "", seconds, runs, 0), recs
        if v == VerdictKind.VULNERABLE:
            return Step(label, REPRODUCES, v, rec.line, "", seconds, runs, rec.evidence.count or 0), recs
        if v != VerdictKind.NOT_REPRODUCED:
            why = f"crashed differently: {rec.verdict.reason}" if v == VerdictKind.CRASHED else rec.verdict.reason
            return Step(label, SKIP, v, why, "", seconds, runs, 0, error=v == VerdictKind.ERROR), recs
        if policy.timed:
            secs = rec.timings.get("repro_s") or 0
            clean = (after.count if after else 0) + len(recs)  # a timed step's count: its clean runs
            if not provisional and clean < 2:  # no search confirms it later (git bisect): a second run now
                echo(f"{label}: not reproduced in one run of its time; a syzkaller program's clean step takes "
                     "two here: running again")
                continue
            return Step(label, CLEAN, v, rec.line, f"{clean} clean run(s) of its time (the last {secs:.0f} s); "
                        "no P(miss): a syzkaller program" + (", confirmed" if after or clean > 1 else ""), seconds,
                        runs, clean, unsure=provisional), recs
        cal = policy.calibration(rec.vm.get("accel") or "", rec.vm.get("arch") or arch.DEFAULT)
        name = rec.evidence.count_name or "passes"
        share = rec.timings.get("vcpu_host_wait_share")
        busy = pmiss.too_busy(cal, share)
        if busy:
            busiest = max(busiest, share or 0.0)
        if busy and not provisional:
            uncounted += rec.evidence.count or 0
        else:
            total += rec.evidence.count or 0
        pm = pmiss.p_miss(cal, total, name)
        reached = pmiss.reaches(pm, policy.pmiss_target)
        # unknown (no calibration, or a host busy every time): as clean as max_runs runs make it
        forced = n == policy.max_runs and not reached and (reached is None or busiest > 0)
        if reached or forced:
            if busiest and (provisional or forced or pm["p_miss"] is None):
                pm = pmiss.p_miss(cal, total, name, host_share=busiest)
                text = f"{pm['text']} over {total + uncounted} passes in {n} run(s)"
            elif uncounted:
                text = f"{pm['text']} over {total} passes (and {uncounted} on a busy host) in {n} run(s)"
            else:
                text = f"{pm['text']} over {total} passes in {n} run(s)"
            return Step(label, CLEAN, v, rec.line, text, seconds, runs, total + uncounted,
                        unsure=provisional and busiest > 0), recs
        why = (pmiss.p_miss(cal, total, name, host_share=share)["text"] if busy
               else f"{pm['text']} is not below {policy.pmiss_target:g}")
        echo(f"{label}: not reproduced, but {why}: running again")
    return Step(label, SKIP, VerdictKind.NOT_REPRODUCED, f"P(miss) stayed above {policy.pmiss_target:g} after "
                f"{policy.max_runs} runs ({total} passes)", "", seconds, runs, total), recs  # the last run's
