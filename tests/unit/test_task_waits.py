# SPDX-License-Identifier: GPL-2.0
"""The wait-for graph over sleeping tasks (harness/analysis/task_waits.py):
a guest's memory laid out by a real BTF (clang's, of tests/fixtures/btf/),
with tasks on init_task's list, mutexes, and waiters on the tasks' stacks as
the kernel's slow paths queue them. The e2e tests read real kernels."""
from __future__ import annotations

import json
import shutil
import struct
import time
from pathlib import Path

import pytest
from recorded import clang_btf

from harness.analysis import kernel_layout, task_waits, wait_graph
from harness.analysis.kallsyms import Kallsyms

SYMBOLS = "ffffffff8283bfc0 D __per_cpu_offset\nffffffff83013040 T init_task\n0000000000020000 A runqueues\n"
D, S = 0x2, 0x1  # TASK_UNINTERRUPTIBLE, TASK_INTERRUPTIBLE


@pytest.fixture(scope="module")
def lay(tmp_path_factory) -> dict:
    if shutil.which("clang") is None:
        pytest.skip("clang (ci/debian-packages.txt) makes the BTF")
    out = kernel_layout.layout(clang_btf(tmp_path_factory.mktemp("btf")), SYMBOLS)
    assert "tasks" in out and "locks" in out, out["missing"]
    return out


class Guest:
    """A guest's memory, word by word, and the tasks and locks put in it."""

    def __init__(self, lay: dict) -> None:
        self.lay, self.t, self.lk = lay, lay["tasks"], lay["locks"]
        self.mem: dict[int, int] = {}
        self.leaders: list[int] = []
        self.next_addr = 0xFFFF888000100000

    def put(self, addr: int, value: int) -> None:
        self.mem[addr] = value

    def read(self, addr: int, n: int) -> bytes | None:
        out = b""
        for a in range(addr - addr % 8, addr + n, 8):
            if a not in self.mem:
                return None
            out += struct.pack("<Q", self.mem[a])
        return out[addr % 8:addr % 8 + n]

    def alloc(self, size: int) -> int:
        addr, self.next_addr = self.next_addr, self.next_addr + (size + 0xFFF) // 0x1000 * 0x1000
        for a in range(addr, addr + size, 8):
            self.mem[a] = 0
        return addr

    def task(self, pid: int, comm: str, state: int) -> int:
        t = self.t
        addr = self.alloc(0x1000)
        stack = self.alloc(t["stack_bytes"])
        signal = self.alloc(64)
        self.put(addr + t["state"], state)
        self.put(addr + t["pid"] - t["pid"] % 8, (pid if t["pid"] % 8 == 0 else pid << 32)
                 | self.mem.get(addr + t["pid"] - t["pid"] % 8, 0))
        word = addr + t["tgid"] - t["tgid"] % 8
        self.mem[word] = self.mem.get(word, 0) | (pid << (8 * (t["tgid"] % 8)))
        self.put(addr + t["comm"], int.from_bytes(comm.encode()[:8].ljust(8, b"\0"), "little"))
        self.put(addr + t["comm"] + 8, int.from_bytes(comm.encode()[8:16].ljust(8, b"\0"), "little"))
        self.put(addr + t["stack"], stack)
        self.put(addr + t["signal"], signal)
        head, node = signal + t["thread_head"], addr + t["thread_node"]  # one thread: the leader
        self.put(head, node), self.put(head + 8, node), self.put(node, head), self.put(node + 8, head)
        self.leaders.append(addr)
        self._link()
        return addr

    def _link(self) -> None:
        """init_task's list of leaders, through each one's tasks member."""
        head = self.t["variable"] + self.t["tasks"]
        nodes = [head] + [a + self.t["tasks"] for a in self.leaders]
        for i, n in enumerate(nodes):
            self.put(n, nodes[(i + 1) % len(nodes)])
            self.put(n + 8, nodes[i - 1])

    def mutex(self, owner: int) -> int:
        m = self.alloc(64)
        self.put(m + self.lk["mutex"]["owner"], owner | 0x1)  # a flag bit, as a waiter sets
        wl = m + self.lk["mutex"]["wait_list"]
        self.put(wl, wl), self.put(wl + 8, wl)
        return m

    def wait_on(self, task: int, m: int, slot: int = 0x3F00) -> None:
        """The task's mutex_waiter on its stack, at the tail of the mutex's wait list."""
        stack = self.mem[task + self.t["stack"]]
        w, wl = stack + slot, m + self.lk["mutex"]["wait_list"]
        prev = self.mem[wl + 8]
        self.put(w, wl), self.put(w + 8, prev), self.put(w + self.lk["waiter_task"], task)
        self.put(prev, w), self.put(wl + 8, w)


def test_a_chain_names_the_lock_its_holder_and_what_the_holder_waits_for(lay):
    g = Guest(lay)
    g.task(0, "swapper/0", 0)
    holder = g.task(90, "uffd-writer", S)
    waiter = g.task(91, "blocked-writer", D)
    g.task(92, "kworker/0:1", D | lay["tasks"]["noload"])  # an idle worker's wait is no hang
    m = g.mutex(holder)
    g.wait_on(waiter, m)
    doc = task_waits.read(g.read, lay, 1)
    mutex = {"lock": f"{m:#x}", "kind": "mutex", "owner": f"{holder:#x}"}
    assert doc["waits"][0]["candidates"][0] == mutex and doc["waits"][0]["pid"] == 91
    assert [t["pid"] for t in doc["tasks"]] == [90, 91]
    task_waits.with_stacks(doc, {  # what the agent tells of them
        90: {"kstack": ["handle_userfault", "__handle_mm_fault", "copy_page_from_iter", "anon_pipe_write"]},
        91: {"kstack": ["__mutex_lock", "anon_pipe_write", "vfs_write"]}})
    assert {k: v for k, v in doc["waits"][0].items() if k in mutex} == mutex
    graph = wait_graph.Graph(doc)
    assert graph.finding(91) == ("waits for pipe->mutex held by pid 90 (uffd-writer), blocked in handle_userfault "
                                 "(userfaultfd) [read from the stacks]")
    assert graph.roots() == [f"pid 91 (blocked-writer) {graph.finding(91)}"]
    # a holder preempted in its critical section (TASK_RUNNING, on no CPU) is no sleeper
    next(t for t in doc["tasks"] if t["pid"] == 90)["state"] = 0
    assert wait_graph.Graph(doc).finding(91).endswith(
        "held by pid 90 (uffd-writer), runnable, waiting for a CPU in handle_userfault [read from the stacks]")


def test_two_tasks_each_holding_the_mutex_the_other_waits_for_are_a_deadlock(lay):
    g = Guest(lay)
    a, b = g.task(40, "abba-a", D), g.task(41, "abba-b", D)
    m1, m2 = g.mutex(a), g.mutex(b)
    g.wait_on(a, m2)
    g.wait_on(b, m1)
    graph = wait_graph.Graph(task_waits.read(g.read, lay, 1))
    assert graph.chain(40)[1] and graph.chain(41)[1]
    assert graph.finding(40).startswith("deadlock: pid 40 (abba-a) waits for a mutex")
    assert "held by pid 41 (abba-b), which waits for a mutex" in graph.finding(40)
    assert "held by pid 40 (abba-a), which is where the chain began" in graph.finding(40)


def test_a_lock_held_by_no_task_found_and_memory_that_is_no_lock_and_a_kernel_without_the_parts(lay):
    g = Guest(lay)
    waiter = g.task(91, "blocked-writer", D)
    m = g.mutex(0xFFFF888077770000)  # an owner that is no task the walk found: exited, or freed
    g.wait_on(waiter, m)
    graph = wait_graph.Graph(task_waits.read(g.read, lay, 1))
    assert graph.finding(91).startswith("waits for a mutex")
    assert "held by a task on no list of the kernel's (0xffff888077770000: exited, or freed)" in graph.finding(91)
    wl = m + lay["locks"]["mutex"]["wait_list"]
    g.put(wl, wl), g.put(wl + 8, wl)  # the list no longer holds the waiter: its neighbours do not point back
    assert task_waits.read(g.read, lay, 1)["waits"] == []
    assert "cannot be laid out (no struct mutex_waiter)" in task_waits.read(
        g.read, {"missing": {"locks": "no struct mutex_waiter"}}, 1)["error"]
    assert task_waits.read(lambda a, n: None, lay, 1) == {"error": "no task could be read from init_task's list"}
    # a build: kernel without BTF (its capture's BTF blob is empty): omitted, with why
    assert task_waits.read(g.read, kernel_layout.layout(b"", SYMBOLS), 1)["error"].startswith(
        "the kernel's tasks and locks cannot be laid out (no BTF: ")


# The kernel's own layout: 6.1.170's, worked out from its real BTF
# (kernel_layout.layout() of the BTF a run captured, recorded). There a
# mutex's wait list is 16 bytes in, an rwsem's 24 and a semaphore's 8: the
# same waiter read as another kind finds other words.
REAL_6_1 = json.loads((Path(__file__).resolve().parents[1] / "fixtures" / "layout" /
                       "6.1.170-amd64.layout.json").read_text())


# the kernel's text where the slow paths (and a futex wait) are; /proc's
# stacks of a sleeping task leave them out (they are scheduler text)
SYMS_61 = Kallsyms.parse("ffffffff81100000 T __mutex_lock.constprop.0\nffffffff81101000 T rwsem_down_write_slowpath\n"
                         "ffffffff81102000 T ___down_common\nffffffff81103000 T futex_wait\n"
                         "ffffffff81104000 T schedule\nffffffff81105000 T _etext\n")


class Guest61(Guest):
    """Locks as 6.1's slow paths leave them, each waiter on its task's stack
    in the slow path's frame, with the call into the scheduler below it."""

    def queue(self, task: int, wait_list: int, caller: int, slot: int = 0x3F00) -> None:
        stack = self.mem[task + self.t["stack"]]
        w, prev = stack + slot, self.mem[wait_list + 8]
        self.put(w, wait_list), self.put(w + 8, prev), self.put(w + self.lk["waiter_task"], task)
        self.put(prev, w), self.put(wait_list + 8, w)
        self.put(w - 24, caller)  # the return address into the function whose frame holds the waiter
        self.put(w - 64, 0xFFFFFFFF81104010)  # further down, schedule's own

    def lock(self, kind: str, words: dict[str, int]) -> tuple[int, int]:
        base = self.alloc(128) + 32  # inside a bigger structure, with words before it
        for member, value in words.items():
            self.put(base + self.lk[kind][member] if member in self.lk[kind] else base + int(member), value)
        wl = base + self.lk[kind]["wait_list"]
        self.put(wl, wl), self.put(wl + 8, wl)
        return base, wl


def waits_61(g: Guest61, stacks: dict[int, list[str]]) -> wait_graph.Graph:
    doc = task_waits.read(g.read, REAL_6_1, 1, SYMS_61)
    task_waits.with_stacks(doc, {pid: {"kstack": k} for pid, k in stacks.items()})
    return wait_graph.Graph(doc)


def test_a_mutex_whose_neighbour_word_reads_as_an_rwsem_is_a_mutex_on_6_1():
    """The issue's program on 6.1.170: a writer stalled in a userfaultfd
    fault holds its file's f_pos_lock; a second writer sleeps in fdget_pos.
    The word before the mutex (the file's) passes an rwsem's flag checks,
    and the mutex's owner word read as its count made 34635136368768 readers."""
    g = Guest61(REAL_6_1)
    holder, waiter = g.task(104, "dstate_inode", S), g.task(105, "dstate_inode", D)
    m, wl = g.lock("mutex", {"owner": holder | 0x1, "-8": 0x1F80000000002})
    g.queue(waiter, wl, 0xFFFFFFFF81100123)
    graph = waits_61(g, {104: ["handle_userfault", "__handle_mm_fault", "fault_in_readable", "ext4_file_write_iter"],
                         105: ["__fdget_pos", "ksys_write"]})  # as 6.1's /proc showed it: no __mutex_lock
    assert graph.finding(105) == (f"waits for a mutex ({m:#x}) taken in __fdget_pos held by pid 104 (dstate_inode), "
                                  "blocked in handle_userfault (userfaultfd) [read from the stacks]")
    assert wait_graph.Graph(graph.doc).finding(105) == graph.finding(105)  # settled once, the same again
    # with no symbols to say (a build: kernel's vmcore), the count no kernel has rules the rwsem out
    doc = task_waits.read(g.read, REAL_6_1, 1)
    assert wait_graph.Graph(doc).wait_of(105)["kind"] == "mutex"
    assert "reader" not in json.dumps(doc["waits"])


def test_an_rwsem_held_by_readers_or_a_writer_and_a_semaphore_on_6_1():
    g = Guest61(REAL_6_1)
    reader, writer, holder = g.task(40, "reader", S), g.task(41, "writer", D), g.task(42, "holder", S)
    w2, sem_waiter = g.task(43, "writer2", D), g.task(44, "downer", D)
    _, wl = g.lock("rw_semaphore", {"count": 2 << 8 | 0x2, "owner": reader | 0x1})  # two readers, waiters
    g.queue(writer, wl, 0xFFFFFFFF81101040)
    rw, wl2 = g.lock("rw_semaphore", {"count": 0x1 | 0x2, "owner": holder})  # a writer holds it
    g.queue(w2, wl2, 0xFFFFFFFF81101040)
    sem, wl3 = g.lock("semaphore", {"count": 0})
    g.queue(sem_waiter, wl3, 0xFFFFFFFF81102088)
    graph = waits_61(g, {40: [], 41: ["down_write", "do_mprotect_pkey"], 42: ["do_nanosleep"],
                         43: ["down_write", "vm_mmap_pgoff"], 44: ["down", "xfs_buf_get_map"]})
    assert graph.finding(41).startswith("waits for a rwsem (") and graph.finding(41).endswith(
        "taken in do_mprotect_pkey held by 2 reader(s) [read from the stacks]")
    assert graph.finding(43) == (f"waits for a rwsem ({rw:#x}) taken in vm_mmap_pgoff held by pid 42 (holder), "
                                 "blocked in do_nanosleep [read from the stacks]")
    assert graph.finding(44) == (f"waits for a semaphore ({sem:#x}) taken in xfs_buf_get_map, which records no owner "
                                 "(count 0) [read from the stacks]")


def test_a_wait_on_no_lock_that_queues_like_one_is_no_lock_and_no_count_is_impossible():
    """A futex waiter also puts a list_head and its task's address on the
    stack: its stack sleeps in no lock's slow path, so it waits on no lock
    (6.1.170 named it "a semaphore taken in do_futex")."""
    g = Guest61(REAL_6_1)
    sleeper = g.task(159, "syz-executor", S)
    _, wl = g.lock("semaphore", {"count": 0})  # any list whose head has words that read as a count
    g.queue(sleeper, wl, 0xFFFFFFFF81103050)  # in futex_wait's frame: no lock's slow path
    graph = waits_61(g, {159: ["futex_wait_queue", "futex_wait", "do_futex", "__x64_sys_futex"]})
    assert graph.wait_of(159) is None and graph.roots() == []
    # the lock's kind stays unknown where no symbols decide and the words vouch for no one kind
    doc = task_waits.read(g.read, REAL_6_1, 1)
    assert wait_graph.Graph(doc).wait_of(159)["kind"] == "unknown"
    assert "cannot tell" in wait_graph.Graph(doc).finding(159)


def test_a_lock_taken_in_a_system_call_is_named_alike_on_every_architecture():
    """s390x's build inlines ptrace_attach into __s390x_sys_ptrace, where
    x86's keeps it: the lock was "a mutex taken in __s390x_sys_ptrace", a
    wrapper's name, there and the tracee's cred_guard_mutex on x86."""
    doc = {"tasks": [{"task": "0x10", "pid": 105, "comm": "tracer", "state": 1,
                      "kstack": ["__mutex_lock", "__s390x_sys_ptrace", "__do_syscall", "system_call"]},
                     {"task": "0x20", "pid": 106, "comm": "exec", "state": 2, "kstack": ["begin_new_exec"]}],
           "waits": [{"pid": 105, "kind": "mutex", "lock": "0x1234", "owner": "0x20",
                      "how": "the task's blocker field"}]}
    assert wait_graph.Graph(doc).finding(105).startswith(
        "waits for the tracee's signal->cred_guard_mutex held by pid 106 (exec)")
    doc["tasks"][0]["kstack"][1] = "__s390x_sys_nanosleep"  # a wrapper kstall has no name for the lock of
    assert "a mutex (0x1234) taken in sys_nanosleep held by" in wait_graph.Graph(doc).finding(105)


def test_a_task_list_the_guest_looped_costs_a_bounded_walk_and_says_so(lay):
    """A thread list corrupted into a loop that never returns to its head
    was followed MAX_TASKS steps for each leader (MAX_TASKS^2 monitor reads
    at worst, hours while the guest is stopped): a node met twice ends it."""
    g = Guest(lay)
    g.task(0, "swapper/0", 0)
    looped = g.task(91, "looped", D)
    g.task(92, "after", D)
    node = looped + lay["tasks"]["thread_node"]
    other = g.alloc(64)
    g.put(node, other), g.put(other, node)  # node -> other -> node, never back to the head
    reads = []
    doc = task_waits.read(lambda a, n: reads.append(a) or g.read(a, n), lay, 1)
    assert "loops back" in doc["walk_stopped"], doc
    assert len(reads) < 200, len(reads)


def test_the_stacks_of_many_sleepers_cost_no_more_than_the_walks_bound(lay, monkeypatch):
    """The bound held for the walk of the task list, not for the stack read
    (16 KiB) of every task in D state it found: a syzkaller program's
    thousands of sleepers were read however long they took."""
    g = Guest(lay)
    g.task(0, "swapper/0", 0)
    for pid in range(100, 140):
        g.task(pid, f"sleeper{pid}", D)
    stacks = {g.mem[a + lay["tasks"]["stack"]] for a in g.leaders}
    read_stacks = []

    def slow(addr: int, n: int):
        if addr in stacks:  # a stack: as slow as a monitor read of 16 KiB on a busy host
            read_stacks.append(addr)
            time.sleep(0.02)
        return g.read(addr, n)
    monkeypatch.setattr(task_waits, "WALK_S", 0.2)
    doc = task_waits.read(slow, lay, 1)
    assert len(read_stacks) < 20, len(read_stacks)
    assert "tasks in D state unread" in doc["walk_stopped"], doc.get("walk_stopped")
