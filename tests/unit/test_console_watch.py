# SPDX-License-Identifier: GPL-2.0
"""Console report recognition and agent-channel parsing on recorded real output."""
import re
import socket
import time
from types import SimpleNamespace

from recorded import FIXTURES

from harness.analysis import console
from harness.analysis.ktap import Ktap
from harness.guest.watch import SUSPECT_AT, Calls, Limits, Watch
from harness.guest import agent_talk


def reports(name):
    return console.scan((FIXTURES / "consoles" / name).read_text(errors="replace"))


def test_rcu_stall_console_from_a_hung_6_16_12():
    rs = reports("6.16.12-rcu-stall.log")
    kinds = {(r.kind, r.name) for r in rs}
    assert ("stall", "rcu-stall") in kinds
    nmi = next(r for r in rs if r.name == "nmi-too-long")
    assert nmi.fields["handler"] == "nmi_cpu_backtrace_handler" and float(nmi.fields["ms"]) > 1
    assert nmi.guest_time is not None  # even from a line whose timestamp the UART garbled
    assert not [r for r in rs if r.kind in ("panic", "oops", "infra")]
    rcu = next(r for r in rs if r.name == "rcu-stall")
    assert "RIP: 0010:hrtimer_cancel+0x28/0x40" in "\n".join(rcu.excerpt)


def test_int3_oops_is_an_emulator_fault_not_a_crash():
    rs = reports("6.17.8-int3-oops.log")
    assert rs[0].kind == "infra" and rs[0].name == "tcg-text-poke-int3"
    assert "text" in rs[0].reason


def test_kernel_report_formats():
    pats = console.load_patterns()
    cases = {
        "[   41.1] Kernel panic - not syncing: Attempted to kill init! exitcode=0x00000009": ("panic", "init-died"),
        "[    3.2] Kernel panic - not syncing: softlockup: hung tasks": ("panic", "panic"),
        "[   22.7] watchdog: BUG: soft lockup - CPU#1 stuck for 22s! [perf-refresh:161]": ("stall", "soft-lockup"),
        "[   12.0] BUG: kernel NULL pointer dereference, address: 0000000000000008": ("oops", "null-dereference"),
        "[    9.1] Watchdog detected hard LOCKUP on cpu 2": ("stall", "hard-lockup"),
        "[    5.5] Oops: general protection fault, probably for non-canonical address": ("oops", "general-protection"),
        "[    1.0] csd: Detected non-responsive CSD lock (#1) on CPU#1, waiting 5000000032 ns for CPU#02":
            ("stall", "csd-lock-timeout"),
        "[   30.3] rcu: INFO: rcu_preempt self-detected stall on CPU": ("stall", "rcu-stall"),
        "[   30.3] WARNING: CPU: 1 PID: 77 at kernel/events/core.c:123 perf_foo+0x1/0x2": ("warning", "warning"),
        "Kernel panic - not syncing: VFS: Unable to mount root fs on unknown-block(0,0)": ("boot", "no-root"),
    }
    for line, (kind, name) in cases.items():
        r = console.match_line(line, pats)
        assert r is not None and (r.kind, r.name) == (kind, name), line
    assert console.match_line("[    1.0] clocksource: Switched to clocksource tsc", pats) is None


def test_ktap_from_a_recorded_agent_log():
    k = Ktap()
    for line in (FIXTURES / "perf-refresh-6.16.12-4cpu" / "agent.log").read_text().splitlines():
        if not line.startswith(("HB ", "KSTALL ", "# progress")):
            k.feed(line)
    assert k.lines[0] == "KTAP version 1" and not k.results  # it hung before a result
    done = Ktap()
    for line in ["KTAP version 1", "1..1", "# result count=10093 elapsed_ms=5127 other_signals=0",
                 "ok 1 perf-refresh"]:
        done.feed(line)
    assert done.results == [{"ok": True, "number": 1, "name": "perf-refresh", "directive": "", "reason": ""}]
    assert done.result_fields["count"] == "10093"


def test_a_trailing_heartbeat_does_not_undo_the_final_count():
    # the agent folds the last progress line into its heartbeats; one sent
    # after the result line carries the older count (CI saw 946 for 947)

    w = Watch(SimpleNamespace(console=None, agent=None, syms=None, started_at=0.0,
                          cfg=SimpleNamespace(cpus=2)), Limits(), patterns=[])
    for line in ["KTAP version 1", "# progress count=946 elapsed_ms=20000", "HB 1 5 946",
                 "# result count=947 elapsed_ms=20100", "HB 2 6 946", "ok 1 bpf-ringbuf"]:
        w.agent.feed(line, 1.0)
    assert w.agent.count == 947


def test_kselftest_output_and_the_runners_nesting():
    # kselftest.h's own lines, and kstall's diagnostics nested by the
    # kselftest runner (recorded from `make check-selftest` on 6.17.8)
    k = Ktap()
    for line in ["TAP version 13", "1..1", "# timeout set to 60", "# selftests: kstall: perf-refresh",
                 "# TAP version 13", "# 1..1", "# # progress count=171 elapsed_ms=103",
                 "# # result count=10017 elapsed_ms=5433 other_signals=0 bystander_unmaps=12029",
                 "# ok 1 perf-refresh", "# # Totals: pass:1 fail:0 xfail:0 xpass:0 skip:0 error:0",
                 "ok 1 selftests: kstall: perf-refresh"]:
        k.feed(line)
    assert k.result_fields["count"] == "10017"
    assert k.results == [{"ok": True, "number": 1, "name": "selftests: kstall: perf-refresh", "directive": "",
                          "reason": ""}]
    skip = Ktap()
    skip.feed("ok 1 # SKIP perf-refresh: perf_event_open: No such file or directory")
    assert skip.results[0]["directive"] == "SKIP" and skip.results[0]["reason"].startswith("perf-refresh:")


def _socket_vm():
    """A stand-in VM whose console, agent and symbol ports are socket pairs:
    (every pair, to close; the guest's end of the agent port; the VM)."""
    pairs = [socket.socketpair() for _ in range(3)]
    for ours, _ in pairs:
        ours.setblocking(False)
    (con, _), (agent, guest), (syms, _) = pairs
    vm = SimpleNamespace(console=con, agent=agent, syms=syms, started_at=time.monotonic(),
                         cfg=SimpleNamespace(cpus=2), alive=lambda: True, stopped=lambda: False)
    return pairs, guest, vm


def test_heartbeats_waiting_in_the_socket_while_kstall_was_busy_are_no_freeze():
    """A host too busy to read for a while (a long symbol store, a loaded CI
    runner) finds the guest's heartbeats queued up: that guest is alive."""
    pairs, guest, vm = _socket_vm()
    w = Watch(vm, Limits(freeze_after=0.8), patterns=[])
    guest.sendall(b"KSTALL hello uname=6.17.8 cpus=2 init=init\nHB 0 1000000 0\n")
    w._pump(0.2)
    w.agent.last_hb_at -= 5  # kstall did not read for 5 s...
    guest.sendall(b"HB 1 51000000 0\nHB 2 101000000 0\n")  # ...while the guest went on
    t0 = time.monotonic()
    out = w.watch()
    assert out.kind == "freeze" and w.agent.hb_count == 3, (out, w.agent.hb_count)
    assert time.monotonic() - t0 >= 0.7, "a freeze declared over heartbeats that were waiting to be read"
    for a, b in pairs:
        a.close()
        b.close()


def test_a_stuck_count_is_suspected_once_before_it_is_declared():
    """on_suspect (which gets GDB ready) fires once, part way to the limit."""
    pairs, guest, vm = _socket_vm()
    seen = []
    w = Watch(vm, Limits(freeze_after=30, stuck_after=0.5), patterns=[],
              calls=Calls(on_suspect=lambda: seen.append(time.monotonic())))
    guest.sendall(b"KSTALL hello uname=6.16.12 cpus=2 init=init\nHB 0 1000000 0\n# progress count=0 elapsed_ms=1\n")
    w._pump(0.2)
    started = w.agent.count_changed_at
    out = w.watch()
    assert out.kind == "stuck" and len(seen) == 1, (out, seen)
    assert started + 0.5 * SUSPECT_AT <= seen[0] < out.at
    for a, b in pairs:
        a.close()
        b.close()


def test_a_guest_that_waits_at_its_gate_too_long_times_out():
    pairs, guest, vm = _socket_vm()
    try:
        gate = SimpleNamespace(try_open=lambda: False)  # the cores never come free
        w = Watch(vm, Limits(gate_timeout=0.3), gate=gate)
        guest.sendall(b"KSTALL hello uname=x cpus=2\nKSTALL ready\n")
        out = w.watch()
        assert out.kind == "timeout" and "at the gate for free cores" in out.detail, out
    finally:
        for a, b in pairs:
            a.close()
            b.close()


def test_a_freeze_is_a_silence_past_its_floor_plus_what_the_host_held_the_guest_back_by():
    from types import SimpleNamespace
    held: list[float | None] = [0.0]
    w = SimpleNamespace(limits=Limits(freeze_after=0.8, freeze_floor=0.3), agent=SimpleNamespace(last_hb_at=10.0),
                        calls=Calls(host_delay=lambda t0, t1: held[0]))
    after = lambda now: Watch.freeze_after(w, now)  # noqa: E731
    assert after(10.1) == 0.3 and after(10.35) == 0.3  # a quiet host: the floor
    held[0] = 250.0  # the host kept a vCPU or QEMU's main loop waiting 250 ms of the silence
    assert after(10.35) == 0.55
    held[0] = 900.0  # never past the ceiling
    assert after(10.5) == 0.8
    held[0] = None  # the gauge read nothing: the fixed ceiling
    assert after(10.5) == 0.8
    w.limits.freeze_floor = None  # --freeze-after: fixed
    held[0] = 0.0
    assert after(10.5) == 0.8


def test_a_still_count_is_stuck_past_its_limit_plus_what_the_host_held_the_guest_back_by():
    """Beside another kstall's guests, a kselftest runner's start took more
    than perf-refresh's 3 s: INCONCLUSIVE "stuck" on a kernel that is fine."""
    from types import SimpleNamespace
    held: list[float | None] = [0.0]
    w = SimpleNamespace(limits=Limits(stuck_after=3.0), agent=SimpleNamespace(count_changed_at=10.0),
                        calls=Calls(host_delay=lambda t0, t1: held[0]))
    after = lambda now: Watch.stuck_after(w, now)  # noqa: E731
    assert after(13.2) == 3.0
    held[0] = 1500.0  # a vCPU waited 1.5 s for a host CPU while the count was still
    assert after(13.2) == 4.5
    held[0] = None
    assert after(13.2) == 3.0
    w.calls = Calls()  # no gauge of the host
    assert after(13.2) == 3.0



def test_a_hang_with_no_culprit_on_a_host_that_held_the_guest_back_is_looked_at_twice_more():
    """A fixed 6.17.8 under the kselftest runner, beside the other half of
    make test: its count still 8.9 s, a vCPU waiting for a host CPU 5.7 s of
    it, every CPU moving between samples: INCONCLUSIVE "stuck" on its third
    look. A run resumes twice from a hang with no culprit; on such a host, four times."""
    from harness.analysis.outcome import Outcome
    from harness.drivers.watching import FALSE_ALARMS, false_alarms_allowed
    held: list[float | None] = [5740.0]
    w = SimpleNamespace(agent=SimpleNamespace(count_changed_at=10.0, last_hb_at=18.9),
                        calls=Calls(host_delay=lambda t0, t1: held[0]))
    share = lambda kind: Watch.host_share(w, Outcome(kind, "", 18.94))  # noqa: E731
    assert round(share("stuck"), 2) == 0.64 and false_alarms_allowed(share("stuck")) == FALSE_ALARMS + 2
    held[0] = 500.0  # a quiet host: what any silence was, it was the guest's
    assert false_alarms_allowed(share("stuck")) == FALSE_ALARMS
    held[0] = None  # the gauge read nothing
    assert share("stuck") is None and false_alarms_allowed(None) == FALSE_ALARMS
    held[0] = 20.0  # a freeze's silence is since the last heartbeat: 40 ms, half of it the host's
    assert round(share("freeze"), 2) == 0.5
    assert share("sleeping") is None  # not a stillness the host can make


def test_a_culprit_found_while_another_cpu_went_on_on_a_busy_host_is_looked_at_twice():
    """debian:6.18.15 has the bpf_timer fix; beside make test's other half it
    was "VULNERABLE: bpf_timer callbacks cancelling each other on CPU1;
    running in __hrtimer_cb_get_time (moving) on CPU0": CPU1 waited for the
    callback CPU0 ran, which the host kept from running (56 % of the run)."""
    from harness.analysis.classify import Role
    from harness.analysis.outcome import Outcome
    from harness.drivers.watching import seen_again

    def cpu(role, stuck, name="x"):
        return SimpleNamespace(signature=SimpleNamespace(role=role, name=name), stuck=stuck)
    run_share: list[float | None] = [0.14]
    r = SimpleNamespace(classes=[cpu(Role.CULPRIT, True), cpu(Role.UNKNOWN, False)],
                        host_wait_share=lambda w, outcome: run_share[0])
    w = SimpleNamespace(agent=SimpleNamespace(repro_started_at=1.0))
    out = Outcome("freeze", "no heartbeat for 0.80s", 9.0)
    assert not seen_again(r, w, out, 0.1, 1)  # a quiet host: the first look is the verdict
    assert seen_again(r, w, out, 0.48, 1)     # the silence was half the host's
    run_share[0] = 0.56
    assert seen_again(r, w, out, 0.1, 1)      # the run was
    assert not seen_again(r, w, out, 0.48, 2)  # the second look is the verdict
    r.classes[1] = cpu(Role.BENIGN, False, "user")
    assert seen_again(r, w, out, 0.1, 1)      # in user mode, going on
    for other in (cpu(Role.VICTIM, True), cpu(Role.BENIGN, True, "idle"), cpu(Role.CULPRIT, True)):
        r.classes[1] = other  # a true hang's other CPUs wait for it, idle, or are in it: one look
        assert not seen_again(r, w, out, 0.48, 1)


def test_an_oops_showing_a_cpu_state_no_cpu_can_be_in_is_an_emulator_fault():
    """A restored 6.16.12 guest double-faulted in kmem_cache_alloc_node with
    EFLAGS 06968242 (bits 22-31 are reserved, always 0): QEMU's fault, an
    ERROR tried again. The same oops with a state a CPU can be in is CRASHED."""
    from harness.analysis.decide import decide
    from harness.analysis.findings import Findings
    from harness.base import reproducers
    log = (FIXTURES / "consoles" / "6.16.12-restored-double-fault-bad-eflags.log").read_text()
    for text, kind, verdict in ((log, "infra", "ERROR"), (log.replace("EFLAGS: 06968242", "EFLAGS: 00010246"),
                                                           "oops", "CRASHED")):
        vm = SimpleNamespace(console=None, agent=None, syms=None, started_at=0.0, cfg=SimpleNamespace(cpus=4),
                             alive=lambda: True, stopped=lambda: False)
        w = Watch(vm, Limits())
        for line in text.splitlines():
            w.console.feed(line, 1.0)
        out = w._ended(1.0 + w.limits.report_grace)
        assert out is not None and out.kind == kind, out
        v = decide(Findings(out, reproducers.load("perf-refresh")))
        assert v.verdict == verdict and v.retryable == (verdict == "ERROR"), v.line()
        if verdict == "ERROR":
            assert "EFLAGS has reserved bits set, a state no x86 CPU can be in (EFLAGS: 06968242)" in v.reason


def test_a_panic_is_said_once_in_its_crashed_line():
    """A panic's title names its kind already ("kernel panic: ..."): the
    CRASHED line said it twice ("kernel panic: kernel panic: ...")."""
    from harness.analysis.decide import decide
    from harness.analysis.findings import Findings
    from harness.analysis.outcome import Outcome, OutcomeKind
    from harness.base import reproducers
    repro = reproducers.load("perf-refresh")
    v = decide(Findings(Outcome(OutcomeKind.PANIC, "kernel panic: corrupted stack end in do_sys_poll", 0.0), repro))
    assert v.line() == "CRASHED: kernel panic: corrupted stack end in do_sys_poll"
    assert v.reason == v.summary == "kernel panic: corrupted stack end in do_sys_poll"
    v = decide(Findings(Outcome(OutcomeKind.OOPS, "general protection fault in pipe_write", 0.0), repro))
    assert v.line() == "CRASHED: kernel oops: general protection fault in pipe_write"


def test_nothing_a_program_prints_is_read_as_the_agents():
    """The agent forwards the program's lines behind "| ": a program that
    printed "KSTALL leftover ... state=D", "KSTALL exit code=0" or "HB ..."
    once spoke for the agent (a VULNERABLE, a NOT_REPRODUCED while the
    kernel hung, heartbeats from a frozen guest)."""
    from harness.guest.agent import AgentChannel
    a = AgentChannel(lambda s: None, 2)
    for line in ("| KSTALL leftover tid=9 pid=9 comm=x state=D secs=0 wchan=x kstack=-", "| KSTALL exit code=0",
                 "| KSTALL poweroff", "| HB 1 1000 7", "| KSTALL check path=/dev/x exists=0",
                 "| KSTALL health secs=9 starved_s=9"):
        a.feed(line, 1.0)
    assert a.leftovers == [] and a.exit_code is None and not a.poweroff and a.hb_count == 0
    assert a.env_lines == [] and a.health == {}
    assert a.ktap.lines[0] == "KSTALL leftover tid=9 pid=9 comm=x state=D secs=0 wchan=x kstack=-"  # its output
    a.feed("| # progress count=5 elapsed_ms=1", 1.0)  # a kstall reproducer's progress is its own to say
    assert a.count == 5
    a.feed("KSTALL exit code=0", 2.0)  # the agent's own
    assert a.exit_code == 0


def test_a_program_the_agent_reports_for_cannot_end_its_run_or_set_its_count_with_tap_of_its_own():
    """The agent frames a program that knows nothing of kstall with KTAP of
    its own, unprefixed; the program's lines come behind "| ". A program that
    printed "ok 1" ended the stuck watch (a later hang ran to the bound), and
    its "# result count=9" or "# progress count=" set the count."""
    from harness.guest.agent import AgentChannel
    a = AgentChannel(lambda s: None, 2)
    for line in ("KTAP version 1", "1..1", "| ok 1 my own test", "| # result count=9 elapsed_ms=1",
                 "| # progress count=77", "| not ok 2 another # FAIL it broke"):
        a.feed(line, 1.0)
    assert a.framed and a.ktap.results == [] and a.ktap.result_fields == {} and a.count == 0 and a.running
    assert [r["name"] for r in a.ktap.program_results] == ["my own test", "another"]
    a.feed("# progress count=1 elapsed_ms=100", 2.0)  # the agent's own: one run done
    a.feed("# result count=1 elapsed_ms=100 exit=1", 2.0)
    a.feed("not ok 1 prog # FAIL it exited 1 on run 1", 2.0)
    assert a.count == 1 and not a.running and a.ktap.results[-1]["name"] == "prog"
    from harness.analysis.decide import program_failure
    v = program_failure(a.ktap)
    assert v is not None and "it exited 1 on run 1" in v.reason
    # a reproducer of kstall's own (not framed) speaks for itself
    b = AgentChannel(lambda s: None, 2)
    b.feed("| KTAP version 1", 1.0)
    b.feed("| # result count=9 elapsed_ms=1", 1.0)
    b.feed("| ok 1 perf-refresh", 1.0)
    assert not b.framed and b.count == 9 and b.ktap.results and not b.running


HUNG = (FIXTURES / "consoles" / "6.1.192-hung-task.log").read_text()


def hung_task(pid: int, seconds: int) -> list[str]:
    """A recorded hung-task report (6.1.192, "task hung in pipe_write"), as
    the kernel says it again of one task at a later check."""
    lines = HUNG.splitlines()[2:]
    return [lines[0].replace("blocked-writer:92", f"blocked-writer:{pid}").replace("more than 2 seconds",
                                                                                 f"more than {seconds} seconds"),
            *lines[1:]]


def syz_watch(accel: str = "tcg", vm=None) -> Watch:
    """A Watch as a syzkaller program's run has it, its program started."""
    from harness.base import guest_env
    env = guest_env.get("syzkaller")
    vm = vm or SimpleNamespace(console=None, agent=None, syms=None, started_at=0.0, cfg=SimpleNamespace(cpus=2),
                               alive=lambda: True, stopped=lambda: False)
    w = Watch(vm, Limits(freeze_after=0.8, report_ends=env.report_ends, confirm=env.confirm_for(accel)))
    w.agent.hello_at = w.agent.ready_at = w.go_at = 0.0
    w.agent.repro_started_at = 0.0
    return w


def beat(w: Watch, guest_s: float, now: float) -> None:
    w.agent.feed(f"HB {int(guest_s * 20)} {int(guest_s * 1e9)} 0", now)


def test_a_hung_task_is_a_candidate_until_it_has_been_blocked_for_syzbots_time_scaled():
    """The guest's detector reports a task after 30 s: a candidate. Under
    TCG it is a hang once the kernel says it has been blocked 280 s
    (syzbot's 140 s, twice), not before; its title is the first report's."""
    w = syz_watch()
    for t, secs in ((30.0, 30), (35.0, 35), (200.0, 200)):
        beat(w, t, t)
        for line in hung_task(92, secs):
            w.console.feed(line, t)
        assert w._ended(t + 5) is None, secs
    [c] = w.candidates.open
    assert c.rule.hang_s == 280 and 79 < w.candidates.due_in(200.0) <= 80
    for line in hung_task(92, 281):
        w.console.feed(line, 281.0)
    assert w._ended(281.0) is None  # its lines their grace
    out = w._ended(283.0)
    assert out is not None and out.kind == "kernel-report" and out.detail == "INFO: task hung in pipe_write"
    [doc] = w.summary()["candidates"]
    assert doc["state"] == "hang" and doc["stuck_s"] == 281 and doc["who"] == "pid 92" and doc["reports"] == 4


def test_a_blocked_task_the_kernel_stops_reporting_while_the_guest_goes_on_is_a_slow_wait():
    """A task in D state for 45 s, reported at 30, 35, 40 and 45 s, then no
    more while the heartbeats go on: it went on (not said again for twice
    the hung-task rule's 10 s and the slack), and the run that ends is
    NOT_REPRODUCED, saying so, never VULNERABLE."""
    from harness.analysis import decide
    from harness.analysis.findings import Findings
    from harness.base import reproducers
    from recorded import FIXTURES as F
    pairs, guest, vm = _socket_vm()
    w = syz_watch(vm=vm)
    for secs in (30, 35, 40, 45):
        beat(w, secs, secs)
        for line in hung_task(92, secs):
            w.console.feed(line, float(secs))
        w._hold(float(secs))
    beat(w, 74.0, 74.0)
    w._hold(74.0)
    assert w.candidates.open, "said again within twice its period and the slack: not yet gone on"
    beat(w, 76.0, 76.0)
    w._hold(76.0)
    assert not w.candidates.open and w.candidates.went_on
    # the agent's time-up kill was held while it was a candidate, and let go once it went on
    sent = guest.recv(4096).decode().splitlines()
    assert sent[0].startswith("HOLD ") and int(sent[0].split()[1]) == 30 and sent[-1] == "HOLD 0", sent
    for a, b in pairs:
        a.close()
        b.close()
    w.agent.feed("KSTALL exit code=0", 70.0)
    w.agent.feed("KSTALL poweroff", 70.0)
    out = w._ended(70.0)
    assert out.kind == "done"
    k = Ktap()
    for line in ["KTAP version 1", "1..1", "# result count=3 elapsed_ms=120000 exit=0 timebox=1 cut=1 failed=0 "
                 "codes=-", "ok 1 prog # ran for 120 s"]:
        k.feed(line)
    repro = reproducers.resolve(str(F / "syzkaller-programs" / "busy_forks.c"))
    summary = w.summary()
    v = decide.decide(Findings(out, repro, k, reports=summary["console_reports"], candidates=summary["candidates"]))
    assert v.verdict == "NOT_REPRODUCED", v.line()
    assert "slow waits the kernel reported, none a hang: INFO: task hung in pipe_write (pid 92): stuck 45 s, then " \
        "went on (a hang here after 280 s; syzbot's detector 140 s)" in v.reason, v.reason
    assert "(1 slow wait)" in v.summary


def test_only_a_candidate_from_before_the_time_up_holds_the_kill_and_a_run_that_never_ends_is_inconclusive():
    """Held, the program goes on and may block more tasks: a candidate first
    reported after its time (and the kernel's time to report) would hold it
    again and again until the run's bound, and an ERROR. It holds nothing;
    and a run that did reach its bound with a report still open is
    INCONCLUSIVE, never an ERROR."""
    import dataclasses
    from harness.analysis import decide
    from harness.analysis.findings import Findings
    from harness.analysis.outcome import Outcome
    from harness.base import reproducers
    from recorded import FIXTURES as F
    pairs, guest, vm = _socket_vm()
    w = syz_watch(vm=vm)
    w.limits = dataclasses.replace(w.limits, hold_for=165.0)  # a 120-s program and the kernel's 45 s
    beat(w, 200.0, 200.0)
    for line in hung_task(92, 30):
        w.console.feed(line, 200.0)
    assert w.agent.running
    w._hold(200.0)
    assert w.candidates.open
    guest.setblocking(False)
    try:
        sent = guest.recv(4096)
    except BlockingIOError:
        sent = b""
    assert b"HOLD" not in sent and w._held_at is None, sent
    out = Outcome("timeout", "run exceeded 720s", 720.0)
    repro = reproducers.resolve(str(F / "syzkaller-programs" / "busy_forks.c"))
    v = decide.decide(Findings(out, repro, Ktap(), candidates=w.summary()["candidates"]))
    assert v.verdict == "INCONCLUSIVE" and "still open, not yet a hang: INFO: task hung in pipe_write" in v.reason, \
        v.line()
    for a, b in pairs:
        a.close()
        b.close()


def test_a_report_that_ends_the_run_is_its_answer_when_the_agent_powers_off_at_once():
    """A report whose grace had not run out when the agent said exit and
    poweroff was dropped: the run ended DONE and NOT_REPRODUCED. A hang
    confirmed, an oops pending, or a candidate still open when the agent
    powers off each answer for the run."""
    from harness.analysis import decide
    from harness.analysis.findings import Findings
    from harness.analysis.outcome import OutcomeKind
    from harness.base import reproducers
    from recorded import FIXTURES as F
    repro = reproducers.resolve(str(F / "syzkaller-programs" / "busy_forks.c"))
    k = Ktap()
    for line in ["KTAP version 1", "1..1", "# result count=1 elapsed_ms=120000 exit=0 timebox=1 cut=1 failed=0 "
                 "codes=-", "ok 1 prog # ran for 120 s"]:
        k.feed(line)

    def ended(lines: list[str], at: float = 100.0):
        w = syz_watch()
        beat(w, at, at)
        for line in lines:
            w.console.feed(line, at)
        w.agent.feed("KSTALL exit code=0", at + 0.1)
        w.agent.feed("KSTALL poweroff", at + 0.1)
        assert w._ended(at + 0.2) is None  # the report's lines have their grace, the agent's exit or not
        out = w._ended(at + 2.0)
        summary = w.summary()
        return out, decide.decide(Findings(out, repro, k, reports=summary["console_reports"],
                                           candidates=summary["candidates"]))

    out, v = ended(hung_task(92, 290))
    assert out.kind == OutcomeKind.REPORTED and v.verdict == "VULNERABLE", v.line()
    assert "stuck 290 s" in v.reason
    oops = ["[  100.1] BUG: kernel NULL pointer dereference, address: 0000000000000000",
            "[  100.2] RIP: 0010:pipe_write+0x10/0x20"]
    out, v = ended(oops)
    assert out.kind == OutcomeKind.OOPS and v.verdict == "CRASHED", v.line()
    w = syz_watch()
    beat(w, 100.0, 100.0)
    for line in hung_task(92, 40):
        w.console.feed(line, 100.0)
    w.agent.feed("KSTALL exit code=0", 101.0)
    w.agent.feed("KSTALL poweroff", 101.0)
    out = w._ended(103.0)
    summary = w.summary()
    v = decide.decide(Findings(out, repro, k, reports=summary["console_reports"], candidates=summary["candidates"]))
    assert v.verdict == "INCONCLUSIVE" and v.summary.startswith("still stuck at the end, not yet a hang"), v.line()


def test_a_report_before_the_program_starts_is_the_boots_never_the_programs():
    """The command line's detectors are set for the boot (a hung task after
    4 s): a report then, before the environment's thresholds and the
    program, is recorded as the boot's and neither ends the run nor
    matches syzbot's title."""
    from harness.analysis import decide
    from harness.analysis.findings import Findings
    from harness.analysis.verdict import Verdict, VerdictKind
    from harness.base import reproducers
    from recorded import FIXTURES as F
    w = syz_watch()
    w.agent.repro_started_at = None
    for line in hung_task(92, 290):
        w.console.feed(line, 5.0)
    assert w._ended(10.0) is None and not w.candidates.things and w.candidates.before_program == 1
    w.agent.repro_started_at = 11.0
    for line in hung_task(92, 300):  # the same task, said again once the program runs: still the boot's
        w.console.feed(line, 15.0)
    assert w._ended(16.0) is None and not w.candidates.things and w.candidates.before_program == 2
    w.agent.feed("KSTALL exit code=0", 130.0)
    w.agent.feed("KSTALL poweroff", 130.0)
    assert w._ended(130.0).kind == "done"
    summary = w.summary()
    assert summary["reports_before_program"] == 2 and summary["console_reports"][0]["before_program"]
    repro = reproducers.resolve(str(F / "syzkaller-programs" / "pipe_hang.c"))
    f = Findings(w._ended(130.0), repro, reports=summary["console_reports"])
    v = Verdict(VerdictKind.VULNERABLE, "x", title="INFO: task hung in something_else")
    assert decide.against_syzbot(v, f).summary.startswith("a different hang"), "the boot's report matched"


def test_an_agent_deaf_to_the_core_request_is_told_apart_from_a_slow_core(monkeypatch):
    """A debian:6.1.176 s390x guest restored from one snapshot heartbeat on but
    never answered CORE, on every restore: kstall waited its full minute and
    said only "timed out". The agent lists the threads at once, so no answer
    in CORE_ANSWER_S is a deaf agent (the caller drops that snapshot), while a
    core that is slow after its threads came is waited for."""
    monkeypatch.setattr(agent_talk, "CORE_ANSWER_S", 0.3)
    pairs, guest, vm = _socket_vm()
    try:
        vm.cfg.memory_mb = 1024
        w = Watch(vm, Limits(), patterns=[])
        guest.sendall(b"KSTALL hello uname=6.1.0-50-s390x cpus=2 init=init\nHB 0 1000000 0\n")
        w._pump(0.1)
        t0 = time.monotonic()
        assert w.take_core(timeout=5.0) is None
        assert w.unanswered == "the agent did not answer the core request in 0.3s", w.unanswered
        assert time.monotonic() - t0 < 2.0
        assert guest.recv(64) == b"CORE\n"

        w2 = Watch(vm, Limits(), patterns=[])
        guest.sendall(b"KSTALL thread tid=85 comm=signal-malloc state=S syscall=262,0x0 "
                      b"kstack=hrtimer_nanosleep+0x8c/0xf0\n")
        t0 = time.monotonic()
        assert w2.take_core(timeout=1.0) is None  # the core itself never came
        assert w2.unanswered == "" and time.monotonic() - t0 >= 0.9
    finally:
        for a, b in pairs:
            a.close()
            b.close()


def test_the_runs_bound_leaves_out_the_seconds_its_looks_stood_the_guest_still():
    """4c456547958b on 6.1.170 (a taprio timer storm): 160 looks at a guest
    that went on after each took the wall time its program needed, and the
    run's bound ended it with no verdict. A look stops the guest's clock, so
    the bound counts the watched time alone. The margins hold on a busy host:
    the freeze is due 2 s before the bound, and the look outlasts the bound."""
    pairs, guest, vm = _socket_vm()
    try:
        w = Watch(vm, Limits(freeze_after=0.5, run_timeout=2.5), patterns=[])
        guest.sendall(b"KSTALL hello uname=6.1.170 cpus=2 init=init\nHB 0 1000000 0\n")
        assert w.watch().kind == "freeze"
        time.sleep(3.0)  # the look: the guest stood still; counted, it alone would pass the bound
        w.rearm(widen=False)
        w.limits.freeze_after = 30
        rearmed = time.monotonic()
        out = w.watch()
        looked = re.search(r"besides (\d+)s of looks at it", out.detail)
        assert out.kind == "timeout" and looked and int(looked[1]) >= 3, out
        assert time.monotonic() - rearmed >= 0.5, "the look's seconds were counted against the run"
    finally:
        for a, b in pairs:
            a.close()
            b.close()


def test_a_program_run_for_its_time_doubles_its_thresholds_at_every_look_so_its_looks_stay_few():
    """A timer storm's heartbeats come seconds apart: with the thresholds
    fixed after the second look, every gap past 0.8 s was a look. Doubling at
    each, a run of 245 s has room for few."""
    from harness.drivers.watching import FALSE_ALARMS, widens
    from harness.drivers.options import FREEZE_CEILING
    assert [widens(n, FALSE_ALARMS, False) for n in (1, 2, 3, 9)] == [True, True, False, False]
    assert all(widens(n, FALSE_ALARMS, True) for n in (1, 2, 3, 9, 160))
    looks, threshold, spent = 0, FREEZE_CEILING, 0.0
    while spent + threshold <= 245:  # each look needs a silence past the threshold of its time
        spent, looks, threshold = spent + threshold, looks + 1, threshold * 2
    assert looks <= 9


def test_a_culprit_in_a_program_run_for_its_time_waits_for_the_kernels_detectors_from_the_silences_start():
    """628d3507228a on 6.1.170 froze at 18 s, CPU 1 in csd_lock_wait behind
    CPU 0's hrtimer storm: titled from the CPUs 3 of 3 times, before RCU's
    21 s stall timeout could report what syzbot titles. A syzkaller
    program's culprit waits for the detectors (its environment's wait_s);
    kstall's own reproducers, and a look with no samples, do not."""
    from harness.analysis.outcome import Outcome
    from harness.base import guest_env, reproducers
    from harness.drivers.watching import detectors_wait
    from recorded import FIXTURES as F
    syz = reproducers.resolve(str(F / "syzkaller-programs" / "busy_forks.c"))
    r = SimpleNamespace(repro=syz, samples=SimpleNamespace(dumps=[{}]))
    vm = SimpleNamespace(alive=lambda: True)
    w = SimpleNamespace(agent=SimpleNamespace(last_hb_at=17.6))
    froze = Outcome("freeze", "no heartbeat for 0.40s", 18.0)
    wait = guest_env.get("syzkaller").report_wait
    assert wait >= 22 and abs(detectors_wait(r, vm, w, froze) - (wait - 0.4)) < 1e-9
    r.samples.dumps = []  # nothing read: QEMU's fault is looked for, not the kernel's report
    assert detectors_wait(r, vm, w, froze) == 0
    r.samples.dumps, r.repro = [{}], reproducers.resolve("perf-refresh")
    assert detectors_wait(r, vm, w, froze) == 0


def test_a_silence_while_a_kernel_report_is_a_candidate_is_no_freeze_until_the_kernel_falls_silent_too():
    """9157524e6230 ("task hung in jfs_commit_inode") on 6.1.170: a soft
    lockup's report came, the guest fell silent, and the freeze read from
    the CPUs ended the run 7 s before syzbot's hung-task report did (2 of 3
    tries "a different hang"). While the kernel is to say a candidate again,
    it decides; once it has not for twice its period and the slack, a
    silence is a freeze again."""
    for ends, kind in ((True, None), (False, "freeze")):
        w = syz_watch()
        if not ends:
            w.limits.report_ends, w.candidates.rules = (), {}
        w.agent.last_hb_at = 1.0
        for line in hung_task(92, 30):
            w.console.feed(line, 1.0)
        out = w._hung(5.0)  # 4 s without a heartbeat
        assert (out.kind if out else None) == kind, ends
    w = syz_watch()
    w.agent.last_hb_at = 1.0
    for line in hung_task(92, 30):
        w.console.feed(line, 1.0)
    quiet = w.candidates.open[0].quiet_after()  # twice the rule's period (10 s) and the slack
    assert w._hung(1.0 + quiet - 0.1) is None
    assert w._hung(1.0 + quiet + 0.1).kind == "freeze"  # the kernel fell silent too


def test_an_oops_written_just_before_qemu_exits_is_the_runs_answer(tmp_path, monkeypatch):
    """A TCG int3 oops, the panic, and QEMU gone within 10 ms (panic=-1 and
    -no-reboot): the console's tail thread had not marked the lines, the
    drain read nothing, and the run was an ERROR "QEMU exited unexpectedly"
    where it was an emulator fault, retried (make run, 6.17.8 perf-refresh)."""
    from harness.guest.streams import FileTail
    monkeypatch.setattr(FileTail, "POLL_S", 30.0)  # the tail thread marks nothing in this test's time
    log = tmp_path / "console.log"
    log.write_text("")
    tail = FileTail(log)
    try:
        vm = SimpleNamespace(console=tail, agent=None, syms=None, started_at=0.0, cfg=SimpleNamespace(cpus=2),
                             alive=lambda: False, stopped=lambda: False,
                             proc=SimpleNamespace(returncode=0), qemu_log_tail=lambda n: "")
        w = Watch(vm, Limits())
        w.agent.hello_at = 0.0
        log.write_text("[    5.701705] Oops: int3: 0000 [#1] SMP NOPTI\n"
                       "[    5.707592] RIP: 0010:__schedule+0x3d5/0xcf0\n"
                       "[    5.714605] Kernel panic - not syncing: Fatal exception in interrupt\n")
        out = w._decide(1.0)
        assert out is not None and out.kind == "infra", out
    finally:
        tail.close()



def held_watch():
    """A syzkaller watch with a 300 s run bound, its vCPUs held back by the host 30 s of any window."""
    w = syz_watch()
    w.limits.run_timeout = 300.0
    w._send = lambda b: None
    w.candidates.host_delay = lambda t0, t1: 30000.0
    return w


def test_a_report_that_becomes_a_hang_past_the_bound_ends_the_run_as_reported_not_as_a_timeout():
    """The bound had grown by the 30 s the host held the task's report back;
    at 311 s the report became a hang, and the bound must not fall back to
    300 s under it: the run ends REPORTED once its lines are in."""
    from harness.analysis.outcome import OutcomeKind
    w = held_watch()
    for t, secs in ((30.0, 30), (200.0, 200), (300.0, 300), (311.0, 311)):
        beat(w, t, t)
        for line in hung_task(92, secs):
            w.console.feed(line, t)
        if t < 311:
            assert w._decide(t + 0.1) is None
    assert [c.state for c in w.candidates.things.values()] == ["hang"]
    assert w._decide(311.2) is None  # its report's lines have their grace
    out = w._decide(313.0)
    assert out is not None and out.kind == OutcomeKind.REPORTED, out
    # nothing held back, the report a hang as the bound passes: its grace, not the host's timeout
    w = held_watch()
    w.candidates.host_delay = lambda t0, t1: 0.0
    for t, secs in ((30.0, 30), (300.5, 300)):
        beat(w, t, t)
        for line in hung_task(92, secs):
            w.console.feed(line, t)
    assert w._decide(300.6) is None
    out = w._decide(302.5)
    assert out is not None and out.kind == OutcomeKind.REPORTED, out


def test_a_slow_wait_the_host_held_back_leaves_the_bound_it_gave():
    """The same held task wakes after 120 s: a slow wait. The bound it gave
    (330 s) stays, so the run does not end as the host's timeout the moment
    the wait ends (an ERROR "without a verdict" on a busy host)."""
    from harness.analysis.outcome import OutcomeKind
    w = held_watch()
    for t, secs in ((200.0 + d, 30 + d) for d in range(0, 100, 10)):
        beat(w, t, t)
        for line in hung_task(92, secs):
            w.console.feed(line, t)
        assert w._decide(t + 0.1) is None
    for t in range(291, 330):  # no more reports: the task went on; heartbeats go on
        beat(w, float(t), float(t))
        assert w._decide(t + 0.1) is None, t
    assert [c.state for c in w.candidates.things.values()] == ["went on"]
    beat(w, 331.0, 331.0)
    out = w._decide(331.1)
    assert out is not None and out.kind == OutcomeKind.TIMEOUT, out

def test_a_report_that_lasted_is_the_answer_when_the_hosts_bound_ends_the_run():
    """The verdict's safety net under the watch's: a run the host's bound
    ended with a report that had become a hang (bcachefs on 6.12.118,
    20254ae9982b, beside a benchmark, two hung tasks said 105 times each,
    before the bound stopped shrinking) is VULNERABLE with the report's
    title, never "starved, never ended"; one still open is INCONCLUSIVE."""
    from harness.analysis import decide
    from harness.analysis.findings import Findings
    from harness.analysis.outcome import Outcome, OutcomeKind
    from harness.base import reproducers
    from recorded import FIXTURES as F
    repro = reproducers.resolve(str(F / "syzkaller-programs" / "pipe_hang.c"))
    w = syz_watch()
    for at, seconds in ((35.0, 30), (120.0, 120), (320.0, 300)):
        beat(w, at, at)
        for line in hung_task(92, seconds):
            w.console.feed(line, at)
    summary = w.summary()
    lasted = summary["candidates"]
    assert [c["state"] for c in lasted] == ["hang"]
    out = Outcome(OutcomeKind.TIMEOUT, "run exceeded 540s", 600.0)
    v = decide.decide(Findings(out, repro, reports=summary["console_reports"], candidates=lasted))
    assert v.verdict == "VULNERABLE" and v.title == "INFO: task hung in pipe_write", v.line()
    assert v.matched and v.matched["how"] == "title" and "run exceeded 540s" in v.reason, v.reason
    still = [c | {"state": "open"} for c in summary["candidates"]]
    v = decide.decide(Findings(out, repro, reports=summary["console_reports"], candidates=still))
    assert v.verdict == "INCONCLUSIVE" and v.summary.startswith("never ended, still stuck"), v.line()
