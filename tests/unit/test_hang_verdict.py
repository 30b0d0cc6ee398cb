# SPDX-License-Identifier: GPL-2.0
"""A freeze classified from recorded dumps becomes VULNERABLE; without a culprit it does not."""
from recorded import load_samples

from harness.analysis import classify
from harness.base import reproducers
from harness.analysis.decide import decide
from harness.analysis.findings import Findings
from harness.analysis.outcome import Outcome

REPRO = reproducers.load("perf-refresh")


def test_recorded_hang_is_vulnerable_with_high_confidence():
    classes = classify.classify_samples(load_samples("perf-refresh-6.16.12-4cpu"), classify.load_signatures())
    v = decide(Findings(Outcome("freeze", "no heartbeat for 0.80s", 0), REPRO, classes=classes))
    assert v.verdict == "VULNERABLE" and v.exit_code == 1
    assert v.signature == "hrtimer_cancel_self_deadlock" and v.confidence == "high"
    assert v.line().startswith("VULNERABLE: hrtimer_cancel self-deadlock on CPU")


def test_freeze_without_culprit_is_inconclusive():
    samples = load_samples("perf-refresh-6.16.12-4cpu")
    idle_only = [{"cpus": [dict(c, frames=[{"function": "pv_native_safe_halt"}], state="halted")
                           for c in s["cpus"]]} for s in samples]
    classes = classify.classify_samples(idle_only, classify.load_signatures())
    v = decide(Findings(Outcome("freeze", "no heartbeat", 0), REPRO, classes=classes))
    assert v.verdict == "INCONCLUSIVE"


def test_freeze_with_unreadable_cpus_is_inconclusive_and_says_why():
    v = decide(Findings(Outcome("freeze", "no heartbeat", 0), REPRO, debug_errors=["gdb: could not attach"]))
    assert v.verdict == "INCONCLUSIVE" and "could not attach" in v.reason


def test_a_freeze_that_neither_gdb_nor_qmp_could_read_is_an_error_naming_both():
    errors = ["gdb: timed out waiting for the gdbstub", "qmp: QMP timed out"]
    v = decide(Findings(Outcome("freeze", "no heartbeat", 0), REPRO, debug_errors=errors))
    assert v.verdict == "ERROR" and "did not answer QMP or its gdbstub" in v.reason and "QMP timed out" in v.reason
