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
runs with its key (recorded in the file): the arguments it ran with (its
defaults included), vCPUs, accelerator, architecture and injected NMI rate.
Any other run's P(miss) is unknown.

So is a run whose vCPUs the host kept from running for over MAX_HOST_SHARE
of it (a busy host, another kstall's guests): a race between two CPUs needs
them to run at once, and a rate measured with each vCPU on a core says
nothing of one measured with both on one.
"""
from __future__ import annotations

import json
import math
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from harness.analysis.verdict import VerdictKind
from harness.base import arch as arches
from harness.base import paths

CAL_DIR = paths.data_file("repro", "calibration")
# the vCPU threads' mean share of a run spent waiting for a host CPU
# (HostWait.share) above which a calibrated rate does not hold. Measured on a
# 2-core host: 0.14 alone; 0.39-0.54 beside two CPU-bound loops, where
# debian:6.1.170-rt's futex-requeue-pi ran 408 passes without its hang (10 of
# 10 calibration runs hung, "P(miss) 3e-07"), as it did once beside make test's
# other half.
MAX_HOST_SHARE = 0.3


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


@dataclass(frozen=True)
class Key:
    """What a run's hang rate, and so its P(miss), depends on: how the
    reproducer actually ran."""
    args: tuple[str, ...]  # its arguments: its defaults and stall thresholds, then the user's
    cpus: int
    accel: str             # "" when not known yet
    arch: str
    nmi_rate: float = 0.0  # NMIs/s the host injects (0: none)

    def to_toml(self) -> list[str]:
        return [f"arguments = [{', '.join(json.dumps(a) for a in self.args)}]", f"cpus = {self.cpus}",
                f'accel = "{self.accel}"', f'arch = "{self.arch}"', f"nmi_rate = {self.nmi_rate:g}"]

    @classmethod
    def from_doc(cls, d: dict) -> "Key | None":
        """None for a file from before kstall recorded the whole key."""
        if not all(k in d for k in ("arguments", "arch", "nmi_rate")):
            return None
        return cls(tuple(str(a) for a in d["arguments"]), int(d.get("cpus", 0)), str(d.get("accel", "")),
                   str(d["arch"]), float(d["nmi_rate"]))


@dataclass
class Calibration:
    reproducer: str
    kernel: str
    cpus: int
    confidence: float
    measured: str
    runs: list[dict] = field(default_factory=list)
    path: Path | None = None
    key: Key | None = None  # the runs it holds for (None: a file without the whole key holds for none)

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

    def mismatch(self, key: Key) -> str:
        """Why it does not hold for a run with key; "" when it does. A run's
        accelerator must be known: a hang rate under TCG says nothing of
        one under KVM."""
        mine = self.key
        if mine is None:
            return "a calibration that does not record everything its runs ran with: calibrate again"
        if key.args != mine.args:
            return "no calibration for these arguments"
        if key.cpus != mine.cpus:
            return f"no calibration for {key.cpus} vCPUs"
        if not key.accel:
            return "no calibration for a run whose accelerator is not known"
        if key.accel != mine.accel:
            return f"no calibration under {key.accel.upper()}"
        if key.arch != mine.arch:
            return f"no calibration on {key.arch}"
        if key.nmi_rate != mine.nmi_rate:
            return f"no calibration at {key.nmi_rate:g} injected NMIs/s (it was measured at {mine.nmi_rate:g})"
        return ""


def holding(cals: Calibration | Sequence[Calibration] | None, key: Key) -> tuple[Calibration | None, str]:
    """The calibration among cals that holds for a run with key, and why
    P(miss) may still be unknown: no calibration, only ones for other runs
    (the reason of the one on the run's architecture, if any), or one without hangs."""
    cals = (cals,) if isinstance(cals, Calibration) else tuple(cals or ())
    if not cals:
        return None, "no calibration"
    reasons = []
    for cal in cals:
        why = cal.mismatch(key)
        if not why:
            return cal, "" if cal.hangs else "a calibration with no hangs"
        reasons.append((cal.key is not None and cal.key.arch == key.arch, why))
    return None, max(reasons, key=lambda r: r[0])[1]


def load(reproducer: str, key: Key, directory: Path = CAL_DIR) -> Calibration | None:
    """The reproducer's calibration, if one holds for a run with key."""
    return holding(load_files(reproducer, directory), key)[0]


def file_for(reproducer: str, arch: str, directory: Path = CAL_DIR) -> Path:
    """Where a calibration on arch is written: NAME.toml for the first
    architecture's runs (as before there were others), NAME.ARCH.toml for another's."""
    return directory / (f"{reproducer}.toml" if arch == arches.DEFAULT else f"{reproducer}.{arch}.toml")


def load_files(reproducer: str, directory: Path = CAL_DIR) -> tuple[Calibration, ...]:
    """Every calibration of the reproducer, whatever runs each holds for."""
    found = [file_for(reproducer, n, directory) for n in arches.names()]
    return tuple(c for p in found if (c := _load(p)) is not None)


def load_file(reproducer: str, directory: Path = CAL_DIR) -> Calibration | None:
    """The reproducer's calibration on the first architecture, whatever runs it holds for."""
    return _load(directory / f"{reproducer}.toml")


def _load(path: Path) -> Calibration | None:
    if not path.is_file():
        return None
    with open(path, "rb") as f:
        d = tomllib.load(f)
    return Calibration(reproducer=d["reproducer"], kernel=d["kernel"], cpus=int(d.get("cpus", 0)),
                       confidence=float(d.get("confidence", 0.95)), measured=d.get("measured", ""),
                       runs=list(d.get("run", [])), path=path, key=Key.from_doc(d))


def fmt_p(log10: float) -> str:
    if log10 < -12:
        return "< 1e-12"
    return f"{10 ** log10:.2g}"


def too_busy(cal: Calibration | None, host_share: float | None) -> bool:
    """Whether cal's rate does not hold for a run whose vCPUs waited host_share of it."""
    return bool(cal is not None and cal.hangs and host_share is not None and host_share > MAX_HOST_SHARE)


def p_miss(cal: Calibration | None, count: int, count_name: str, unknown: str = "no calibration",
           host_share: float | None = None) -> dict:
    """The P(miss) record run.json carries for a run that completed count
    passes; unknown: why no calibration gives its rate (holding());
    host_share: how much of the run the host kept the vCPUs waiting (over
    MAX_HOST_SHARE, the calibration does not hold: "host_busy")."""
    if too_busy(cal, host_share):
        unknown = (f"the host kept the vCPUs waiting {host_share:.0%} of the run: a calibrated rate holds "
                   f"up to {MAX_HOST_SHARE:.0%}")
        return {"p_miss": None, "p_miss_log10": None, "text": f"P(miss) unknown ({unknown})", "host_busy": host_share,
                "method": f"{unknown}: run it where the vCPUs have cores of their own"}
    if cal is None or not cal.hangs:
        return {"p_miss": None, "p_miss_log10": None, "text": f"P(miss) unknown ({unknown})",
                "method": f"{unknown}: `{paths.COMMAND} calibrate` on an affected kernel, with this run's "
                          "arguments, vCPUs, accelerator and architecture, measures its hang rate"}
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
