# SPDX-License-Identifier: GPL-2.0
"""Who holds what a sleeping task waits for: the wait-for graph over the
tasks of a guest whose kernel lives on (a hung task), read from the
kernel's own structures with its BTF, on kernels without lockdep.

read() walks every task (init_task's list of thread-group leaders, each
one's threads) and, for each one in D state, finds the lock it sleeps on:
the task's blocker field where the kernel keeps one (6.16 on), else the
waiter the lock's slow path queued on the task's own stack (a list_head
linked into the lock's wait list, the task's address after it). The lock's
owner word names the task that holds it. The layout comes from
kernel-waits.toml ([tasks], [locks]) through kernel_layout.layout(); what
the guest's memory says is not trusted: a value is a number or nothing, a
list is followed a bounded number of steps, and a lock counts only when
its owner is one of the tasks the walk found.

Some waits on no lock are followed where the kernel records whom they wait
for: an exec's de_thread waits for its process's other threads, and a
traced thread that exited stays a zombie until its tracer reaps it
(kernel-waits.toml [follows]). User tasks asleep interruptibly on a lock are
waiters too.

wait_graph.Graph (from read()'s JSON, with the agent's stacks of the tasks
it names) follows each waiter to the root of its chain, or round a cycle: a
deadlock among sleeping tasks.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

from harness.analysis import kernel_waits
from harness.analysis.classify import base_name
from harness.analysis.kallsyms import Kallsyms
from harness.analysis.kernel_layout import load_spec
from harness.analysis.kernel_waits import Memory, Reader

MAX_TASKS = 8192      # a guest kstall boots runs a few hundred
MAX_WAITERS = 256     # a wait list is followed this far, no further
# the walk's whole time while the guest is stopped: ~0.5 s for a few hundred
# tasks over QEMU's monitor; a list the guest corrupted into a loop is left at
# its first repeated node, and whatever else stops there
WALK_S = 30.0


@dataclass
class Task:
    addr: int
    pid: int
    tgid: int
    comm: str
    state: int
    on_cpu: int | None = None
    flags: int = 0
    exit_state: int = 0
    traced: bool = False
    parent: int = 0  # its tracer while traced

    def to_json(self) -> dict:
        return {"task": f"{self.addr:#x}", "pid": self.pid, "tgid": self.tgid, "comm": self.comm,
                "state": self.state, "on_cpu": self.on_cpu, "exit_state": self.exit_state, "traced": self.traced}


def _span(t: dict) -> int:
    """How much of a task_struct holds every member read here (one read per task, not a dozen)."""
    return max(t[k] + 16 for k in ("tasks", "pid", "tgid", "state", "stack", "signal", "thread_node", "on_cpu",
                                   "flags", "exit_state", "ptrace", "parent", "blocker") if k in t) + t["comm_bytes"]


@dataclass
class Bound:
    """What a walk of guest memory may cost: every node it visits counts, a
    node met twice ends its list, and time runs out at WALK_S."""
    deadline: float
    nodes: int = 0
    stopped: str = ""

    def step(self, node: int, seen: set[int]) -> bool:
        if node in seen:
            self.stopped = self.stopped or f"a list of tasks loops back at {node:#x}"
            return False
        if self.nodes >= 2 * MAX_TASKS:
            self.stopped = self.stopped or f"more than {2 * MAX_TASKS} list nodes"
            return False
        if self.nodes % 64 == 0 and time.monotonic() > self.deadline:
            self.stopped = self.stopped or f"more than {WALK_S:g}s"
            return False
        seen.add(node)
        self.nodes += 1
        return True


def tasks(mem: Memory, t: dict, bound: Bound | None = None) -> dict[int, Task]:
    """Every task, by its address: each leader on init_task's list, and each
    leader's threads, within the bound (a list the guest corrupted into a loop
    once cost up to MAX_TASKS^2 monitor reads)."""
    bound = bound or Bound(time.monotonic() + WALK_S)
    out: dict[int, Task] = {}
    head = t["variable"] + t["tasks"]
    node = mem.word(head, 8)
    span, seen_leaders = _span(t), set[int]()
    while mem.pointer(node) and node != head and bound.step(node, seen_leaders):
        leader = node - t["tasks"]
        seen = mem.window(leader, span)
        signal = seen.word(leader + t["signal"], 8)
        threads: list[int] = []
        if mem.pointer(signal):
            thead = signal + t["thread_head"]
            tnode = mem.word(thead, 8)
            seen_threads = set[int]()
            while mem.pointer(tnode) and tnode != thead and bound.step(tnode, seen_threads):
                threads.append(tnode - t["thread_node"])
                tnode = mem.word(tnode, 8)
        for addr in threads or [leader]:
            if len(out) < MAX_TASKS and addr not in out and \
                    (task := _task(seen if addr == leader else mem.window(addr, span), addr, t)) is not None:
                out[addr] = task
        node = seen.word(node, 8)
    init = _task(mem.window(t["variable"], span), t["variable"], t)  # the idle task of CPU 0 is on no list
    if init is not None:
        out.setdefault(t["variable"], init)
    return out


def _task(mem: Memory, addr: int, t: dict) -> Task | None:
    pid, tgid, state = mem.word(addr + t["pid"], 4), mem.word(addr + t["tgid"], 4), \
        mem.word(addr + t["state"], 4)
    comm = mem.raw(addr + t["comm"], t["comm_bytes"])
    if pid is None or tgid is None or state is None or comm is None:
        return None
    size = t.get("on_cpu_bytes", 4)
    raw = mem.raw(addr + t["on_cpu"], size) if "on_cpu" in t and size in (1, 2, 4, 8) else None
    on_cpu = mem.number(raw) if raw is not None else None
    task = Task(addr, pid, tgid, comm.split(b"\0", 1)[0].decode("ascii", "replace"), state, on_cpu)
    if "flags" in t:
        task.flags, task.exit_state = mem.word(addr + t["flags"], 4) or 0, mem.word(addr + t["exit_state"], 4) or 0
        task.traced, task.parent = bool(mem.word(addr + t["ptrace"], 4)), mem.word(addr + t["parent"], 8) or 0
    return task


def asleep(task: Task, t: dict) -> bool:
    """In D state, and not an idle worker's wait (TASK_IDLE: also NOLOAD)."""
    return bool(task.state & t["uninterruptible"]) and not task.state & t["noload"]


def may_wait(task: Task, t: dict) -> bool:
    """A task whose lock is looked for: one in D state, or a user task asleep
    interruptibly (mutex_lock_interruptible, ptrace_attach's): kernel
    threads asleep that way are idle ones, and there are a hundred of them."""
    return asleep(task, t) or bool(task.state & t.get("interruptible", 0)) and not task.flags & t.get("pf_kthread", 0) \
        and task.pid != 0


def gone(task: Task, t: dict) -> dict | None:
    """A zombie its tracer has not reaped: it waits for that tracer, and who
    waits for it to be released (an exec's de_thread) waits for the tracer too."""
    if task.exit_state & t.get("exit_zombie", 0) and task.traced and task.parent:
        return {"pid": task.pid, "kind": "reap", "owner": f"{task.parent:#x}", "how": "its exit_state and ptrace"}
    return None


def group_exit(task: Task, everyone: dict[int, Task], named: set[int]) -> dict | None:
    """What a task in D state on no lock may wait for in its own thread
    group: its other threads, still on the group's list (de_thread waits for
    them to be released). Only followed where [follows] says the function it
    sleeps in waits for that (Graph.follow)."""
    others = sorted((a for a, o in everyone.items() if o.tgid == task.tgid and a != task.addr),
                    key=lambda a: everyone[a].pid)
    if not others:
        return None
    named.update(others)
    return {"pid": task.pid, "kind": "threads", "others": [f"{a:#x}" for a in others], "how": "its thread group"}


def read(mem: "Reader | Memory", lay: dict, ncpus: int, syms: Kallsyms | None = None) -> dict:
    """{"tasks": [...], "waits": [...], "cpus": {cpu: pid}} of a guest whose
    kernel lives on: every task in D state and what it sleeps on, every task
    that holds such a lock, and the task each CPU runs (pid 0: idle);
    {"error": why} when the kernel's layout lacks a part. syms (the kernel's
    text symbols) name the function whose frame holds a waiter: the lock's
    slow path, which says the lock's kind."""
    t, lk = lay.get("tasks"), lay.get("locks")
    if not t or not lk:  # the graph is omitted: without the kernel's own layout nothing is guessed
        missing = lay.get("missing", {})
        why = f"no BTF: {missing['btf']}" if "btf" in missing else \
            missing.get("tasks") or missing.get("locks") or "no layout of this kernel"
        return {"error": f"the kernel's tasks and locks cannot be laid out ({why})"}
    mem = Memory.of(mem, lay)
    bound = Bound(time.monotonic() + WALK_S)
    everyone = tasks(mem, t, bound)
    if not everyone:
        return {"error": "no task could be read from init_task's list"}
    # each task in D state costs a read of its stack (16 KiB): the walk's bound holds for them too
    # (a syzkaller program's thousands of sleepers)
    sleepers = [task for task in everyone.values() if may_wait(task, t)]
    waits = []
    for i, task in enumerate(sleepers):
        if time.monotonic() > bound.deadline:
            bound.stopped = bound.stopped or (f"more than {WALK_S:g}s, with the stacks of {len(sleepers) - i} of "
                                              f"{len(sleepers)} tasks in D state unread")
            break
        if w := lock_of(mem, task, t, lk, everyone, syms):
            waits.append(w)
    named = {a for a, task in everyone.items() if asleep(task, t)} | \
        {everyone[a].addr for a in everyone if any(w["pid"] == everyone[a].pid for w in waits)}
    waiting = {w["pid"] for w in waits}
    waits += [w for task in everyone.values() if asleep(task, t) and task.pid not in waiting
              and (w := group_exit(task, everyone, named))]
    waits += [w for task in everyone.values() if (w := gone(task, t)) and task.addr in named]
    named |= {int(c["owner"], 16) for w in waits for c in [w, *w.get("candidates", ())] if c.get("owner")}
    running = kernel_waits.read(mem, lay, ncpus).get("running") or {}
    return {"tasks": [everyone[a].to_json() for a in sorted(named, key=lambda a: everyone[a].pid)],
            "waits": waits, "walked": len(everyone),
            **({"walk_stopped": f"the walk stopped at its bound: {bound.stopped}"} if bound.stopped else {}),
            "cpus": {cpu: {"pid": r["pid"], "comm": "idle" if r["pid"] == 0 else everyone[int(r["task"], 16)].comm
                           if int(r["task"], 16) in everyone else "?"} for cpu, r in running.items()}}


def lock_of(mem: Memory, task: Task, t: dict, lk: dict, everyone: dict[int, Task],
            syms: Kallsyms | None = None) -> dict | None:
    """What a task in D state sleeps on: the lock its blocker field names, or
    the lock whose wait list holds a waiter on its stack; None for a wait on
    no lock of these kinds (a completion, a page, a wait queue)."""
    if "blocker" in t and (blocker := mem.word(task.addr + t["blocker"], 8)):
        kind = t["blocker_kinds"][blocker & 3]
        found = _owned(mem, blocker & ~3, "semaphore" if kind == "semaphore" else
                       "rw_semaphore" if kind.startswith("rwsem") else "mutex", lk, everyone, queued=False)
        if found:
            return found | {"pid": task.pid, "how": "the task's blocker field"}
    # the lock each kind would be, by its wait list's place in it: which kind it is,
    # the waiting task's stack decides (settle_wait), once the agent has sent it
    listed = [kind for kind in ("rw_semaphore", "mutex", "semaphore") if "wait_list" in lk[kind]]
    found_on = _wait_list_head(mem, task, t, lk, everyone) if listed else None
    if found_on is None:
        return None
    head, words, slot = found_on
    cands = [found for kind in listed if (found := _owned(mem, head - lk[kind]["wait_list"], kind, lk, everyone,
                                                          queued=True, tasks=len(everyone)))]
    if not cands:
        return None
    wait = {"pid": task.pid, "how": "its waiter on its stack", "wait_list": f"{head:#x}", "candidates": cands}
    if syms is not None and (frame := frame_of(words, slot, syms)):
        wait |= {"in": frame, "primitive": _primitive_of(frame) or ""}
    return wait


# how far below a waiter its frame's return address may lie (the slow path's
# locals and saved registers between them), in words
FRAME_WORDS = 48


def frame_of(words: tuple[int, ...], slot: int, syms: Kallsyms) -> str:
    """The function whose frame holds the stack word at slot: the first text
    address below it is where that function called the next one down (the
    scheduler, for a waiter), a return address into it. "" if none is near."""
    for j in range(slot - 1, max(slot - FRAME_WORDS, 0) - 1, -1):
        if (sym := syms.lookup(words[j])) is not None:
            return base_name(sym.name)
    return ""


def _primitive_of(function: str) -> str | None:
    return next((kind for kind, names in load_spec().get("primitives", {}).items() if function in names), None)


def primitive(kstack: list[str]) -> str | None:
    """The kind of lock whose slow path a stack shows, innermost first
    ([primitives]); /proc's stacks of a sleeping task leave the scheduler's
    text out, the lock slow paths with it (6.1: "__fdget_pos < ksys_write"),
    so it is the memory's frame_of that mostly says it."""
    return next((kind for f in kstack if (kind := _primitive_of(f))), None)


def settle_wait(w: dict, kstack: list[str] | None) -> dict | None:
    """A waiter found on a task's stack, as the lock it is queued on: the
    kind of the slow path whose frame holds the waiter (frame_of: a mutex's,
    an rwsem's or a semaphore's), or that the task's stack shows, read as
    that kind; with neither, the one kind whose words vouch for it (a mutex's
    or an rwsem's flags: a semaphore's words prove nothing); "unknown" where
    nothing decides; None when the waiter's frame is no lock's slow path
    (another wait's list_head and task: a futex's)."""
    cands = w.get("candidates", [])
    keep = {k: w[k] for k in ("pid", "how", "wait_list", "candidates", "in", "primitive") if k in w}
    if kind := w.get("primitive") or (primitive(kstack) if kstack else None):
        pick = next((c for c in cands if c["kind"] == kind), None)
        return keep | (pick or {"kind": kind, "lock": w.get("wait_list", "?"), "unread": True})
    if w.get("in"):  # a function the symbols name, and no lock's slow path
        return None
    sure = [c for c in cands if c["kind"] != "semaphore"]
    if len(sure) == 1:
        return keep | sure[0]
    return keep | {"kind": "unknown", "lock": w.get("wait_list", "?"), "kinds": [c["kind"] for c in cands]}


def settle(doc: dict) -> None:
    """Each waiter on a stack settled with its task's stack (settle_wait), where the agent sent one."""
    stacks = {t["pid"]: t.get("kstack") for t in doc.get("tasks", [])}
    settled = [settle_wait(w, stacks.get(w["pid"])) if "candidates" in w else w for w in doc.get("waits", [])]
    if "waits" in doc:
        doc["waits"] = [w for w in settled if w is not None]


def _wait_list_head(mem: Memory, task: Task, t: dict, lk: dict, everyone: dict[int, Task]
                    ) -> tuple[int, tuple[int, ...], int] | None:
    """The wait list a waiter on the task's stack is queued on: a list_head
    followed (at waiter_task) by the task's own address, whose neighbours
    point back at it; the list's one node that is no task's waiter is its
    head. (head, the stack's words, the waiter's word)."""
    base = mem.word(task.addr + t["stack"], 8)
    if not mem.pointer(base) or (data := mem.raw(base, t["stack_bytes"])) is None:
        return None
    words = mem.words(data)
    k = lk["waiter_task"] // 8
    for i in range(len(words) - k):
        if words[i + k] != task.addr or not mem.pointer(words[i]) or not mem.pointer(words[i + 1]):
            continue
        node = base + 8 * i
        if mem.word(words[i] + 8, 8) != node or mem.word(words[i + 1], 8) != node:
            continue
        heads, n = [], words[i]  # type: list[int], int | None
        for _ in range(MAX_WAITERS):
            if n == node or not mem.pointer(n):
                break
            if mem.word(n + lk["waiter_task"], 8) not in everyone:
                heads.append(n)
            n = mem.word(n, 8)
        if n == node and len(heads) == 1:
            return heads[0], words, i
    return None


def _owned(mem: Memory, lock: int, kind: str, lk: dict, everyone: dict[int, Task], queued: bool,
           tasks: int = MAX_TASKS) -> dict | None:
    """A lock of this kind at lock, as its owner word says: who holds it
    (a task the walk found), or that readers do, or, for a semaphore, which
    records no owner, its count; None when the memory is no such lock (or,
    queued: no such lock with waiters, which says so in its flags; or a
    count no kernel has: more readers than the tasks walked)."""
    spec, flags = lk[kind], lk["owner_flags"]
    out: dict = {"lock": f"{lock:#x}", "kind": kind}
    if kind == "semaphore":
        count = mem.word(lock + spec["count"], 4)
        if count is None:
            return None
        out["count"] = count - (1 << 32) if count >= 1 << 31 else count
        holder = mem.word(lock + spec["last_holder"], 8) if "last_holder" in spec else None
        return out | ({"owner": f"{holder:#x}", "last_holder": True} if holder in everyone else {})
    owner_word = mem.word(lock + spec["owner"], 8)
    if owner_word is None:
        return None
    owner = owner_word & ~flags
    if kind == "rw_semaphore":
        count = mem.word(lock + spec["count"], 8)
        if count is None or queued and not count & lk["rwsem_waiters"]:
            return None
        if not count & lk["rwsem_writer_locked"]:
            if count >> 8 == 0 or count >> 8 > tasks:  # no writer and no reader holds it, or an impossible count
                return None
            return out | {"readers": count >> 8} | ({"owner": f"{owner:#x}", "last_reader": True}
                                                     if owner in everyone else {})
    if queued and kind == "mutex" and not owner_word & lk["mutex_waiters"]:
        return None
    if owner in everyone:
        return out | {"owner": f"{owner:#x}"}
    if kind == "mutex" and owner_word & lk["mutex_waiters"] and mem.pointer(owner):
        return out | {"unknown_owner": f"{owner:#x}"}  # a mutex with waiters, held by a task not on the lists
    return None


def with_stacks(doc: dict, told: dict) -> None:
    """read()'s tasks with what the agent told of each (by pid): its kernel
    stack, wait channel and idle time; pid and comm stay the memory's. The
    stacks settle which kind of lock each waiter is queued on."""
    for t in doc.get("tasks", []):
        t.update({k: v for k, v in (told.get(t["pid"]) or {}).items() if k in ("kstack", "wchan", "secs")})
    settle(doc)
