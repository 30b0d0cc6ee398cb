# SPDX-License-Identifier: GPL-2.0
"""`kstall explain`: the verdict a kernel's record predicts, with no boot
(harness/analysis/bug_record.py), from its package's changelog where it has
one; verify and the matrix print it beside the verdict they measure. With a
reproducer it also says what the check before booting finds (preflight.py):
a run it blocks is answered without a guest, and explain should say so."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from harness.analysis import bug_record
from harness.analysis.bug_record import BugRecord, Prediction
from harness.base import arch as arches
from harness.drivers import preflight
from images.kernels import changelog, schemes
from images.kernels.kernel import Kernel, SpecError

Echo = Callable[[str], None]


@dataclass
class Explanation:
    kernel: Kernel
    record: BugRecord | None
    prediction: Prediction
    reproducer: str = ""   # "" for a CVE with no reproducer
    before_boot: dict | None = None  # the check before booting (before_boot()); None for a CVE


def predict(kernel: Kernel, record: BugRecord | None, echo: Echo | None = None) -> Prediction:
    """The prediction for kernel; a changelog that cannot be had leaves the record to decide, saying why."""
    if record is None:
        return bug_record.predict(None, kernel.upstream, None)
    package = kernel.origin.get("image_package") or kernel.origin.get("package") or ""
    no_log = f"none in {package}" if package else "none"
    try:
        path = schemes.changelog(kernel, echo)
        log = changelog.Lookup(path) if path else None
    except (SpecError, OSError, ValueError) as e:
        log, no_log = None, f"could not be read ({e})"
    p = bug_record.predict(record, kernel.upstream, log, no_log)
    gate = bug_record.config_gate(record.fix_subject)
    if p.status == bug_record.FIXED and gate and kernel.config:
        option, effective = gate
        value = kernel.config_value(f"CONFIG_{option}") or "n"
        if value != effective:
            p.status = bug_record.AFFECTED
            p.reasons.append(f"config: the fix takes effect only with CONFIG_{option}={effective}, and this "
                             f"kernel has CONFIG_{option}={value}: affected")
    a = arches.get(kernel.arch)
    why, elsewhere = record.architecture_reason(a.table["source_dir"], a.name)
    if why:
        p.reasons.append(why)
    if elsewhere:
        p.status = bug_record.NOT_INTRODUCED
    return p


def explain(spec: str, repro: str | None, cve: str | None, vulns: Path | None, echo: Echo) -> Explanation:
    """SpecError, ReproducerError or RecordError for what cannot be explained."""
    from harness.base import reproducers
    if cve:
        record = BugRecord.from_vulns(vulns or Path("."), cve)
        name = ""
    else:
        assert repro
        r = reproducers.resolve(repro)
        record, name = bug_record.of(r.record, r.name, r.syzbot.get("record")), r.name
    kernel = schemes.resolve(spec, progress=echo)
    before = before_boot(kernel, r) if name else None
    return Explanation(kernel, record, predict(kernel, record, echo), name, before)


def before_boot(kernel: Kernel, repro) -> dict:
    """What verify's check before booting finds for repro on kernel:
    {"verdict": the verdict it gives with no boot (INCONCLUSIVE for a need the
    kernel lacks, ERROR for a kernel kstall cannot boot at all) or None when
    the run would boot, "reason": why ('' when nothing is missing)}."""
    try:
        c = preflight.check(kernel, repro, build=False)
    except SpecError as e:
        return {"verdict": "ERROR", "reason": str(e)}
    if c.blocked:
        return {"verdict": "INCONCLUSIVE", "reason": c.summary() or c.reason()}
    unchecked = "kstall has no config of this kernel: nothing checked"
    return {"verdict": None, "reason": "" if c.config_checked else unchecked}
