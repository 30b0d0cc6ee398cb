# SPDX-License-Identifier: GPL-2.0
"""P(miss): how likely a run that did not hang would have missed the bug.

Calibration (repro/calibration/<reproducer>.toml, written by `kstall
calibrate`) records runs on a kernel known to be affected: for each, how many
passes over the path completed (before the hang, or in all when it did not
hang). Model: every pass hangs an affected kernel with the same probability,
independently. With k hangs over n passes (every run's completed ones plus
the k that hung), the hang rate's one-sided lower confidence bound is
lambda_lo = G(1 - confidence; k) / n, where G is the Gamma(k, 1) quantile (the
Poisson/chi-square bound). A run that completed N passes without hanging then
misses an affected kernel with probability at most exp(-lambda_lo * N).

The rate depends on how the reproducer ran, so a calibration holds only for
runs with its arguments, vCPUs and accelerator (recorded in the file); any
other run's P(miss) is unknown.
"""
from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from harness.analysis.verdict import VerdictKind
from harness.base import paths

CAL_DIR = paths.data_file("repro", "calibration")


def gamma_cdf(x: float, k: int) -> float:
    """P(Gamma(k, 1) <= x) for integer k: 1 - e^-x * sum_{i<k} x^i / i!."""
    if x <= 0:
        return 0.0
    term, total = 1.0, 1.0
    for i in range(1, k):
        term *= x / i
        total += term
    return 1.0 - math.exp(-x) * total


def gamma_quantile(p: float, k: int) -> float:
    lo, hi = 0.0, k + 20 * math.sqrt(k) + 20
    for _ in range(200):
        mid = (lo + hi) / 2
        if gamma_cdf(mid, k) < p:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


@dataclass
class Calibration:
    reproducer: str
    kernel: str
    cpus: int
    confidence: float
    measured: str
    runs: list[dict] = field(default_factory=list)
    path: Path | None = None
    args: tuple[str, ...] = ()  # the reproducer arguments given on top of its defaults
    accel: str = "tcg"

    @property
    def hangs(self) -> list[dict]:
        return [r for r in self.runs if r.get("verdict") == VerdictKind.VULNERABLE]

    @property
    def exposed(self) -> list[dict]:
        """The runs that exercised the path: those that hung, and those that ran it to the end without."""
        return [r for r in self.runs if r.get("verdict") in (VerdictKind.VULNERABLE, VerdictKind.NOT_REPRODUCED)]

    def rate_lower_bound(self) -> tuple[float, int, int]:
        """(lambda_lo per pass, k hangs, n passes)"""
        k = len(self.hangs)
        n = sum(int(r["count"]) + (r.get("verdict") == VerdictKind.VULNERABLE) for r in self.exposed)
        if k == 0:
            return 0.0, 0, n
        return gamma_quantile(1 - self.confidence, k) / n, k, n

    def mismatch(self, args: list[str] | tuple[str, ...], cpus: int | None, accel: str | None) -> str:
        """Why it does not hold for a run with these arguments, vCPUs and
        accelerator; "" when it does. A run's accelerator must be known: a
        hang rate under TCG says nothing of one under KVM."""
        if tuple(args) != self.args:
            return "no calibration for these arguments"
        if cpus not in (None, self.cpus):
            return f"no calibration for {cpus} vCPUs"
        if not accel:
            return "no calibration for a run whose accelerator is not known"
        if accel != self.accel:
            return f"no calibration under {accel.upper()}"
        return ""


def holding(cal: Calibration | None, args: list[str] | tuple[str, ...] = (), cpus: int | None = None,
            accel: str | None = None) -> tuple[Calibration | None, str]:
    """cal if it holds for a run with these arguments, vCPUs and accelerator
    (None: not known yet), and why P(miss) may still be unknown: no
    calibration, one for another run, or one without hangs."""
    if cal is None:
        return None, "no calibration"
    why = cal.mismatch(args, cpus, accel)
    return (None, why) if why else (cal, "no calibration with hangs")


def load(reproducer: str, args: list[str] | tuple[str, ...] = (), cpus: int | None = None,
         accel: str | None = None, directory: Path = CAL_DIR) -> Calibration | None:
    """The reproducer's calibration, if it holds for a run with these
    arguments, vCPUs and accelerator."""
    return holding(load_file(reproducer, directory), args, cpus, accel)[0]


def unknown_because(reproducer: str, args: list[str] | tuple[str, ...] = (), cpus: int | None = None,
                    accel: str | None = None, directory: Path = CAL_DIR) -> str:
    """Why a run has no calibration (load() gave None)."""
    return holding(load_file(reproducer, directory), args, cpus, accel)[1]


def load_file(reproducer: str, directory: Path = CAL_DIR) -> Calibration | None:
    path = directory / f"{reproducer}.toml"
    if not path.is_file():
        return None
    with open(path, "rb") as f:
        d = tomllib.load(f)
    return Calibration(reproducer=d["reproducer"], kernel=d["kernel"], cpus=int(d.get("cpus", 0)),
                       confidence=float(d.get("confidence", 0.95)), measured=d.get("measured", ""),
                       runs=list(d.get("run", [])), path=path, args=tuple(d.get("args", ())),
                       accel=d.get("accel", "tcg"))


def fmt_p(log10: float) -> str:
    if log10 < -12:
        return "< 1e-12"
    return f"{10 ** log10:.2g}"


def p_miss(cal: Calibration | None, count: int, count_name: str, unknown: str = "no calibration") -> dict:
    """The P(miss) record run.json carries for a run that completed count
    passes; unknown: why there is no calibration for it (unknown_because())."""
    if cal is None or not cal.hangs:
        return {"p_miss": None, "p_miss_log10": None, "text": f"P(miss) unknown ({unknown})",
                "method": f"{unknown} with hangs for this reproducer run with these arguments, vCPUs and "
                          "accelerator (run `harness/kstall calibrate` with them)"}
    lam, k, n = cal.rate_lower_bound()
    log10 = -lam * count / math.log(10)
    times = sorted(float(r.get("seconds", 0)) for r in cal.hangs)
    completed = n - k
    method = (f"calibrated on {cal.kernel} ({cal.cpus} vCPUs, {cal.measured}): {k}/{len(cal.runs)} runs hung, "
              f"{len(cal.exposed)} ran the path, {completed} completed {count_name} in all ({n} passes counting "
              f"the {k} that hung; "
              f"median time to hang {times[len(times) // 2]:.2f}s); {cal.confidence:.0%} lower bound on the "
              f"hang rate {lam:.3g} per pass; P(miss) <= exp(-{lam:.3g} x {count}) = 10^{log10:.0f}")
    return {"p_miss": max(10 ** log10, 0.0) if log10 > -300 else 0.0, "p_miss_log10": round(log10, 1),
            "text": f"P(miss) {fmt_p(log10)}", "method": method, "rate_lower_bound": lam,
            "calibration": paths.shown(cal.path) if cal.path else None}


def reaches(pm: dict, target: float) -> bool | None:
    """Whether a p_miss() record is at or below target, compared unrounded
    (its log10 is rounded for display: -5.96 would read as -6.0, 10% over a
    1e-6 target); None when P(miss) is unknown."""
    if pm.get("p_miss") is None:
        return None
    return pm["p_miss"] <= target


def count_for(cal: Calibration | None, target: float) -> int:
    """Passes needed for P(miss) <= target (0 when there is no calibration)."""
    if cal is None or not cal.hangs:
        return 0
    lam, _, _ = cal.rate_lower_bound()
    return math.ceil(-math.log(target) / lam) if lam > 0 else 0
