# SPDX-License-Identifier: GPL-2.0
"""P(miss) statistics and the verdict rules."""
import math

import pytest

from harness.analysis import pmiss
from harness.base import reproducers
from harness.analysis.decide import decide
from harness.analysis.findings import Findings
from harness.analysis.verdict import EXIT_CODES
from harness.analysis.ktap import Ktap
from harness.analysis.outcome import Outcome


def test_gamma_quantile_matches_closed_forms():
    # k=1 is the exponential: quantile(p) = -ln(1-p)
    assert pmiss.gamma_quantile(0.05, 1) == pytest.approx(-math.log(0.95), rel=1e-6)
    # chi-square(10)/2 lower 5% point is 3.9403/2
    assert pmiss.gamma_quantile(0.05, 5) == pytest.approx(3.9403 / 2, rel=1e-3)


def cal(counts, runs=None):
    return pmiss.Calibration(reproducer="perf-refresh", kernel="debian:6.16.12+deb13-amd64", cpus=2,
                             confidence=0.95, measured="2026-11-22",
                             runs=runs or [{"verdict": "VULNERABLE", "count": c, "seconds": 0.1} for c in counts])


def test_rate_bound_from_first_pass_hangs():
    lam, k, n = cal([0] * 5).rate_lower_bound()
    assert (k, n) == (5, 5)
    assert lam == pytest.approx(pmiss.gamma_quantile(0.05, 5) / 5)


def test_p_miss_falls_with_the_count_and_states_its_method():
    c = cal([100, 300, 50])
    small, big = pmiss.p_miss(c, 100, "REFRESH cycles"), pmiss.p_miss(c, 10000, "REFRESH cycles")
    assert big["p_miss_log10"] < small["p_miss_log10"] < 0
    assert "3/3 runs hung" in big["method"] and "lower bound" in big["method"]
    assert pmiss.count_for(c, 1e-6) > 0
    assert pmiss.p_miss(c, pmiss.count_for(c, 1e-6), "x")["p_miss_log10"] <= -6


def test_no_calibration_means_unknown_not_zero():
    r = pmiss.p_miss(None, 10000, "REFRESH cycles")
    assert r["p_miss"] is None and "unknown" in r["text"]


def test_shipped_calibration_is_from_an_affected_kernel():
    c = pmiss.load_file("perf-refresh")
    assert c is not None and c.hangs and "6.16.12" in c.kernel


REPRO = reproducers.load("perf-refresh")


def done(lines, count, pmiss=None, **target):
    k = Ktap()
    for l in lines:
        k.feed(l)
    return decide(Findings(Outcome("done", "reproducer exited with code 0", 0), REPRO, ktap=k, count=count,
                           pmiss=pmiss or {"text": "P(miss) < 1e-12", "p_miss_log10": -100}, **target))


def test_verdicts_for_completed_runs():
    assert done(["KTAP version 1", "1..1", "ok 1 perf-refresh"], 12000).verdict == "NOT_REPRODUCED"
    assert done(["ok 1 perf-refresh"], 10).verdict == "INCONCLUSIVE"
    assert done(["ok 1 perf-refresh"], 0).reason == "path not exercised"
    skip = done(["ok 1 perf-refresh # SKIP perf_event_open: Permission denied"], 0)
    assert skip.verdict == "INCONCLUSIVE" and "Permission denied" in skip.reason
    assert done([], 0).verdict == "ERROR" and done([], 0).retryable  # it never ran: retried
    assert not done(["KTAP version 1", "1..1"], 5).retryable  # it ran and said nothing of its end


def test_emulator_faults_boot_failures_and_crashes():
    k = Ktap()
    infra = decide(Findings(Outcome("infra", "Oops: int3", 0), REPRO, ktap=k, count=5,
                            report_reason="text patching race"))
    assert infra.verdict == "ERROR" and infra.retryable and "text patching" in infra.reason
    boot = decide(Findings(Outcome("boot-failure", "no guest agent within 120s of boot", 0), REPRO, ktap=k))
    assert boot.verdict == "ERROR" and boot.exit_code == EXIT_CODES["ERROR"]
    crash = decide(Findings(Outcome("oops", "kernel NULL pointer dereference, address: 0000000000000000", 0), REPRO,
                            ktap=k, count=5))
    assert crash.verdict == "CRASHED" and "NULL pointer" in crash.summary
    init = decide(Findings(Outcome("panic", "Attempted to kill init! exitcode=0x0000000b", 0), REPRO, ktap=k))
    assert init.verdict == "ERROR"


@pytest.mark.parametrize("accel", ["tcg-single", "kvm"])
def test_an_int3_oops_where_no_emulator_race_patches_the_text_is_the_kernels_crash(accel):
    """TCG's text-patching race needs vCPUs on two host threads: the retry
    after it runs single-threaded, and KVM has no TCG at all. The same oops
    there was an ERROR "emulator fault" for ever (review); it is the kernel's."""
    report = {"kind": "infra", "name": "tcg-text-poke-int3", "reason": "text patching race",
              "title": "Oops: int3: 0000 [#1] PREEMPT SMP NOPTI"}
    f = Findings(Outcome("infra", "Oops: int3: 0000 [#1] PREEMPT SMP NOPTI", 0), REPRO, ktap=Ktap(), count=5,
                 report_reason="text patching race", reports=[report], accel=accel)
    v = decide(f)
    assert v.verdict == "CRASHED" and not v.retryable and v.title.startswith("Oops: int3"), v.reason
    assert accel in v.reason
    # the host-starved boot's timer check is the host's under any accelerator
    timer = {"kind": "infra", "name": "boot-timer-check", "reason": "no ticks"}
    f = Findings(Outcome("infra", "IO-APIC + timer doesn't work!", 0), REPRO, ktap=Ktap(), report_reason="no ticks",
                 reports=[timer], accel=accel)
    assert decide(f).verdict == "ERROR" and decide(f).retryable
    # an oops in a state no CPU can be in ended the run, an int3 line came in its grace: the emulator's
    odd = "double fault: 0000 [#1]: EFLAGS has reserved bits set (no CPU can be in this state)"
    f = Findings(Outcome("infra", odd, 0), REPRO, ktap=Ktap(), reports=[report], accel=accel)
    assert decide(f).verdict == "ERROR" and decide(f).retryable


def test_exit_codes_are_the_contract():
    assert EXIT_CODES == {"NOT_REPRODUCED": 0, "VULNERABLE": 1, "CRASHED": 1, "INCONCLUSIVE": 3, "ERROR": 4,
                          "FAILED": 5}


def test_calibration_runs_that_did_not_hang_count_in_the_denominator():
    hung = [{"verdict": "VULNERABLE", "count": c, "seconds": 0.1} for c in (10, 20)]
    clean = [{"verdict": "NOT_REPRODUCED", "count": 1000, "seconds": 9.0}]
    errored = [{"verdict": "ERROR", "count": 5000, "seconds": 1.0}]  # never ran the path to the end
    lam, k, n = cal([], runs=hung + clean + errored).rate_lower_bound()
    assert (k, n) == (2, 10 + 1 + 20 + 1 + 1000)
    assert lam == pytest.approx(pmiss.gamma_quantile(0.05, 2) / 1032)
    assert lam < cal([10, 20]).rate_lower_bound()[0]  # the clean run makes the bound more cautious


def key(name: str, users=(), cpus=2, accel="tcg", arch="x86_64") -> pmiss.Key:
    """The key of a run of a shipped reproducer, as verify makes it."""
    from harness.drivers import case as cases
    from harness.drivers.options import Options, RunOptions, GuestOptions
    opts = Options(run=RunOptions(repro_args=list(users)), guest=GuestOptions(cpus=cpus))
    return cases.key_for(cases.load(name, lambda m: None), opts, accel, arch)


def test_a_calibration_holds_only_for_the_arguments_vcpus_and_accelerator_it_was_measured_with():
    def why(name: str, k: pmiss.Key) -> str:
        return pmiss.holding(pmiss.load_file(name), k)[1]
    assert pmiss.load("signal-malloc", key("signal-malloc")) is not None
    assert pmiss.load("signal-malloc", key("signal-malloc", ["--safe"])) is None
    assert why("signal-malloc", key("signal-malloc", ["--safe"])) == "no calibration for these arguments"
    assert why("perf-refresh", key("perf-refresh", cpus=4)) == "no calibration for 4 vCPUs"
    assert why("perf-refresh", key("perf-refresh", accel="kvm")) == "no calibration under KVM"
    assert why("perf-refresh", key("perf-refresh", arch="aarch64")) == "no calibration on aarch64"
    assert why("console-trigger", key("console-trigger")) == "no calibration"
    safe = pmiss.p_miss(None, 5000, "allocations", why("signal-malloc", key("signal-malloc", ["--safe"])))
    assert safe["text"] == "P(miss) unknown (no calibration for these arguments)" and safe["p_miss"] is None


def test_a_calibration_key_is_what_the_run_ran_with_defaults_and_nmi_rate_included(tmp_path):
    import dataclasses
    ring = key("bpf-ringbuf")
    assert ring.args[:4] == ("--reserves", "16", "--progress-ms", "10") and ring.nmi_rate == 400
    cal = pmiss.load_file("bpf-ringbuf")
    assert cal.mismatch(ring) == ""
    # a change to its defaults or its NMI rate since it was measured: the calibration no longer holds
    assert cal.mismatch(dataclasses.replace(ring, nmi_rate=200)) == \
        "no calibration at 200 injected NMIs/s (it was measured at 400)"
    assert cal.mismatch(dataclasses.replace(ring, args=("--reserves", "8", *ring.args[2:]))) == \
        "no calibration for these arguments"
    # a file from before kstall wrote the whole key holds for no run
    old = tmp_path / "bpf-ringbuf.toml"
    old.write_text('reproducer = "bpf-ringbuf"\nkernel = "k"\ncpus = 2\nargs = []\naccel = "tcg"\n'
                   '[[run]]\nverdict = "VULNERABLE"\ncount = 3\n')
    assert "calibrate again" in pmiss.load_file("bpf-ringbuf", tmp_path).mismatch(ring)


def test_a_run_short_of_its_p_miss_target_is_inconclusive_not_clean():
    k = Ktap()
    for line in ["KTAP version 1", "1..1", "ok 1 perf-refresh"]:
        k.feed(line)
    reached = {"text": "P(miss) 2.1e-07", "p_miss": 2.1e-07, "p_miss_log10": -6.7}  # as p_miss() gives it
    ok = decide(Findings(Outcome("done", "exited 0", 0), REPRO, ktap=k, count=12000, pmiss=reached, pmiss_target=1e-6))
    short = decide(Findings(Outcome("done", "exited 0", 0), REPRO, ktap=k, count=12000, pmiss=reached,
                            pmiss_target=1e-9))
    assert ok.verdict == "NOT_REPRODUCED" and short.verdict == "INCONCLUSIVE" and short.exit_code == 3
    assert "P(miss) 2.1e-07 is above the target 1e-09" in short.reason and short.p_miss == reached


def _ran(count: int) -> Ktap:
    k = Ktap()
    for line in ["KTAP version 1", "1..1", "ok 1 perf-refresh"]:
        k.feed(line)
    return k


def test_a_p_miss_just_over_its_target_does_not_reach_it_by_rounding():
    """exp(-lambda x count) = 10^-5.96 = 1.1e-6: its log10 rounds to -6.0,
    and a 1e-6 target was taken as met (up to ~12% over it)."""
    cal = pmiss.Calibration(reproducer="perf-refresh", kernel="k", cpus=2, confidence=0.95, measured="",
                            runs=[{"verdict": "VULNERABLE", "count": 10000}] * 3)
    lam = cal.rate_lower_bound()[0]
    count = int(5.96 * math.log(10) / lam)
    pm = pmiss.p_miss(cal, count, "cycles")
    assert pm["p_miss_log10"] == -6.0 and pm["p_miss"] > 1e-6
    v = decide(Findings(Outcome("done", "exited 0", 0), REPRO, ktap=_ran(count), count=max(count, REPRO.min_count),
                        pmiss=pm, pmiss_target=1e-6))
    assert v.verdict == "INCONCLUSIVE" and "above the target 1e-06" in v.reason, v.reason


def test_a_p_miss_target_the_user_gave_is_not_met_by_an_unknown_p_miss():
    unknown = pmiss.p_miss(None, 20000, "cycles", "no calibration")
    given = decide(Findings(Outcome("done", "exited 0", 0), REPRO, ktap=_ran(1), count=20000, pmiss=unknown,
                            pmiss_target=1e-6, pmiss_given=True))
    assert given.verdict == "INCONCLUSIVE" and given.exit_code == 3
    assert "P(miss) unknown: calibrate first" in given.reason and "calibrate KERNEL perf-refresh" in given.reason
    default = decide(Findings(Outcome("done", "exited 0", 0), REPRO, ktap=_ran(1), count=20000, pmiss=unknown,
                              pmiss_target=1e-6))
    assert default.verdict == "NOT_REPRODUCED" and "P(miss) unknown" in default.summary


def test_an_inconclusive_run_states_every_requirement_it_missed():
    """Few passes and a P(miss) over its target: both are said, not the first."""
    short = {"text": "P(miss) 0.02", "p_miss": 0.02, "p_miss_log10": -1.7}
    v = decide(Findings(Outcome("done", "exited 0", 0), REPRO, ktap=_ran(1), count=403, pmiss=short,
                        pmiss_target=1e-9))
    assert v.verdict == "INCONCLUSIVE"
    assert f"path exercised only 403 times (< {REPRO.min_count})" in v.reason and "above the target 1e-09" in v.reason


def test_a_run_short_of_its_passes_by_the_hosts_delay_is_tried_again_and_one_short_by_the_kernel_is_not():
    """Four kstalls on 2 cores: perf-refresh ran 7,227 REFRESH cycles of its
    10,000 in its time, the host keeping its vCPUs waiting 40% of it. At the
    rate they had while they ran, the time held them all: the host's delay,
    retried. The same count with the host idle is the run's own."""
    def run(share):
        return decide(Findings(Outcome("done", "exited 0", 0), REPRO, ktap=_ran(1), count=7227,
                               pmiss=pmiss.p_miss(None, 7227, "REFRESH cycles"), host_share=share))
    busy, quiet = run(0.4), run(0.02)
    assert busy.verdict == quiet.verdict == "INCONCLUSIVE"
    assert busy.retry == "host delay" and "waiting 40% of the run: its delay, not the kernel's" in busy.reason
    assert quiet.retry is None and "waiting" not in quiet.reason
    assert run(0.1).retry is None  # 7227 / 0.9 is still short of 10,000: not the host's alone
    asked = decide(Findings(Outcome("done", "exited 0", 0), REPRO, ktap=_ran(1), count=7227,
                            pmiss=pmiss.p_miss(None, 7227, "REFRESH cycles"), host_share=0.4, count_target=5000))
    assert asked.retry is None  # --count 5000 ended it, not its time


def test_a_bisection_judges_a_step_by_the_calibration_for_the_accelerator_it_ran_under():
    from harness.drivers.bisect.steps import StepPolicy
    from harness.drivers.options import Options
    policy = StepPolicy("perf-refresh", Options())  # its calibration was measured under TCG
    assert policy.calibration("tcg") is not None
    assert policy.calibration("kvm") is None  # a KVM step does not borrow TCG's hang rate
    assert pmiss.load_file("perf-refresh").mismatch(key("perf-refresh", accel="")) == \
        "no calibration for a run whose accelerator is not known"


def test_calibrate_keys_its_file_by_the_runs_accelerator_and_writes_where_the_user_may(tmp_path, monkeypatch):
    """Three recorded VULNERABLE runs of perf-refresh, the second retried under
    tcg-single after an emulator fault: the file holds for tcg runs and the
    retried run is left out of the rate. An installed kstall writes a
    built-in's calibration into the user's cache, and reads it from there."""
    import copy
    import json as json_
    from recorded import FIXTURES
    from harness.analysis.record import RunRecord
    from harness.base import paths
    from harness.drivers import calibrate, verify
    from harness.drivers.options import Options
    base = json_.loads((FIXTURES / "perf-refresh-6.16.12-4cpu" / "run.json").read_text())
    docs = []
    for i, accel in enumerate(("tcg", "tcg-single", "tcg")):
        d = copy.deepcopy(base)
        d["id"], d["vm"]["accel"] = f"run-{i}", accel
        d["attempts"] = [{"attempt": 1, "accel": "tcg"}] + ([{"attempt": 2, "accel": accel}] if accel != "tcg" else [])
        docs.append(d)
    made = iter(docs)

    class Result:
        def __init__(self, doc):
            self.record = RunRecord.from_json(doc)
    monkeypatch.setattr(verify, "verify", lambda *a, **k: Result(next(made)))
    monkeypatch.setenv("KSTALL_CACHE", str(tmp_path))
    monkeypatch.setattr(paths, "INSTALLED", True)
    assert calibrate.run("debian:6.16.12", "perf-refresh", Options(), 3, True, lambda m: None) == 0
    written = tmp_path / "calibration" / "builtin" / "perf-refresh.toml"
    text = written.read_text()
    assert 'accel = "tcg"' in text and text.count("[[run]]") == 2 and "run-1" not in text
    assert written.parent in reproducers.load("perf-refresh").calibration_dirs


def test_a_calibrated_p_miss_does_not_hold_where_the_host_kept_the_vcpus_waiting():
    """debian:6.1.170-rt's futex-requeue-pi beside two CPU-bound loops: 408
    passes without its hang, "P(miss) 3e-07", with its vCPUs waiting for a
    host CPU 54 % of the run (a race between two CPUs needs both running).
    Over MAX_HOST_SHARE the P(miss) is unknown, and the verdict says so."""
    c = cal([10, 20, 30])
    quiet = pmiss.p_miss(c, 408, "timed-out requeue-PI waits", host_share=0.14)
    assert quiet["p_miss"] is not None and "host_busy" not in quiet
    busy = pmiss.p_miss(c, 408, "timed-out requeue-PI waits", host_share=0.542)
    assert busy["p_miss"] is None and busy["host_busy"] == 0.542
    assert busy["text"] == "P(miss) unknown (the host kept the vCPUs waiting 54% of the run: a calibrated rate " \
                           "holds up to 30%)"
    assert pmiss.p_miss(None, 408, "x", host_share=0.9).get("host_busy") is None  # nothing claimed to withdraw
    v = done(["ok 1 perf-refresh"], 12000, pmiss.p_miss(c, 12000, "REFRESH cycles", host_share=0.542))
    assert v.verdict == "NOT_REPRODUCED" and v.confidence == "low"
    assert v.reason.endswith("P(miss) unknown (the host kept the vCPUs waiting 54% of the run: a calibrated rate "
                             "holds up to 30%)")
    v = done(["ok 1 perf-refresh"], 12000, pmiss.p_miss(c, 12000, "REFRESH cycles", host_share=0.2))
    assert v.verdict == "NOT_REPRODUCED" and v.confidence == "high"


def test_a_p_miss_target_a_busy_host_kept_from_being_checked_says_so_not_calibrate_first():
    pm = pmiss.p_miss(cal([10, 20, 30]), 962, "NMI-context reserves", host_share=0.53)
    v = done(["ok 1 perf-refresh"], 12000, pm, pmiss_target=1e-9, pmiss_given=True)
    assert v.verdict == "INCONCLUSIVE" and "calibrate first" not in v.reason
    assert v.reason.endswith("the host kept the vCPUs waiting 53% of the run: a calibrated rate holds up to 30%), "
                             "so --pmiss 1e-09 cannot be checked"), v.reason
