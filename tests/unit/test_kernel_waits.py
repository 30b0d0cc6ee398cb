# SPDX-License-Identifier: GPL-2.0
"""Who waits for whom, from the kernel's records: BTF layouts (a real BTF
blob, made by clang from the kernel's declarations in fixtures/btf/), the
walk over a guest's memory, and recorded real freezes read that way."""
from __future__ import annotations

import shutil
import struct

import pytest
from recorded import FIXTURES, clang_btf, load_samples

from harness.analysis import btf, classify, cpu_state, kernel_layout, kernel_waits
from harness.analysis.classify import Role
from harness.analysis.kallsyms import DATA_TYPES, Kallsyms

@pytest.fixture(scope="module")
def blob(tmp_path_factory) -> bytes:
    if shutil.which("clang") is None:
        pytest.skip("clang (ci/debian-packages.txt) makes the BTF")
    return clang_btf(tmp_path_factory.mktemp("btf"))


def test_btf_gives_member_offsets_through_anonymous_unions_and_tells_pointers_from_arrays(blob):
    types = btf.Btf(blob)
    cfd = types.find(btf.STRUCT, "call_function_data")
    assert [(m.name, m.offset) for m in types.members(cfd)] == [("csd", 0), ("cpumask", 8), ("cpumask_ipi", 16)]
    assert types.is_pointer(types.member(cfd, "cpumask").type_id)  # cpumask_var_t, a typedef of a pointer
    assert types.member(types.find(btf.STRUCT, "__call_single_data"), "node.u_flags").offset == 8
    held = types.find(btf.STRUCT, "rqspinlock_held")
    assert types.array_of(types.member(held, "locks").type_id)[1] == 31 and types.size(held) == 256
    assert types.enum_value("CSD_FLAG_LOCK") == 1
    with pytest.raises(btf.BtfError, match="no member nope"):
        types.member(cfd, "nope")


@pytest.mark.parametrize("bad", [b"", b"\x9f\xeb\x01\x00" + b"\xff" * 20, b"junk" * 10])
def test_a_blob_that_is_not_btf_is_a_btf_error(blob, bad):
    with pytest.raises(btf.BtfError):
        btf.Btf(bad)
    with pytest.raises(btf.BtfError):  # cut short inside its types
        btf.Btf(blob[:len(blob) // 3])


SYMBOLS = ("ffffffff8283bfc0 D __per_cpu_offset\nffffffff83c6db00 d cfd_data\n"
           "ffffffff83c6dbc0 D rqspinlock_held_locks\nffffffff83000000 D tasklist_lock\n"
           "ffffffff83000040 d other_lock\nffffffff83000080 d after_other_lock\n"
           "0000000000020000 A runqueues\nffffffff83013040 T init_task\n")


def test_layout_and_a_walk_over_a_guests_memory(blob):
    lay = kernel_layout.layout(blob, SYMBOLS)
    assert lay["missing"] == {} and lay["csd"]["mask_pointer"] and lay["rqspinlock"]["max"] == 31
    offs = [0xFFFF888000000000, 0xFFFF888000100000]
    mem: dict[int, bytes] = {}

    def put(addr: int, fmt: str, *values: int) -> None:
        mem[addr & (2**64 - 1)] = struct.pack(fmt, *values)  # per-CPU addresses wrap, as in the kernel

    def read(addr: int, n: int) -> bytes | None:
        return mem[addr][:n] if addr in mem and len(mem[addr]) >= n else None
    for n, off in enumerate(offs):
        put(lay["per_cpu_offset"] + 8 * n, "<Q", off)
    cfd1, csd, mask = lay["csd"]["variable"] + offs[1], 0x1000, 0xFFFF888000200000
    put(cfd1 + lay["csd"]["csd"], "<Q", csd)
    put(cfd1 + lay["csd"]["mask"], "<Q", mask)
    put(mask, "<Q", 0b01)                          # CPU1 sent CPU0 a request
    put(csd + offs[0] + lay["csd"]["flags"], "<I", 1)  # still locked: CPU0 has not run it
    held0 = lay["rqspinlock"]["variable"] + offs[0]
    put(held0 + lay["rqspinlock"]["count"], "<I", 2)
    put(held0 + lay["rqspinlock"]["locks"], "<2Q", 0xFFFFC90000001000, 0xFFFFC90000001000)
    task = 0xFFFF888000300000
    put(lay["running"]["variable"] + offs[1] + lay["running"]["curr"], "<Q", task)  # CPU1 runs pid 90
    put(task + lay["running"]["pid"], "<I", 90)
    out = kernel_waits.read(read, lay, 2)
    assert lay["running"]["curr"] == 48 and lay["running"]["pid"] == 16
    assert out["running"] == {"1": {"task": "0xffff888000300000", "pid": 90}}
    assert out["csd"] == {"1": [0]}  # CPU0's own cfd_data is unreadable here: skipped, not a failure
    assert out["rqspinlock"] == {"0": ["0xffffc90000001000", "0xffffc90000001000"]}
    assert kernel_waits.read(lambda a, n: None, lay, 2) == {"error": "__per_cpu_offset unreadable"}


def test_a_kernel_without_a_part_does_without_it(blob):
    lay = kernel_layout.layout(blob, SYMBOLS.replace("rqspinlock_held_locks", "something_else"))
    assert "rqspinlock" not in lay and "no symbol rqspinlock_held_locks" in lay["missing"]["rqspinlock"]
    assert "csd" in lay
    assert kernel_layout.layout(b"not btf", SYMBOLS)["missing"]["btf"]


def test_locks_are_named_by_their_variable_static_or_per_cpu():
    data = Kallsyms.parse(SYMBOLS + "0000000000000000 A __per_cpu_start\n0000000000020000 A runqueues\n"
                          "0000000000021000 A next_percpu\n0000000000035000 A __per_cpu_end\n", DATA_TYPES)
    names = kernel_waits.LockNames(kernel_waits.Variables(data, (0, 0x35000)),
                                   [0xFFFF888000000000, 0xFFFF888000100000])  # a per-CPU area based at 0
    assert names.name(0xFFFFFFFF83000000) == "tasklist_lock"
    assert names.name(0xFFFFFFFF83000048) == "other_lock+0x8"
    assert names.name(0xFFFF888000120010) == "runqueues+0x10 of CPU1"
    assert names.name(0xFFFFC90000001000) == ""  # memory the kernel allocated


def without(*names: str) -> list[classify.Signature]:
    return [s for s in classify.load_signatures() if s.name not in names]


def test_a_recorded_freeze_names_the_cpu_the_csd_waiter_waits_for_from_memory():
    samples = load_samples("perf-refresh-6.16.12-waits")
    assert all(s["waits"]["csd"] == {"1": [0]} for s in samples)  # what the guest's memory said
    hang = cpu_state.analyze(samples, classify.classify_samples(
        samples, without("hrtimer_cancel_self_deadlock", "csd_lock_wait_victim")))
    cpu0, cpu1 = hang.cpus
    assert cpu0.role == Role.CULPRIT and cpu0.state == "hrtimer_cancel" and cpu0.irqs_off
    assert cpu1.role == Role.VICTIM and cpu1.waits_for == [0] and cpu1.waits_how == "memory"
    assert "CPU1: waiting for another CPU in csd_lock_wait, interrupts on, in tlb_finish_mmu, waits for CPU0 " \
           "(victim)" in hang.summary()
    classes = classify.classify_samples(samples, classify.load_signatures())
    cpu_state.note_waits(classes, cpu_state.analyze(samples, classes))
    assert classify.summarize(classes) == \
        "hrtimer_cancel self-deadlock on CPU0; csd_lock_wait victim on CPU1 (waits for CPU0)"


def test_held_locks_name_the_holder_only_for_cpus_that_stay_spinning():
    samples = load_samples("bpf-ringbuf-6.16.12-held-locks")
    lock = "0xffffc900004a9080"
    assert samples[0]["waits"]["rqspinlock"] == {"0": [lock, lock], "1": [lock]}  # CPU0's NMI on the lock it holds
    sigs = without("rqspinlock_ringbuf_nmi", "rqspinlock_ringbuf_wait")
    first = cpu_state.analyze(samples[:1] * 2, classify.classify_samples(samples[:1] * 2, sigs))
    cpu0, cpu1 = first.cpus
    assert cpu0.nmi and cpu0.lock == lock and cpu0.waits_for == [0] and cpu0.role == Role.CULPRIT
    assert cpu1.waits_for == [0] and cpu1.role == Role.VICTIM
    assert "on lock 0xffffc900004a9080, which it holds itself (culprit)" in first.summary()
    assert "on lock 0xffffc900004a9080, held by CPU0 (victim)" in first.summary()
    moving = cpu_state.analyze(samples, classify.classify_samples(samples, sigs))  # the stall ended
    assert not moving.culprits and all(not c.waits_for for c in moving.cpus)


def test_a_queued_spinlock_is_named_by_the_register_that_points_at_it(blob, tmp_path):
    """Debian 6.16.12, frozen by bpf-ringbuf: CPU1 spins in
    native_queued_spin_lock_slowpath from try_to_wake_up; rbx and rdi point
    at CPU0's runqueue, whose lock word is 1 (held; a guest spins
    test-and-set in virt_spin_lock, so nothing else is in the word)."""
    samples = load_samples("bpf-ringbuf-6.16.12-rq-lock")
    cpu1 = samples[0]["cpus"][1]
    assert cpu1["words"]["rbx"] == "0x1" and cpu1["regs"]["rbx"] == cpu1["regs"]["rdi"]
    (tmp_path / "k.datasyms").write_text((FIXTURES / "bpf-ringbuf-6.16.12-rq-lock" / "datasyms").read_text())
    (tmp_path / "k.btf").write_bytes(blob)  # struct rq as the kernel lays out its start
    variables = kernel_waits.Variables.load(tmp_path / "k.kallsyms")
    hang = cpu_state.analyze(samples, classify.classify_samples(samples, without("rqspinlock_ringbuf_nmi")),
                             variables=variables)
    assert hang.cpus[1].lock == "runqueues.__lock of CPU0"
    assert "CPU1: spinning on a lock, interrupts off, in try_to_wake_up, on lock runqueues.__lock of CPU0" \
        in hang.summary()
    assert "on lock 0xffffc900004a1080, held by no CPU on record" in hang.summary()  # the bug: taken, not recorded
