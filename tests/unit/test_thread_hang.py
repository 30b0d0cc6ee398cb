# SPDX-License-Identifier: GPL-2.0
"""Process thread dumps (recorded from real signal-malloc runs in guests):
futex groups, the lock owner, the hang class; /proc and agent-line parsing."""
from __future__ import annotations

import copy
import json
import socket

import pytest

from recorded import FIXTURES

from harness.analysis import thread_hang
from harness.analysis import threads
from harness.guest.streams import BlobReader


def recorded(name: str) -> tuple[threads.Dump, dict[int, threads.ProcThread]]:
    d = FIXTURES / name
    dump = threads.Dump.from_json(json.loads((d / "thread-dump.json").read_text()))
    proc = {t.tid: t for line in (d / "agent.log").read_text().splitlines()
            if (t := threads.from_agent_line(line)) is not None}
    return dump, proc


def test_glibc_owner_from_the_stacks():
    dump, proc = recorded("signal-malloc-7.3.4-glibc")
    a = thread_hang.analyse(dump, proc)
    assert a.signature and a.signature.name == "signal_handler_malloc_self_deadlock"
    assert a.group.owner_from == "stacks" and a.signal == "SIGPROF" and a.owner.handler() == "on_sigprof"
    # the owner was interrupted in code that runs under the arena lock
    _, tramp, interrupted = a.owner.split()
    assert tramp["signal"] == 27 and interrupted[0]["func"] in ("_int_free", "_int_malloc", "brk", "sysmalloc")
    assert len(a.queued) == 3 and a.owner.lwp not in a.queued
    assert a.summary().startswith(f"SIGPROF handler self-deadlock in malloc (LWP {a.owner.lwp} holds {a.group.word:#x}")
    # the guest's /proc and the core agree on the futex word
    by_regs = threads.futex_words(dump, {})
    assert by_regs == threads.futex_words(dump, proc) and set(by_regs.values()) == {a.group.word}


def test_jemalloc_owner_from_the_mutex():
    dump, proc = recorded("signal-malloc-7.3.4-jemalloc")
    a = thread_hang.analyse(dump, proc)
    assert a.signature is not None and a.group.owner_from == "__owner"
    assert dump.lock_words[a.group.word]["owner"] == a.owner.lwp
    assert any((f["func"] or "").startswith("je_") for f in a.owner.frames)


def test_jemalloc_lock_inversion_through_the_handler_is_the_same_bug():
    # a real run (7.3.4, jemalloc): LWP 104, interrupted in base_alloc_impl,
    # waits in on_sigprof for a mutex LWP 102 holds; 102 waits for 104's
    a = thread_hang.analyse(*recorded("signal-malloc-7.3.4-jemalloc-inversion"))
    assert a.signature.name == "signal_handler_malloc_lock_inversion" and a.owner.lwp == 104
    assert [w.lwp for w in a.cycle] == [102, 104] and a.queued == [101, 103]
    assert a.title() == "SIGPROF handler lock-order deadlock in malloc"  # no LWP, no address: the same in every run
    assert a.summary().startswith("SIGPROF handler lock-order deadlock in malloc (LWP 104 waits in its handler "
                                  "on_sigprof, called inside the allocator: deadlock: LWP 102 <-> LWP 104 (")
    assert a.to_json()["cycle"] == [102, 104] and a.group.owner_from == "__owner"
    # the same cycle with no thread in a handler is a plain deadlock, named by its cycle alone
    dump, proc = recorded("signal-malloc-7.3.4-jemalloc-inversion")
    t = next(t for t in dump.threads if t["lwp"] == 104)
    t["frames"] = t["frames"][:t["frames"].index(next(f for f in t["frames"] if f["func"] == "on_sigprof"))]
    plain = thread_hang.analyse(dump, proc)
    assert plain.signature is None and [w.lwp for w in plain.cycles[0]] == [102, 104]
    assert plain.title() == "user-space deadlock: 2 threads, mutex -> mutex"


def test_a_signature_like_another_takes_its_match_and_a_bad_one_is_refused(tmp_path):
    sigs = thread_hang.load_signatures()
    assert [s.shape for s in sigs] == ["self", "cycle"]  # a process's own lock first
    assert sigs[1].handler_alloc == sigs[0].handler_alloc and sigs[1].held_in == sigs[0].held_in
    (tmp_path / "a.toml").write_text('name = "a"\ntitle = "a"\nshape = "cycle"\n[match]\nlike = "nothing"\n')
    with pytest.raises(ValueError, match="like = 'nothing' names no signature"):
        thread_hang.load_signatures(tmp_path)


def test_a_lost_thread_costs_only_its_stack():
    dump, proc = recorded("signal-malloc-7.3.4-glibc")
    want = thread_hang.analyse(dump, proc)
    other = next(t for t in dump.threads if t["lwp"] not in (want.owner.lwp,))
    lost = copy.deepcopy(dump)
    t = next(t for t in lost.threads if t["lwp"] == other["lwp"])
    t["frames"], t["error"], t["regs"] = [], "kstall-thread 1: gdb died (exit status signal 9)", {}
    a = thread_hang.analyse(lost, proc)
    assert (a.signature, a.owner.lwp, a.group.word) == (want.signature, want.owner.lwp, want.group.word)
    assert "no stack" in next(x for x in a.threads if x.lwp == other["lwp"]).line()


def test_without_the_owner_stack_nothing_is_claimed():
    dump, proc = recorded("signal-malloc-7.3.4-glibc")
    owner = thread_hang.analyse(dump, proc).owner.lwp
    for t in dump.threads:
        if t["lwp"] == owner:
            t["frames"] = []
    a = thread_hang.analyse(dump, proc)
    assert a.signature is None and "no hang signature matched" in a.summary()
    assert f"LWP {owner}: no stack" in a.summary()


def _in_its_lock_wait(dump: threads.Dump, lwp: int) -> None:
    """LWP's signal came as its lock wait (called from _int_free) returned,
    at the wait's `ret`, after the exchange that took the lock."""
    frames = next(t for t in dump.threads if t["lwp"] == lwp)["frames"]
    i = next(i for i, f in enumerate(frames) if f.get("sigtramp"))
    if frames[i + 1]["func"] != "__lll_lock_wait_private":
        frames.insert(i + 1, {"func": "__lll_lock_wait_private", "pc": 0x41D228})


def _plain_waiter(dump: threads.Dump, lwp: int, like: int) -> None:
    t = next(t for t in dump.threads if t["lwp"] == lwp)
    t["frames"] = copy.deepcopy(next(t for t in dump.threads if t["lwp"] == like)["frames"])


def test_the_only_waiter_interrupted_in_its_own_lock_wait_is_the_owner():
    # the recorded owner (interrupted in _int_free) and the other thread that
    # waits in its handler (interrupted in its lock wait) as a CI run may
    # have had them: the owner interrupted in the wait that had just taken the lock
    dump, proc = recorded("signal-malloc-7.3.4-glibc")
    want = thread_hang.analyse(dump, proc)
    other = next(t.lwp for t in want.threads if t.handler() and t.lwp != want.owner.lwp)
    plain = next(t.lwp for t in want.threads if t.futex is not None and not t.handler())
    _in_its_lock_wait(dump, want.owner.lwp)
    _plain_waiter(dump, other, like=plain)
    a = thread_hang.analyse(dump, proc)
    assert (a.signature, a.owner.lwp, a.group.owner_from) == (want.signature, want.owner.lwp, "stacks")
    assert len(a.queued) == 3
    # two such threads, both past the exchange: either may hold it, so
    # neither is named (the recorded other one was cut in its futex sleep)
    two, _ = recorded("signal-malloc-7.3.4-glibc")
    _in_its_lock_wait(two, want.owner.lwp)
    t = next(t for t in two.threads if t["lwp"] == other)
    t["frames"][next(i for i, f in enumerate(t["frames"]) if f.get("sigtramp")) + 1]["pc"] = 0x41D228
    a = thread_hang.analyse(two, proc)
    assert a.signature is None and "no owner found" in a.summary()
    # the summary says where the suspects were, for a reader of a CI log
    assert (f"LWP {want.owner.lwp} waits in on_sigprof, interrupted in __lll_lock_wait_private < _int_free"
            in a.summary())
    # a waiter whose stack was lost may be the owner: nothing is claimed
    lost = copy.deepcopy(dump)
    next(t for t in lost.threads if t["lwp"] == plain)["frames"] = []
    assert thread_hang.analyse(lost, proc).signature is None


def test_of_two_waits_cut_by_the_signal_the_one_past_its_exchange_holds_the_lock():
    # a fresh clone's CI run (7.3.4): the workers' first mallocs contend for
    # the arena list lock; LWP 104's signal came at its lock wait's `ret`
    # (the exchange took the lock), LWP 105's where every waiter sleeps, after
    # the futex call: 105 holds nothing, so 104 is the one owner
    dump, proc = recorded("signal-malloc-7.3.4-glibc-just-acquired")
    a = thread_hang.analyse(dump, proc)
    assert a.signature is not None and (a.owner.lwp, a.group.owner_from) == (104, "stacks")
    assert sorted(a.queued) == [102, 103, 105]
    # the restarted call (the signal's pc rewound onto the syscall) is the same
    t = next(t for t in dump.threads if t["lwp"] == 105)
    i = next(i for i, f in enumerate(t["frames"]) if f.get("sigtramp"))
    t["frames"][i + 1]["pc"] -= 2
    assert thread_hang.analyse(dump, proc).owner.lwp == 104


def test_proc_formats():
    assert threads.parse_syscall("202 0x4bf800 0x80 0x2 0x0 0x8 0x7f 0x7ffe 0x41c8b6\n")[0] == 202
    assert threads.parse_syscall("running") == (None, ())
    assert threads.parse_syscall("-1 0x7ffe 0x41c8b6") == (None, ())
    assert threads.parse_kstack("[<0>] futex_do_wait+0x38/0x70\n[<0>] __futex_wait+0x91/0x100\n") == \
        ["futex_do_wait+0x38/0x70", "__futex_wait+0x91/0x100"]
    t = threads.from_agent_line("KSTALL thread tid=7 comm=worker-0 state=S syscall=202,0x4bf800,0x80 "
                                "kstack=a+0x1/0x2,b")
    assert (t.tid, t.comm, t.state, t.futex, t.kstack) == (7, "worker-0", "S", 0x4BF800, ["a+0x1/0x2", "b"])
    assert threads.from_agent_line("KSTALL thread tid=x") is None


def test_blobs_across_reads():
    a, b = socket.socketpair()
    try:
        r = BlobReader(a)
        r.expect("KALLSYMS", 5)
        r.expect("CORE", 3)
        a.setblocking(False)
        b.sendall(b"KALLSYMS 5\nabc")
        r.read()
        b.sendall(b"deCORE 3\nxyzJUNK 999999999999\n")
        for _ in range(3):
            r.read()
        assert r.blobs == {"KALLSYMS": b"abcde", "CORE": b"xyz"} and r.complete("CORE")
    finally:
        a.close()
        b.close()


def test_a_blob_kstall_did_not_ask_for_or_larger_than_asked_is_skipped_whole():
    r = BlobReader(None)
    r.expect("CORE", 4)
    r.feed(b"KALLSYMS 6\nabcdefCORE 9\n123456789CORE 3\nxyz")  # unasked, then too big, then as asked
    assert r.blobs == {"CORE": b"xyz"} and r.refused == ["KALLSYMS 6", "CORE 9"]
    r.feed(b"CORE 3\nabc")  # one blob per request
    assert r.blobs == {"CORE": b"xyz"} and r.refused[-1] == "CORE 3"


def test_s390x_handler_read_past_its_signal_frame_by_kstalls_own_unwinder():
    # a real s390x core (6.1.176): gdb-multiarch stops at the vdso's
    # rt_sigreturn; gdbscripts/kstall_threads.py read the interrupted frames
    # from the kernel's rt_sigframe (arches.toml `sigreturn`), and gdb named
    # malloc by its alias __malloc
    dump, proc = recorded("signal-malloc-6.1.176-s390x")
    a = thread_hang.analyse(dump, proc)
    assert a.signature is not None and a.signal == "SIGPROF" and a.group.owner_from == "stacks"
    inner, tramp, interrupted = a.owner.split()
    assert [f["func"] for f in inner] == ["__lll_lock_wait_private", "__malloc", "on_sigprof"]
    assert tramp["signal"] == 27 and interrupted[0]["func"] in ("brk", "_int_malloc", "_int_free", "sysmalloc")
