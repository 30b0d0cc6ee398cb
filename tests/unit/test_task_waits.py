# SPDX-License-Identifier: GPL-2.0
"""The wait-for graph over sleeping tasks (harness/analysis/task_waits.py):
a guest's memory laid out by a real BTF (clang's, of tests/fixtures/btf/),
with tasks on init_task's list, mutexes, and waiters on the tasks' stacks as
the kernel's slow paths queue them. The e2e tests read real kernels."""
from __future__ import annotations

import shutil
import struct

import pytest
from recorded import clang_btf

from harness.analysis import kernel_waits, task_waits

SYMBOLS = "ffffffff8283bfc0 D __per_cpu_offset\nffffffff83013040 T init_task\n0000000000020000 A runqueues\n"
D, S = 0x2, 0x1  # TASK_UNINTERRUPTIBLE, TASK_INTERRUPTIBLE


@pytest.fixture(scope="module")
def lay(tmp_path_factory) -> dict:
    if shutil.which("clang") is None:
        pytest.skip("clang (ci/debian-packages.txt) makes the BTF")
    out = kernel_waits.layout(clang_btf(tmp_path_factory.mktemp("btf")), SYMBOLS)
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
    assert doc["waits"] == [{"lock": f"{m:#x}", "kind": "mutex", "owner": f"{holder:#x}", "pid": 91,
                             "how": "its waiter on its stack"}]
    assert [t["pid"] for t in doc["tasks"]] == [90, 91]
    for t in doc["tasks"]:  # what the agent tells of them
        t["kstack"] = {90: ["handle_userfault", "__handle_mm_fault", "copy_page_from_iter", "anon_pipe_write"],
                       91: ["__mutex_lock", "anon_pipe_write", "vfs_write"]}[t["pid"]]
    graph = task_waits.Graph(doc)
    assert graph.finding(91) == ("waits for pipe->mutex held by pid 90 (uffd-writer), blocked in handle_userfault "
                                 "(userfaultfd) [read from the stacks]")
    assert graph.roots() == [f"pid 91 (blocked-writer) {graph.finding(91)}"]
    # a holder preempted in its critical section (TASK_RUNNING, on no CPU) is no sleeper
    next(t for t in doc["tasks"] if t["pid"] == 90)["state"] = 0
    assert task_waits.Graph(doc).finding(91).endswith(
        "held by pid 90 (uffd-writer), runnable, waiting for a CPU in handle_userfault [read from the stacks]")


def test_two_tasks_each_holding_the_mutex_the_other_waits_for_are_a_deadlock(lay):
    g = Guest(lay)
    a, b = g.task(40, "abba-a", D), g.task(41, "abba-b", D)
    m1, m2 = g.mutex(a), g.mutex(b)
    g.wait_on(a, m2)
    g.wait_on(b, m1)
    graph = task_waits.Graph(task_waits.read(g.read, lay, 1))
    assert graph.chain(40)[1] and graph.chain(41)[1]
    assert graph.finding(40).startswith("deadlock: pid 40 (abba-a) waits for a mutex")
    assert "held by pid 41 (abba-b), which waits for a mutex" in graph.finding(40)
    assert "held by pid 40 (abba-a), which is where the chain began" in graph.finding(40)


def test_a_lock_held_by_no_task_found_and_memory_that_is_no_lock_and_a_kernel_without_the_parts(lay):
    g = Guest(lay)
    waiter = g.task(91, "blocked-writer", D)
    m = g.mutex(0xFFFF888077770000)  # an owner that is no task the walk found: exited, or freed
    g.wait_on(waiter, m)
    graph = task_waits.Graph(task_waits.read(g.read, lay, 1))
    assert graph.finding(91).startswith("waits for a mutex")
    assert "held by a task on no list of the kernel's (0xffff888077770000: exited, or freed)" in graph.finding(91)
    wl = m + lay["locks"]["mutex"]["wait_list"]
    g.put(wl, wl), g.put(wl + 8, wl)  # the list no longer holds the waiter: its neighbours do not point back
    assert task_waits.read(g.read, lay, 1)["waits"] == []
    assert "cannot be laid out (no struct mutex_waiter)" in task_waits.read(
        g.read, {"missing": {"locks": "no struct mutex_waiter"}}, 1)["error"]
    assert task_waits.read(lambda a, n: None, lay, 1) == {"error": "no task could be read from init_task's list"}
    # a build: kernel without BTF (its capture's BTF blob is empty): omitted, with why
    assert task_waits.read(g.read, kernel_waits.layout(b"", SYMBOLS), 1)["error"].startswith(
        "the kernel's tasks and locks cannot be laid out (no BTF: ")
