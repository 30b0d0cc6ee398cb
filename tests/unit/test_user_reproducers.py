# SPDX-License-Identifier: GPL-2.0
"""A reproducer is whatever the user has: a C file, an executable, a data file
and its directory, in the built-ins' shape; and what kstall makes of a
program that knows nothing of it (its own failure, a hang no signature names,
a hang of another bug's)."""
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from recorded import load_samples

from harness.analysis import classify, cpu_state, sleeping
from harness.analysis.ktap import Ktap
from harness.analysis.outcome import Outcome
from harness.analysis.decide import decide
from harness.analysis.findings import Findings, ProcessReading
from harness.base import paths, reproducers
from harness.drivers.plan import repro_arguments
from harness.drivers.options import Options
from images.guest import programs

PROGRAMS = Path(__file__).resolve().parents[1] / "programs"  # this checkout's, whichever tree is tested


def test_a_c_file_is_a_generic_reproducer_named_after_it():
    r = reproducers.resolve(str(PROGRAMS / "other_refresh.c"))
    assert r.name == r.binary == "other_refresh" and r.generic and not r.builtin
    assert r.count_name == "runs" and r.min_count == 1 and r.sleep_after_s > 0
    assert repro_arguments(r, Options(), 5, 30) == []  # no kstall arguments for a program that knows none
    assert reproducers.resolve("perf-refresh").builtin and not reproducers.resolve("perf-refresh").generic


def test_unknown_names_and_files_are_usage_errors_that_say_what_is_accepted():
    with pytest.raises(reproducers.ReproducerError, match="a C file, an executable"):
        reproducers.resolve("no-such-reproducer")
    with pytest.raises(reproducers.ReproducerError, match="no such reproducer file"):
        reproducers.resolve("./missing.c")


def test_a_data_file_finds_its_program_signatures_and_calibration_beside_it(tmp_path):
    shutil.copy(PROGRAMS / "other_refresh.c", tmp_path / "mine.c")
    (tmp_path / "signatures").mkdir()
    (tmp_path / "my-hang.toml").write_text('name = "my-hang"\nsource = "mine.c"\nmin_count = 3\n'
                                           '[kernel]\noptions = ["PERF_EVENTS"]\n')
    for spec in (tmp_path / "my-hang.toml", tmp_path):
        r = reproducers.resolve(str(spec))
        assert r.name == "my-hang" and r.source == str(tmp_path / "mine.c") and r.min_count == 3
        assert r.signatures == str(tmp_path / "signatures") and r.calibration_dir == tmp_path / "calibration"
        assert r.needs.options == ("PERF_EVENTS",)
    (tmp_path / "other.toml").write_text('name = "x"\nsource = "mine.c"\n')
    with pytest.raises(reproducers.ReproducerError, match="exactly one"):
        reproducers.resolve(str(tmp_path))


def test_a_c_file_builds_once_and_a_compile_error_shows_the_compiler(tmp_path):
    bad = tmp_path / "bad.c"
    bad.write_text("int main(void) { return undeclared; }\n")
    with pytest.raises(programs.BuildError, match="undeclared"):
        programs.build_c(bad)
    good = programs.build_c(PROGRAMS / "other_refresh.c")
    assert good.is_file() and os.access(good, os.X_OK)
    assert programs.build_c(PROGRAMS / "other_refresh.c") == good
    assert programs.libraries(good) == []  # static


def test_a_dynamic_executable_goes_in_with_its_libraries_and_loader():
    files = programs.guest_files(Path("/bin/true"), "true")
    assert "bin/true" in files
    assert any(name.startswith(("lib64/ld-linux", "lib/x86_64-linux-gnu/ld-linux")) for name in files)
    assert any("libc.so" in name for name in files)


def generic_run(lines: list[str]) -> Ktap:
    k = Ktap()
    for line in lines:
        k.feed(line)
    return k


REPRO = reproducers.resolve(str(PROGRAMS / "other_refresh.c"))
DONE = Outcome("done", "reproducer exited with code 0", 0)


def test_a_program_that_exits_non_zero_failed_on_its_own_with_its_output():
    k = generic_run(["KTAP version 1", "1..1", "perf_event_open: No such device",
                     "# result count=0 elapsed_ms=3 exit=2", "not ok 1 other_refresh # FAIL it exited 2 on run 1"])
    v = decide(Findings(DONE, REPRO, ktap=k))
    assert v.verdict == "FAILED" and v.exit_code == 5
    assert "it exited 2 on run 1" in v.reason and "perf_event_open: No such device" in v.reason


def test_a_program_whose_own_tap_fails_failed_and_a_skip_is_inconclusive():
    k = generic_run(["KTAP version 1", "1..1", "TAP version 13", "1..2", "ok 1 first", "not ok 2 second",
                     "# result count=1 elapsed_ms=3 exit=0", "ok 1 other_refresh"])
    assert decide(Findings(DONE, REPRO, ktap=k, count=1)).verdict == "FAILED"
    k = generic_run(["KTAP version 1", "1..1", "# result count=0 elapsed_ms=3 exit=4",
                     "ok 1 other_refresh # SKIP it exited 4 (kselftest's skip)"])
    assert decide(Findings(DONE, REPRO, ktap=k)).verdict == "INCONCLUSIVE"
    k = generic_run(["KTAP version 1", "1..1", "# result count=3 elapsed_ms=3 exit=0", "ok 1 other_refresh"])
    assert decide(Findings(DONE, REPRO, ktap=k, count=3)).verdict == "NOT_REPRODUCED"


def freeze_without(*hidden: str):
    samples = load_samples("perf-refresh-6.16.12-4cpu")
    sigs = [s for s in classify.load_signatures() if s.name not in hidden]
    classes = classify.classify_samples(samples, sigs)
    return classes, cpu_state.analyze(samples, classes)


FREEZE = Outcome("freeze", "no heartbeat for 0.80s", 0)


def test_a_users_freeze_that_no_signature_names_is_its_finding_titled_from_the_cpus():
    classes, hang = freeze_without("hrtimer_cancel_self_deadlock")
    v = decide(Findings(FREEZE, REPRO, classes=classes, hang=hang))
    assert v.verdict == "VULNERABLE" and v.signature is None and v.title == "hang in cpu_clock_event_stop"
    assert "waiting in hrtimer_cancel, interrupts off" in v.summary and "waits for CPU0,CPU3" in v.summary


def test_a_reproducer_with_signatures_of_its_own_calls_another_hang_different():
    perf = reproducers.load("perf-refresh")
    classes, hang = freeze_without("hrtimer_cancel_self_deadlock")
    v = decide(Findings(FREEZE, perf, classes=classes, hang=hang, own_bug="perf-refresh"))
    assert v.verdict == "INCONCLUSIVE" and v.title == "hang in cpu_clock_event_stop"
    assert v.summary.startswith("a different hang")
    # a known bug's culprit, met by the user's program: named, and its finding
    classes, _ = freeze_without()
    v = decide(Findings(FREEZE, REPRO, classes=classes))
    assert v.verdict == "VULNERABLE" and v.signature == "hrtimer_cancel_self_deadlock"
    bpf = reproducers.load("bpf-ringbuf")
    v = decide(Findings(FREEZE, bpf, classes=classes, own_bug="bpf-ringbuf"))
    assert v.verdict == "INCONCLUSIVE" and "different hang" in v.summary


def test_signatures_for_a_reproducer_include_its_own_directory(tmp_path):
    (tmp_path / "signatures").mkdir()
    (tmp_path / "signatures" / "mine.toml").write_text(
        'name = "mine"\ntitle = "my spin"\nrole = "culprit"\npriority = 1\n[match]\nat = ["my_spin"]\n')
    shutil.copy(PROGRAMS / "other_refresh.c", tmp_path / "mine.c")
    (tmp_path / "mine.toml").write_text('source = "mine.c"\n')
    r = reproducers.resolve(str(tmp_path))
    sigs, own = classify.signatures_for(r)
    assert own == "mine" and sigs[0].name == "mine" and sigs[0].bug == "mine"
    assert classify.signatures_for(REPRO)[1] == ""
    assert classify.signatures_for(reproducers.load("perf-refresh"))[1] == "perf-refresh"
    assert classify.signatures_for(reproducers.load("console-trigger"))[1] == ""


def test_a_sleeping_task_is_a_hung_task_titled_from_its_kernel_stack():
    line = ("KSTALL dstate tid=57 pid=55 comm=pipe_sleeper secs=10 wchan=__mutex_lock.constprop.0 "
            "kstack=__schedule+0x3c1/0xb70,schedule+0x27/0xf0,schedule_preempt_disabled+0x15/0x30,"
            "__mutex_lock.constprop.0+0x3a5/0x7e0,anon_pipe_write+0x5e/0x6b0,vfs_write+0x27c/0x450,"
            "ksys_write+0x6f/0xf0,do_syscall_64+0x82/0x970,entry_SYSCALL_64_after_hwframe+0x76/0x7e")
    from harness.guest.agent import AgentChannel
    a = AgentChannel(lambda s: None, 2)
    a.feed(line, 5.0)
    assert a.sleeping_at == 5.0
    hang = sleeping.SleepingHang(a.sleeping)
    assert hang.title == "INFO: task hung in anon_pipe_write"
    v = decide(Findings(Outcome("sleeping", "task pipe_sleeper:57 in D state for 10s", 0), REPRO, hang=hang))
    assert v.verdict == "VULNERABLE" and v.title == "INFO: task hung in anon_pipe_write"


def test_the_c_build_is_what_the_builtins_get_kselftest_h_on_the_include_path(tmp_path):
    src = tmp_path / "uses_kselftest.c"
    src.write_text('#include "kselftest.h"\nint main(void) { ksft_print_header(); ksft_exit_pass(); }\n')
    if not (paths.build_dir() / "kselftest" / "kselftest.h").exists():
        subprocess.run(["make", "-C", str(paths.REPO), "guest"], check=True, capture_output=True)
    assert programs.build_c(src).is_file()


def test_a_bisection_step_counts_only_the_bad_ends_hang_and_a_first_run_hang_tells_no_rate():
    from harness.analysis.record import failed
    from harness.analysis.verdict import Verdict
    from harness.drivers.bisect.steps import StepPolicy
    policy = StepPolicy(str(PROGRAMS / "other_refresh.c"), Options())
    bad = failed("x", "VULNERABLE")
    bad.verdict = Verdict("VULNERABLE", "freeze", signature="hrtimer_cancel_self_deadlock")
    policy.learn_from_bad_end(bad)
    assert policy.calibration("tcg") is None  # hung in its first run: no rate to build on
    assert policy.different_hang(bad.verdict) == ""
    other = Verdict("VULNERABLE", "sleeping", title="INFO: task hung in pipe_write")
    assert "a different hang than at the bad end: INFO: task hung in pipe_write" in policy.different_hang(other)
    builtin = StepPolicy("perf-refresh", Options())
    builtin.learn_from_bad_end(bad)
    assert builtin.calibration("tcg") is not None and builtin.different_hang(other) == ""  # its own signatures decide


def test_a_deadlock_cycle_in_a_users_stuck_program_is_its_finding_and_another_reproducers_different_hang():
    from harness.analysis.thread_hang import Analysis, Wait
    a = Analysis([], [], waits=[Wait(7, 8, 0x10, "mutex"), Wait(8, 7, 0x20, "mutex")])
    a.cycles = [a.waits]
    stuck = Outcome("stuck", "progress count stuck at 0 for 30s", 0)
    v = decide(Findings(stuck, REPRO, process=ProcessReading(a, "")))
    assert v.verdict == "VULNERABLE" and v.title == "user-space deadlock: 2 threads, mutex -> mutex"
    assert "deadlock: LWP 7 <-> LWP 8" in v.summary
    v = decide(Findings(stuck, REPRO, process=ProcessReading(a, ""), own_bug="other_refresh"))
    assert v.verdict == "INCONCLUSIVE" and "different hang" in v.summary
