# SPDX-License-Identifier: GPL-2.0
"""Classification of recorded real dumps against the signature data files."""
import pytest
from recorded import load_samples

from harness.analysis import classify, cpu_state
from harness.base import reproducers

REPRO = reproducers.load("perf-refresh")


@pytest.fixture(scope="module")
def sigs():
    return classify.load_signatures()


def test_signatures_load_and_are_ordered(sigs):
    names = [s.name for s in sigs]
    assert {"hrtimer_cancel_self_deadlock", "csd_lock_wait_victim", "idle"} <= set(names)
    assert [s.priority for s in sigs] == sorted((s.priority for s in sigs), reverse=True)


def test_clone_suffixes_are_ignored():
    assert classify.base_name("hrtimer_try_to_cancel.part.0") == "hrtimer_try_to_cancel"
    assert classify.base_name("set_ptes.isra.0") == "set_ptes"
    assert classify.base_name("foo.constprop.0.isra.0") == "foo"
    assert classify.base_name("foo.cold") == "foo"


def test_hung_6_16_12_has_culprits_and_a_victim(sigs):
    classes = classify.classify_samples(load_samples("perf-refresh-6.16.12-4cpu"), sigs)
    roles = {c.cpu: c.signature.name for c in classes}
    assert "hrtimer_cancel_self_deadlock" in roles.values()
    assert "csd_lock_wait_victim" in roles.values()
    culprits = [c for c in classes if c.signature.role == "culprit"]
    assert all(c.stuck and c.seen[c.signature.name] == c.samples for c in culprits)
    line = classify.summarize(classes)
    assert line.startswith("hrtimer_cancel self-deadlock on CPU")
    assert "csd_lock_wait victim on CPU" in line


def test_spin_loop_through_helpers_is_one_class(sigs):
    """Samples caught the loop in hrtimer_cancel, hrtimer_try_to_cancel.part.0
    and _raw_spin_lock_irqsave: all the same self-deadlock, and stuck."""
    samples = load_samples("perf-refresh-6.16.12-spinloop")
    pcs = {c["frames"][0]["function"] for s in samples for c in s["cpus"]}
    assert {"hrtimer_try_to_cancel.part.0", "_raw_spin_lock_irqsave"} & pcs
    classes = classify.classify_samples(samples, sigs)
    culprits = [c for c in classes if c.signature.name == "hrtimer_cancel_self_deadlock"]
    assert len(culprits) == 2 and all(c.stuck for c in culprits)


def test_csd_victim_needs_no_dwarf_and_matches_inlined_spelling(sigs):
    victim = next(s for s in sigs if s.name == "csd_lock_wait_victim")
    dwarf = {"regs": {"cs": "0x10"}, "frames": [
        {"function": "csd_lock_wait", "inlined": True},
        {"function": "smp_call_function_many_cond"},
        {"function": "on_each_cpu_cond_mask"}]}
    no_dwarf = {"regs": {"cs": "0x10"}, "frames": [{"function": "smp_call_function_many_cond"}]}
    assert classify.matches(victim, dwarf) and classify.matches(victim, no_dwarf)


def test_user_mode_and_unknown(sigs):
    assert classify.classify_cpu({"regs": {"cs": "0x33"}, "frames": []}, sigs).name == "user"
    assert classify.classify_cpu({"regs": {"cs": "0x10"}, "frames": [{"function": "memcpy"}]}, sigs).name == "unknown"


def test_hrtimer_cancel_without_perf_below_is_not_the_bug(sigs):
    cpu = {"regs": {"cs": "0x10"}, "frames": [{"function": "hrtimer_cancel"}, {"function": "tick_nohz_stop_tick"},
                                               {"function": "do_idle"}]}
    assert classify.classify_cpu(cpu, sigs).name != "hrtimer_cancel_self_deadlock"


def test_real_dwarf_dump_shows_the_inlined_csd_lock_wait(sigs):
    """GDB with Debian's 7.3.4 vmlinux (-dbg package): csd_lock_wait appears as
    an inlined frame inside smp_call_function_many_cond."""
    cpus = load_samples("dwarf-7.3.4")[0]["cpus"]
    dwarf = [c for c in cpus if c["unwinder"] == "dwarf"]
    assert dwarf and dwarf[0]["frames"][0]["function"] == "csd_lock_wait" and dwarf[0]["frames"][0]["inlined"]
    assert dwarf[0]["frames"][1]["function"] == "smp_call_function_many_cond"
    assert classify.classify_cpu(dwarf[0], sigs).name == "csd_lock_wait_victim"


def test_text_patching_stalled_by_the_emulator_is_an_error_tried_again(sigs):
    """6.1.192 under TCG: bpf-ringbuf detached its programs; CPU1 waits in
    text_poke_bp_batch's IPI, CPU0 keeps entering exc_int3 at __schedule."""
    from harness.analysis.hang_verdicts import cpus
    from harness.analysis.findings import Findings
    from harness.analysis.outcome import Outcome
    classes = classify.classify_samples(load_samples("bpf-ringbuf-6.1.192-text-poke"), sigs)
    by_cpu = {c.cpu: c.signature for c in classes}
    assert by_cpu[1].name == "text_poke_sync_wait" and by_cpu[1].role == "infra"
    assert not any(c.signature.role == "culprit" for c in classes)
    v = cpus(Findings(Outcome("freeze", "no heartbeat for 3.24s", 0.0), REPRO, classes=classes))
    assert v.verdict == "ERROR" and v.retryable and v.reason.startswith("emulator fault: freeze")
    assert "text patching waits for another CPU (emulator fault) on CPU1" in v.reason
    # a TLB shootdown's waiter is still a csd_lock_wait victim
    victim = {"regs": {"cs": "0x10"}, "frames": [{"function": "smp_call_function_many_cond"},
                                                  {"function": "on_each_cpu_cond_mask"},
                                                  {"function": "flush_tlb_mm_range"}]}
    assert classify.classify_cpu(victim, sigs).name == "csd_lock_wait_victim"


def test_perfs_first_event_waiting_on_patched_text_is_an_error_tried_again(sigs):
    """6.1.170 under TCG: perf-sigtrap's first perf_event_open turned perf's
    scheduler hooks on; CPU1 waits in synchronize_rcu() inside
    perf_event_alloc(), CPU0 keeps re-entering the patched __schedule()."""
    from harness.analysis.hang_verdicts import cpus
    from harness.analysis.findings import Findings
    from harness.analysis.outcome import Outcome
    classes = classify.classify_samples(load_samples("perf-sigtrap-6.1.170-static-key-patch"), sigs)
    by_cpu = {c.cpu: c.signature for c in classes}
    assert by_cpu[1].name == "perf_static_key_patch_wait" and by_cpu[1].role == "infra"
    v = cpus(Findings(Outcome("freeze", "no heartbeat for 3.22s", 0.0), REPRO, classes=classes))
    assert v.verdict == "ERROR" and v.retryable


def test_cpus_re_entering_the_int3_planted_in_schedule_are_an_error_tried_again(sigs):
    """6.1.192 under TCG: as perf-sigtrap's threads exited, both CPUs sat at
    __schedule+0x280 or in exc_int3 just past it in all three samples, with
    no CPU patching; it used to be INCONCLUSIVE, "a different hang"."""
    from harness.analysis.hang_verdicts import cpus
    from harness.analysis.findings import Findings
    from harness.analysis.outcome import Outcome
    classes = classify.classify_samples(load_samples("perf-sigtrap-6.1.192-int3-loop"), sigs)
    assert {c.cpu: c.signature.name for c in classes} == {0: "schedule_int3_reentry", 1: "schedule_int3_reentry"}
    v = cpus(Findings(Outcome("freeze", "no heartbeat for 3.24s", 0.0), REPRO, classes=classes))
    assert v.verdict == "ERROR" and v.retryable and v.reason.startswith("emulator fault: freeze")


def test_cpus_that_oopsed_on_the_int3_in_schedule_and_panicked_are_an_error_tried_again(sigs):
    """6.16.12 under TCG, a default matrix's perf-sigtrap: both CPUs hit the
    int3 planted in __schedule, oopsed and panicked at once (CPU0 in
    panic_smp_self_stop, CPU1 in native_stop_other_cpus' delay), with nothing
    on the console; it used to be INCONCLUSIVE, "a different hang"."""
    from harness.analysis.hang_verdicts import cpus
    from harness.analysis.findings import Findings
    from harness.analysis.outcome import Outcome
    classes = classify.classify_samples(load_samples("perf-sigtrap-6.16.12-int3-panic"), sigs)
    assert {c.cpu: c.signature.name for c in classes} == {0: "schedule_int3_oops_panic", 1: "schedule_int3_oops_panic"}
    v = cpus(Findings(Outcome("freeze", "no heartbeat for 1.43s", 0.0), reproducers.load("perf-sigtrap"),
                      classes=classes))
    assert v.verdict == "ERROR" and v.retryable and v.reason.startswith("emulator fault: freeze")
    # a panic that is not an oops on that int3 is no emulator fault
    other = [{"cpu": 0, "regs": {"cs": "0x10"}, "frames": [{"function": "panic_smp_self_stop"}, {"function": "panic"},
                                                          {"function": "oops_end"}, {"function": "exc_page_fault"},
                                                          {"function": "__schedule"}]}]
    assert classify.classify_samples([{"cpus": other}], sigs)[0].signature.role != "infra"


def test_a_cpu_that_panicked_on_an_int3_anywhere_in_the_kernel_is_an_emulator_fault(sigs):
    """6.12.118 under TCG, a syzkaller reproducer writing hist triggers (a
    static key flipped): CPU1 oopsed on the int3 planted in try_to_wake_up
    and waited in native_stop_other_cpus for CPU0, spinning with interrupts
    off on the lock CPU1 held. It was "VULNERABLE: a different hang: hang in
    try_to_wake_up", CPU1 called idle; the panic alone proves the fault."""
    from harness.analysis.hang_verdicts import cpus
    from harness.analysis.findings import Findings
    from harness.analysis.outcome import Outcome
    classes = classify.classify_samples(load_samples("syzkaller-6.12.118-int3-panic"), sigs)
    assert classes[1].signature.name == "int3_oops_panic" and classes[0].signature.role == "unknown"
    v = cpus(Findings(Outcome("freeze", "no heartbeat for 0.33s", 0.0), REPRO, classes=classes))
    assert v.verdict == "ERROR" and v.retryable and v.reason.startswith("emulator fault: freeze")


def test_one_cpu_that_panicked_on_the_int3_in_schedule_is_an_emulator_fault_beside_a_spinner(sigs):
    """6.12.116 under TCG, a bisection step of refresh_or_sleep on a busy
    host: only CPU1 oopsed on the int3 in __schedule and panicked, and
    CPU0, spinning in idle's softirq on the runqueue lock CPU1 held, was
    called idle. It was "VULNERABLE: hang in oops_end" and the step was
    skipped as another hang; the panic alone proves the fault. CPU0 is no
    longer idle: it is in its interrupt, not in the idle loop that
    interrupt cut into."""
    from harness.analysis.hang_verdicts import cpus
    from harness.analysis.findings import Findings
    from harness.analysis.outcome import Outcome
    samples = load_samples("refresh-or-sleep-6.12.116-int3-panic")
    classes = classify.classify_samples(samples, sigs)
    assert {c.cpu: c.signature.name for c in classes} == {0: "unknown", 1: "schedule_int3_oops_panic"}
    hang = cpu_state.analyze(samples, classes)
    cpu_state.note_waits(classes, hang)
    assert classes[0].stuck and "spinning" in classes[0].title, classes[0].title
    v = cpus(Findings(Outcome("freeze", "no heartbeat for 0.39s", 0.0), REPRO, classes=classes, accel="tcg"))
    assert v.verdict == "ERROR" and v.retryable and v.reason.startswith("emulator fault: freeze")
    # single-threaded, where no vCPU runs code another patches, the same CPUs are the kernel's crash
    v = cpus(Findings(Outcome("freeze", "no heartbeat for 0.39s", 0.0), REPRO, classes=classes, accel="tcg-single",
                      hang=hang))
    assert v.verdict == "CRASHED" and not v.retryable and v.title == "Oops: int3 in __schedule", v.reason
    assert "tcg-single" in v.reason


@pytest.mark.parametrize("fixture", ["bpf-ringbuf-6.16.12-held-locks", "bpf-ringbuf-6.16.12-rq-lock",
                                     "bpf-ringbuf-6.16.12-rqspinlock"])
def test_a_cpu_no_signature_names_is_described_by_its_state_never_as_unknown(fixture):
    samples = load_samples(fixture)
    classes = classify.classify_samples(samples, classify.load_signatures())
    unnamed = [c.cpu for c in classes if c.signature.role == classify.Role.UNKNOWN]
    assert unnamed and "unknown on" in classify.summarize(classes)  # until their states are read
    cpu_state.note_waits(classes, cpu_state.analyze(samples, classes))
    summary = classify.summarize(classes)
    assert "unknown" not in summary and all(f"CPU{n}" in summary for n in unnamed), summary
    assert all(c.to_json()["class"] != "unknown" for c in classes)


def _with_cpu(samples: list[dict], cpu: int, donor: list[dict], donor_cpu: int) -> list[dict]:
    """samples with one CPU's dumps taken from another recording's CPU."""
    out = []
    for mine, theirs in zip(samples, donor):
        dump = next(c for c in theirs["cpus"] if c["cpu"] == donor_cpu) | {"cpu": cpu}
        out.append(mine | {"cpus": [dump if c["cpu"] == cpu else c for c in mine["cpus"]]})
    return out


def test_a_real_hang_beside_one_cpu_that_looks_like_an_emulator_fault_is_classified_as_a_hang(sigs):
    """perf_static_key_patch_wait alone (a task opening a perf event waits
    for an RCU grace period) is what any hang that stops RCU looks like on
    that task's CPU. Its whole shape is the other CPU re-entering the int3;
    here the other CPU is the recorded 6.16.12 CPU stuck spinning on a lock
    in try_to_wake_up, interrupts off: a hang, never an ERROR."""
    from harness.analysis.findings import Findings
    from harness.analysis.hang_verdicts import cpus
    from harness.analysis.outcome import Outcome
    fault = load_samples("perf-sigtrap-6.1.170-static-key-patch")
    real = _with_cpu(fault, 0, load_samples("bpf-ringbuf-6.16.12-rq-lock"), 1)
    for samples, verdict in ((fault, "ERROR"), (real, "VULNERABLE")):
        classes = classify.classify_samples(samples, sigs)
        assert {c.cpu: c.signature.name for c in classes}[1] == "perf_static_key_patch_wait"
        hang = cpu_state.analyze(samples, classes)
        cpu_state.note_waits(classes, hang)
        v = cpus(Findings(Outcome("freeze", "no heartbeat for 3.22s", 0.0), reproducers.load("console-trigger"),
                          classes=classes, hang=hang))
        assert v.verdict == verdict, v.line()
    assert classify.emulator_fault(classify.classify_samples(fault, sigs)) is not None
    assert v.title == "hang in try_to_wake_up" and not v.retryable


def test_an_infra_signature_must_say_its_whole_shape(tmp_path):
    (tmp_path / "x.toml").write_text('name = "x"\ntitle = "x"\nrole = "infra"\n[match]\nat = ["f"]\n')
    with pytest.raises(ValueError, match="needs \\[shape\\] others"):
        classify.load_signatures(tmp_path)


def test_a_culprit_that_moved_between_samples_counts_as_its_hang_kind_says(sigs):
    """A self-deadlock never leaves its loop: hrtimer_cancel in 2 of 3
    samples is not that culprit. An NMI rqspinlock wait times out and retries:
    in 1 of 3 (recorded on 6.16.12) it is."""
    spin = load_samples("perf-refresh-6.16.12-waits")
    moved = _with_cpu(spin[:2], 0, spin, 0) + _with_cpu(spin[2:], 0, load_samples("bpf-ringbuf-6.16.12-rq-lock")[2:], 1)
    by_cpu = {c.cpu: c for c in classify.classify_samples(moved, sigs)}
    assert by_cpu[0].seen.get("hrtimer_cancel_self_deadlock") == 2
    assert by_cpu[0].signature.role != "culprit"
    assert {c.cpu: c.signature.name for c in classify.classify_samples(spin, sigs)}[0] == \
        "hrtimer_cancel_self_deadlock"
    held = {c.cpu: c for c in classify.classify_samples(load_samples("bpf-ringbuf-6.16.12-held-locks"), sigs)}
    assert held[0].seen["rqspinlock_ringbuf_nmi"] == 1 and held[0].signature.name == "rqspinlock_ringbuf_nmi"
    assert {s.name: s.samples for s in sigs}["futex_requeue_pi_livelock"] == "any"


def test_a_signatures_samples_rule_is_one_kstall_knows(tmp_path):
    (tmp_path / "x.toml").write_text('name = "x"\ntitle = "x"\nrole = "culprit"\n[match]\nat = ["f"]\n'
                                     'samples = "2 of 3"\n')
    with pytest.raises(ValueError, match="match.samples must be one of every, most, any"):
        classify.load_signatures(tmp_path)


def test_a_cpu_caught_at_the_patched_byte_as_often_as_in_exc_int3_completes_the_faults_shape(sigs):
    """6.1.192, a fresh clone's make test: CPU1 waits in text_poke_bp_batch's
    IPI; CPU0 re-enters the int3 planted in __schedule, in exc_int3 in one
    sample and at the patched byte itself in two (no signature names that
    alone). The whole fault: an ERROR tried again, not 'a different hang'."""
    from harness.analysis.findings import Findings
    from harness.analysis.hang_verdicts import cpus
    from harness.analysis.outcome import Outcome
    samples = load_samples("bpf-ringbuf-6.1.192-text-poke-int3-byte")
    classes = classify.classify_samples(samples, sigs)
    assert classes[0].seen == {"unknown": 2, "schedule_int3_reentry": 1}
    assert classes[1].signature.name == "text_poke_sync_wait"
    hang = cpu_state.analyze(samples, classes)
    v = cpus(Findings(Outcome("freeze", "no heartbeat for 1.42s", 0.0), reproducers.load("bpf-ringbuf"),
                      classes=classes, hang=hang, own_bug="bpf-ringbuf"))
    assert v.verdict == "ERROR" and v.retryable, v.line()


def test_a_cpu_caught_at_the_patched_byte_in_every_sample_completes_the_faults_shape(sigs):
    """6.1.192, a fresh clone's make run (perf-sigtrap, the default matrix):
    CPU1 waits for patched text in perf_event_alloc and keeps taking the int3
    at __schedule+0x280; CPU0 sat at that very byte in all three samples and
    never in exc_int3. The whole fault: an ERROR tried again, not 'a
    different hang in __schedule' (the MISMATCH that run reported). A CPU at
    any other address beside the same CPU1 is still a hang."""
    from harness.analysis.findings import Findings
    from harness.analysis.hang_verdicts import cpus
    from harness.analysis.outcome import Outcome
    samples = load_samples("perf-sigtrap-6.1.192-int3-byte")
    classes = classify.classify_samples(samples, sigs)
    assert classes[0].seen == {"unknown": 3} and classes[0].pc == "__schedule+0x280/0xa00"
    assert classes[1].signature.name == "perf_static_key_patch_wait"
    assert classify.emulator_fault(classes) is classes[1]
    v = cpus(Findings(Outcome("freeze", "no heartbeat for 1.36s", 0.0), reproducers.load("perf-sigtrap"),
                      classes=classes, own_bug="perf-sigtrap"))
    assert v.verdict == "ERROR" and v.retryable, v.line()
    classes[0].pc = "__schedule+0x524/0xa00"
    assert classify.emulator_fault(classes) is None


def test_a_cpu_spinning_in_an_interrupt_over_the_idle_loop_is_no_idle_cpu(sigs):
    """6.12.116's CPU0 spun with interrupts off in its idle loop's softirq,
    on a runqueue lock, in all 3 samples. Beside a CPU that is really idle
    (6.16.12's, in HLT), it is the hang's one stuck CPU, classified by its
    state: it was "idle", and the freeze INCONCLUSIVE, "no CPU stuck"."""
    from harness.analysis.findings import Findings
    from harness.analysis.hang_verdicts import cpus
    from harness.analysis.outcome import Outcome
    samples = _with_cpu(load_samples("refresh-or-sleep-6.12.116-int3-panic"), 1,
                        load_samples("perf-refresh-6.16.12-4cpu"), 2)
    classes = classify.classify_samples(samples, sigs)
    assert {c.cpu: c.signature.name for c in classes} == {0: "unknown", 1: "idle"}
    hang = cpu_state.analyze(samples, classes)
    cpu_state.note_waits(classes, hang)
    v = cpus(Findings(Outcome("freeze", "no heartbeat for 3.22s", 0.0), reproducers.load("console-trigger"),
                      classes=classes, hang=hang))
    assert v.verdict == "VULNERABLE" and "CPU0" in v.summary and "spinning" in v.summary, v.line()
