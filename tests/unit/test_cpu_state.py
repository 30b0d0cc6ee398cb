# SPDX-License-Identifier: GPL-2.0
"""A hang no signature names is classified from each CPU's state (recorded real dumps)."""
import json

from recorded import load_samples

from harness.analysis import classify, cpu_state
from harness.analysis.classify import Role


def without(*names: str) -> list[classify.Signature]:
    """The signatures, with some hidden (as if kstall had never heard of that bug)."""
    return [s for s in classify.load_signatures() if s.name not in names]


def generic(fixture: str, sigs: list[classify.Signature]) -> cpu_state.Hang:
    samples = load_samples(fixture)
    return cpu_state.analyze(samples, classify.classify_samples(samples, sigs))


def test_perf_freeze_without_its_signature_names_the_hrtimer_cancel_spinner_and_the_csd_waiter():
    for fixture in ("perf-refresh-6.16.12-4cpu", "perf-refresh-6.16.12-spinloop"):
        hang = generic(fixture, without("hrtimer_cancel_self_deadlock", "csd_lock_wait_victim"))
        by_cpu = {c.cpu: c for c in hang.cpus}
        culprits = [c.cpu for c in hang.culprits]
        assert hang.title == "hang in cpu_clock_event_stop"
        assert all(by_cpu[n].state == "hrtimer_cancel" and by_cpu[n].irqs_off and by_cpu[n].stuck for n in culprits)
        assert by_cpu[1].state == "csd_wait" and by_cpu[1].role == Role.VICTIM and not by_cpu[1].irqs_off
        assert by_cpu[1].waits_for == culprits and len(culprits) == 2
        idle = [c for c in hang.cpus if c.state == "idle"]
        assert len(idle) == 1 and idle[0].role == Role.UNKNOWN
        assert "CPU1: waiting for another CPU in csd_lock_wait, interrupts on" in hang.summary()


def test_nmi_context_lock_spinner_is_named_in_nmi():
    hang = generic("bpf-ringbuf-6.16.12-nmi-culprit", without("rqspinlock_ringbuf_nmi", "rqspinlock_ringbuf_wait"))
    cpu0 = hang.cpus[0]
    assert cpu0.state == "rqspinlock"
    assert cpu0.nmi and cpu0.role == Role.CULPRIT and cpu0.function == "__bpf_ringbuf_reserve"
    assert hang.title == "hang in __bpf_ringbuf_reserve"


def test_cpus_that_move_between_samples_name_no_culprit():
    hang = generic("bpf-ringbuf-6.16.12-rqspinlock", without("rqspinlock_ringbuf_nmi", "rqspinlock_ringbuf_wait"))
    assert hang.title == "" and not hang.culprits and all(not c.stuck for c in hang.cpus)


def test_interrupts_flag_is_read_from_rflags():
    rules = cpu_state.Rules.load()
    cpu = {"cpu": 0, "regs": {"cs": "0x10", "eflags": "0x46"}, "frames": [{"function": "do_something"}]}
    assert cpu_state.state_of(cpu, rules).irqs_off
    assert not cpu_state.state_of(dict(cpu, regs={"cs": "0x10", "eflags": "0x246"}), rules).irqs_off
    assert cpu_state.state_of(dict(cpu, regs={"cs": "0x33", "eflags": "0x246"}), rules).state == "user"


def test_a_busy_program_clearing_pages_names_no_culprit():
    """Recorded: a program faulting in 64 MB again and again on two CPUs
    (6.1.170, --stuck-after 6): all 3 samples of both CPUs at
    clear_page_erms+0x7, interrupts on. Busy, not hung: its registers move."""
    hang = generic("busy-clear-pages-6.1.170", classify.load_signatures())
    assert not hang.culprits and hang.title == ""
    assert all(c.state == "running" and c.function == "clear_page_erms" and not c.irqs_off and not c.stuck
               for c in hang.cpus)


def test_a_cpu_running_with_interrupts_on_is_stuck_only_at_one_place():
    """The same samples with CPU1 held still in every one (its stack and
    registers those of the first), as a CPU stuck at one instruction would
    be: then it is stuck, and the culprit."""
    samples = load_samples("busy-clear-pages-6.1.170")
    for s in samples:
        s["cpus"][1] = json.loads(json.dumps(samples[0]["cpus"][1]))
    hang = cpu_state.analyze(samples, classify.classify_samples(samples, classify.load_signatures()))
    assert [c.cpu for c in hang.culprits] == [1] and hang.title == "hang in clear_page_erms"


def test_a_cpu_printing_while_the_console_grows_is_not_stuck():
    """Recorded: a syzkaller reproducer that drives a 6.1.170 guest into the
    OOM killer, whose task list CPU0 prints with interrupts off in every
    sample (UART wait, console_unlock, the tick inside it) while the console
    grew by 5 KB between the first sample and the last. It is printing."""
    samples = load_samples("printing-oom-6.1.170")
    assert samples[-1]["console_bytes"] > samples[0]["console_bytes"]
    hang = cpu_state.analyze(samples, classify.classify_samples(samples, classify.load_signatures()))
    cpu0 = hang.cpus[0]
    assert cpu0.state == "printing" and cpu0.irqs_off and not cpu0.stuck
    assert not hang.culprits and hang.title == ""


def test_a_cpu_in_the_console_path_while_nothing_is_printed_is_stuck():
    """The same samples with the console as it was at the first: a CPU that
    prints nothing there is stuck there, the culprit (as is one whose
    samples say nothing of the console)."""
    first = load_samples("printing-oom-6.1.170")[0]["console_bytes"]
    for printed in (first, None):
        samples = load_samples("printing-oom-6.1.170")
        for s in samples:
            s["console_bytes"] = printed
        hang = cpu_state.analyze(samples, classify.classify_samples(samples, classify.load_signatures()))
        assert [c.cpu for c in hang.culprits] == [0] and hang.cpus[0].stuck
