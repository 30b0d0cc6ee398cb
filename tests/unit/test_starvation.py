# SPDX-License-Identifier: GPL-2.0
"""A run that hung nothing is evidence only if the kernel let the program
run (harness/analysis/starvation.py): on the guest agent's account of a
real run (a fuse reproducer in a 1 GiB guest of Debian 6.1.170, recorded)
and on accounts made from it."""
from __future__ import annotations

from pathlib import Path

from harness.analysis import decide, reach, starvation
from harness.analysis.findings import Findings
from harness.analysis.ktap import KV, Ktap
from harness.analysis.outcome import Outcome, OutcomeKind
from harness.analysis.verdict import VerdictKind
from harness.base import guest_env, reproducers

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
PROGRAMS = FIXTURES / "syzkaller-programs"
STARVED = FIXTURES / "syzkaller-runs" / "starved-fuse-1g-6.1.170.agent.log"
ENV = guest_env.get("syzkaller")


def recorded() -> tuple[dict, reach.Reach, str]:
    lines = STARVED.read_text().splitlines()
    health = dict(KV.findall(next(line for line in lines if line.startswith("KSTALL health "))))
    result = next(line for line in lines if line.startswith("# result "))
    return health, reach.analyse(lines, [], ENV, None), result


def verdict(health: dict | None, r: reach.Reach | None, result: str):
    k = Ktap()
    for line in ["KTAP version 1", "1..1", result, "ok 1 prog # ran for 180 s"]:
        k.feed(line)
    repro = reproducers.resolve(str(PROGRAMS / "busy_forks.c"))
    return decide.decide(Findings(Outcome(OutcomeKind.DONE, "reproducer exited with code 0", 0.0), repro, k,
                                  reach=r, starvation=starvation.judge(health, r, cpus=2)))


def test_a_run_the_oom_killer_starved_is_inconclusive_never_not_reproduced():
    health, r, result = recorded()
    st = starvation.judge(health, r, cpus=2)
    assert st is not None and st.mostly and st.why == "starved for 95 of 172 s"
    assert st.events[0] == "the OOM killer killed 75 tasks (in 42 s)"
    assert "148 of its processes died of SIGKILL before its time was up" in st.events
    assert any(e.startswith("its memory ran low for 95 s (under 3% available") for e in st.events)
    assert "1 of its 7702 forks failed (ENOMEM 1: no pids or memory left)" in st.events
    v = verdict(health, r, result)
    assert v.verdict == VerdictKind.INCONCLUSIVE
    assert v.summary == "starved for 95 of 172 s (the OOM killer killed 75 tasks (in 42 s))"
    assert "the program did not run as intended" in v.reason and "ran for 182 s (1 run)" in v.reason


def test_a_run_starved_for_a_few_seconds_is_not_reproduced_and_names_each_event():
    health, r, result = recorded()
    few = health | {"starved_s": "4", "oom_kills": "3", "oom_s": "2", "lowmem_s": "4", "memstall_s": "0",
                    "killed": "9:5"}
    v = verdict(few, r, result)
    assert v.verdict == VerdictKind.NOT_REPRODUCED and v.confidence == "low"
    assert "weaker evidence: starved for 4 of 172 s: the OOM killer killed 3 tasks (in 2 s)" in v.reason
    assert v.summary.endswith("(weaker: the OOM killer killed 3 tasks (in 2 s))")


def test_a_clean_run_says_nothing_of_starvation_and_an_agent_that_gave_no_account_is_not_judged():
    health, r, result = recorded()
    clean = health | {"starved_s": "0", "oom_kills": "0", "oom_s": "0", "lowmem_s": "0", "memstall_s": "0",
                      "killed": "-", "cpu_ms": "100000", "busy_ms": "110000"}
    v = verdict(clean, None, result)
    assert v.verdict == VerdictKind.NOT_REPRODUCED and "weaker" not in v.reason
    assert starvation.judge({}, None) is None and verdict(None, None, result).verdict == VerdictKind.NOT_REPRODUCED


def test_forks_failing_for_want_of_pids_starve_a_run_without_a_starved_second():
    health, _, result = recorded()
    calm = health | {"starved_s": "0", "oom_kills": "0", "oom_s": "0", "lowmem_s": "0", "memstall_s": "0",
                     "killed": "-"}
    lines = ["KSTALL hist sys_exit { id: sys_clone                     [ 56] } hitcount:        100",
             f"KSTALL hist sys_exit {{ id: sys_clone                     [ 56], ret: {2**64 - 11} }} hitcount:  60"]
    v = verdict(calm, reach.analyse(lines, [], ENV, None), result)
    assert v.verdict == VerdictKind.INCONCLUSIVE and v.summary.startswith("60 of its 100 forks failed")


def test_guest_text_never_raises_and_the_thresholds_reach_the_agent_as_data():
    st = starvation.judge({"secs": "9" * 500, "starved_s": "x", "killed": "9:" + "9" * 30 + ",0:1,65:2,a:b"})
    assert st is not None and not st.mostly and st.events == []
    assert starvation.rules().go_param() == "health=3,90,50"


def test_forks_failing_enomem_with_memory_to_spare_are_a_sandbox_that_ended_not_starvation():
    """alloc_pid() fails ENOMEM in a pid namespace whose init has exited:
    syzkaller's sandbox gave up (a 2025 wifi reproducer on a kernel without
    mac80211_hwsim loaded), and its parent's loop forked 5+4+3+2+1 times
    into the dead namespace. Measured: 15 of 53 on 6.1.170, read as "no
    pids or memory left" before."""
    health, _, result = recorded()
    calm = health | {"starved_s": "0", "oom_kills": "0", "oom_s": "0", "lowmem_s": "0", "memstall_s": "0",
                     "killed": "-"}
    lines = ["KSTALL hist sys_exit { id: sys_clone                     [ 56] } hitcount:         53",
             f"KSTALL hist sys_exit {{ id: sys_clone                     [ 56], ret: {2**64 - 12} }} hitcount:  15"]
    st = starvation.judge(calm, reach.analyse(lines, [], ENV, None), cpus=2)
    assert st is not None and not st.mostly  # 15 of 53: under fork_failed
    assert st.events == ["15 of its 53 forks failed ENOMEM with memory to spare: the pid namespace they forked "
                         "into had lost its first process (its sandbox ended before its time)"], st.events
    starved = health | {"oom_kills": "3"}  # with the OOM killer at work, ENOMEM is memory's
    st = starvation.judge(starved, reach.analyse(lines, [], ENV, None), cpus=2)
    assert "15 of its 53 forks failed (ENOMEM 15: no pids or memory left)" in st.events


def test_a_sandbox_that_died_early_is_a_program_that_stopped_running_not_a_clean_run():
    """1,000 clones, 990 of them ENOMEM into a pid namespace that had lost
    its first process, no OOM kill: the program stopped there for most of
    its time. It was NOT_REPRODUCED "weaker", while the same counts as
    EAGAIN were INCONCLUSIVE; whatever stopped it, it is INCONCLUSIVE."""
    health, _, _ = recorded()
    calm = health | {"starved_s": "0", "oom_kills": "0", "oom_s": "0", "lowmem_s": "0", "memstall_s": "0",
                     "killed": "-"}
    for errno_value in (12, 11):  # ENOMEM, EAGAIN
        lines = ["KSTALL hist sys_exit { id: sys_clone                     [ 56] } hitcount:       1000",
                 f"KSTALL hist sys_exit {{ id: sys_clone                     [ 56], ret: {2**64 - errno_value} }} "
                 "hitcount:  990"]
        st = starvation.judge(calm, reach.analyse(lines, [], ENV, None), cpus=2)
        assert st is not None and st.mostly, (errno_value, st)
        assert st.why == "990 of its 1000 forks failed", st.why


def test_a_run_the_guest_never_ended_is_inconclusive_with_its_running_account_and_an_error_without():
    """c52ab183 on 6.12.118: the OOM killer's loop held the agent up, its
    time box never returned, and the host's bound ended the run. The agent's
    last running account (every 10 s, running=1) says why."""
    health, r, _ = recorded()
    running = health | {"running": "1"}
    repro = reproducers.resolve(str(PROGRAMS / "busy_forks.c"))
    ended = Outcome(OutcomeKind.TIMEOUT, "run exceeded 245s", 245.0)
    v = decide.decide(Findings(ended, repro, Ktap(), reach=r, starvation=(st := starvation.judge(running, r, cpus=2))))
    assert v.verdict == VerdictKind.INCONCLUSIVE and v.exit_code != 4
    assert v.reason.startswith("the run did not end in its time (run exceeded 245s), the guest starved: starved for 95")
    assert st is not None and st.mostly and st.why == "the guest never ended the run"
    v = decide.decide(Findings(ended, repro, Ktap(), reach=r, starvation=None))
    assert v.verdict == VerdictKind.ERROR and v.reason == "run exceeded 245s without a verdict"


def test_the_oom_killers_panic_after_a_starved_run_is_inconclusive_unless_it_is_syzbots_title():
    """starved_oom.c beside make test's other half (2026-11-29): its agent's
    last account, then out_of_memory() found no task it may kill and
    panicked. That is the guest out of memory, not a crash of the bug."""
    import dataclasses
    health = {"secs": "50", "starved_s": "34", "oom_kills": "169", "oom_s": "33", "lowmem_s": "34",
              "memstall_s": "0", "pids_s": "0", "min_avail_kb": "0", "total_kb": "2014388", "max_tasks": "77",
              "task_limit": "15521", "psi": "1", "killed": "-", "cpu_ms": "0", "busy_ms": "47310", "running": "1"}
    repro = reproducers.resolve(str(PROGRAMS / "starved_oom.c"))
    panic = Outcome(OutcomeKind.PANIC, "kernel panic: System is deadlocked on memory", 61.5)

    def judged(rp, account):
        st = starvation.judge(account, None, cpus=1)
        return decide.decide(Findings(panic, rp, Ktap(), starvation=st)), st
    v, st = judged(repro, health)
    assert v.verdict == VerdictKind.INCONCLUSIVE and st is not None and st.mostly
    assert v.line().startswith("INCONCLUSIVE: starved for 34 of 50 s, then kernel panic: System is deadlocked on "
                             "memory (the OOM killer killed 169 tasks (in 33 s))"), v.line()
    assert st.why == "starved for 34 of 50 s, then kernel panic: System is deadlocked on memory"  # the cells' text
    # with no account of the guest starving, the panic is what it says
    v, _ = judged(repro, None)
    assert v.verdict == VerdictKind.CRASHED
    titled = dataclasses.replace(repro, syzbot={**repro.syzbot,
                                                "title": "kernel panic: System is deadlocked on memory"})
    v, _ = judged(titled, health)
    assert v.verdict == VerdictKind.CRASHED and v.matched and v.matched["how"] == "title", v.line()


def test_a_run_the_bound_ended_after_looks_that_found_no_cpu_stuck_is_inconclusive_with_what_they_saw():
    """4c456547958b's third try on 6.1.170: the guest fell silent again and
    again in a taprio timer storm, every look found its CPUs moving, and the
    host's bound ended the run. Not kstall's ERROR: what the CPUs did is the
    answer. A run that ended in its time says the same of its looks."""
    silence = {"after_s": 61.2, "what": "no heartbeat for 0.81s", "looked_s": 0.9,
               "cpus": "CPU0 running in run_timer_softirq (moving), CPU1 running in advance_sched (moving)"}
    repro = reproducers.resolve(str(PROGRAMS / "busy_forks.c"))
    ended = Outcome(OutcomeKind.TIMEOUT, "run exceeded 245s besides 31s of looks at it", 276.0)
    v = decide.decide(Findings(ended, repro, Ktap(), silences=[silence] * 7))
    assert v.verdict == VerdictKind.INCONCLUSIVE and v.exit_code == 3
    assert v.reason == ("the run did not end in its time (run exceeded 245s besides 31s of looks at it): the guest "
                        "fell silent 7 times, and went on after each look (the last, 61.2 s in, no "
                        "heartbeat for 0.81s: CPU0 running in run_timer_softirq (moving), CPU1 running in "
                        "advance_sched (moving))")
    health, r, result = recorded()
    k = Ktap()
    for line in ["KTAP version 1", "1..1", result, "ok 1 prog # ran for 180 s"]:
        k.feed(line)
    done = Outcome(OutcomeKind.DONE, "reproducer exited with code 0", 0.0)
    clean = decide.decide(Findings(done, repro, k, reach=r, silences=[silence]))
    assert clean.verdict == VerdictKind.NOT_REPRODUCED
    assert clean.reason.endswith("fell silent 1 time, and went on after each look (the last, 61.2 s "
                                 "in, no heartbeat for 0.81s: CPU0 running in run_timer_softirq (moving), CPU1 running "
                                 "in advance_sched (moving))")
    assert "(the guest fell silent 1 time)" in clean.summary
