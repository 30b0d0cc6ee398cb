# SPDX-License-Identifier: GPL-2.0
"""The hang kinds' table and the retry policy: one place each."""
from harness.analysis import decide, hang_kinds
from harness.analysis.hang_kinds import HangKind, Reading
from harness.analysis.outcome import OutcomeKind
from harness.analysis.retry import Retry, accel_after, another_attempt
from harness.base import reproducers

PERF = reproducers.load("perf-refresh")
MALLOC = reproducers.load("signal-malloc")


def test_every_outcome_has_one_way_to_a_verdict():
    for kind in OutcomeKind:
        for repro in (PERF, MALLOC):
            way = hang_kinds.way_for(kind, repro)
            assert (way is not None) + (kind in decide.ENDINGS) <= 1, kind
    assert set(hang_kinds.HangKind) == {w.kind for w in hang_kinds.WAYS}


def test_a_stuck_process_is_read_from_its_threads_and_stuck_cpus_from_the_vcpus():
    assert hang_kinds.way_for(OutcomeKind.STUCK, MALLOC).kind == HangKind.PROCESS
    assert hang_kinds.way_for(OutcomeKind.STUCK, MALLOC).reading == Reading.THREADS
    assert hang_kinds.way_for(OutcomeKind.STUCK, PERF).reading == Reading.VCPUS
    assert hang_kinds.way_for(OutcomeKind.FREEZE, MALLOC).reading == Reading.VCPUS
    assert hang_kinds.way_for(OutcomeKind.DONE, PERF) is None


def test_the_retry_policy():
    assert not another_attempt(None, 1, 2)
    assert another_attempt(Retry.EMULATOR_FAULT, 1, 2) and not another_attempt(Retry.EMULATOR_FAULT, 2, 2)
    # a stall the host's delay may explain gets one try more, unless retries are off
    assert another_attempt(Retry.HOST_DELAY, 2, 2) and not another_attempt(Retry.HOST_DELAY, 3, 2)
    assert not another_attempt(Retry.HOST_DELAY, 1, 1) and not another_attempt(Retry.SNAPSHOT, 1, 0)


def test_an_emulator_fault_under_multi_threaded_tcg_is_retried_on_one_host_thread():
    assert accel_after(Retry.EMULATOR_FAULT, "tcg") == "tcg-single"
    assert accel_after(Retry.EMULATOR_FAULT, "tcg-single") == "tcg-single"
    assert accel_after(Retry.EMULATOR_FAULT, "kvm") == "kvm"  # (no such race there)
    assert accel_after(Retry.HOST_DELAY, "tcg") == accel_after(None, "tcg") == "tcg"


def test_every_architecture_has_the_retrys_accelerator():
    from harness.base import arch
    from harness.analysis.retry import NEXT_ACCEL
    for a in arch.names():
        assert {k for _, k in NEXT_ACCEL} | set(NEXT_ACCEL.values()) <= set(arch.get(a).table["accel"]), a
