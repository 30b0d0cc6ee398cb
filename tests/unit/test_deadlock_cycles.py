# SPDX-License-Identifier: GPL-2.0
"""The wait-for graph of a process's threads: mutex owners and pthread_join,
and the deadlock cycles in it (a recorded shape, no process here)."""
from harness.analysis import thread_hang
from harness.analysis.threads import Dump

LOCK, JOIN = "___pthread_mutex_lock", "__pthread_clockjoin_ex"


def dump(threads: list[tuple[int, str, int]], words: dict[int, dict]) -> Dump:
    """threads: (lwp, the function it waits in, the futex word in its rdi)"""
    return Dump("x", "core", [{"lwp": lwp, "name": f"t{lwp}", "regs": {"orig_rax": 202, "rdi": word},
                               "frames": [{"func": "__futex_abstimed_wait_common"}, {"func": func},
                                          {"func": "worker"}]} for lwp, func, word in threads],
                lock_words=words)


def test_two_mutexes_taken_in_opposite_orders_are_a_deadlock_cycle():
    a, b = 0x4c0000, 0x4c0040
    d = dump([(7, LOCK, b), (8, LOCK, a), (9, JOIN, 0x7f00)],
             {a: {"lock": 2, "owner": 7}, b: {"lock": 2, "owner": 8}, 0x7f00: {"lock": 7, "owner": 0}})
    an = thread_hang.analyse(d, {}, sigs=[])
    assert [[w.lwp for w in c] for c in an.cycles] == [[7, 8]]
    assert an.summary().startswith("deadlock: LWP 7 <-> LWP 8 (LWP 7 waits for LWP 8, which holds mutex 0x4c0040")
    assert thread_hang.Wait(9, 7, 0x7f00, "join") in an.waits  # the joiner waits for LWP 7, in no cycle
    assert "join LWP 7" in an.table() and an.to_json()["cycles"] == [[7, 8]]


def test_a_longer_cycle_and_a_chain_that_is_none():
    w = {0x10: {"owner": 2}, 0x20: {"owner": 3}, 0x30: {"owner": 1}, 0x40: {"owner": 1}}
    ring = thread_hang.analyse(dump([(1, LOCK, 0x10), (2, LOCK, 0x20), (3, LOCK, 0x30), (4, LOCK, 0x40)], w),
                               {}, sigs=[])
    assert [[x.lwp for x in c] for c in ring.cycles] == [[1, 2, 3]]
    assert "LWP 1 -> LWP 2 -> LWP 3 -> LWP 1" in ring.summary()
    chain = thread_hang.analyse(dump([(1, LOCK, 0x10), (2, LOCK, 0x20)], {0x10: {"owner": 2}, 0x20: {"owner": 5}}),
                                {}, sigs=[])
    assert chain.cycles == [] and "deadlock" not in chain.summary()
