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
kernel-waits.toml ([tasks], [locks]) through kernel_waits.layout(); what
the guest's memory says is not trusted: a value is a number or nothing, a
list is followed a bounded number of steps, and a lock counts only when
its owner is one of the tasks the walk found.

Graph (from read()'s JSON, with the agent's stacks of the tasks it names)
follows each waiter to the root of its chain, or round a cycle: a
deadlock among sleeping tasks.
"""
from __future__ import annotations

import struct
import tomllib
from dataclasses import dataclass
from typing import TypeGuard

from harness.analysis import console, kernel_waits, report_title
from harness.analysis.kernel_waits import SPEC_FILE, Reader, _bytes, _word
from harness.analysis.stackwalk import KERNEL_HALF

MAX_TASKS = 8192      # a guest kstall boots runs a few hundred
MAX_WAITERS = 256     # a wait list is followed this far, no further


@dataclass
class Task:
    addr: int
    pid: int
    tgid: int
    comm: str
    state: int
    on_cpu: int | None = None

    def to_json(self) -> dict:
        return {"task": f"{self.addr:#x}", "pid": self.pid, "tgid": self.tgid, "comm": self.comm,
                "state": self.state, "on_cpu": self.on_cpu}


def _kernel_pointer(v: int | None) -> TypeGuard[int]:
    return v is not None and v >= KERNEL_HALF and v % 8 == 0


def tasks(mem: Reader, t: dict) -> dict[int, Task]:
    """Every task, by its address: each leader on init_task's list, and each leader's threads."""
    out: dict[int, Task] = {}
    head = t["variable"] + t["tasks"]
    node = _word(mem, head, 8)
    leaders = 0
    while _kernel_pointer(node) and node != head and leaders < MAX_TASKS:
        leader = node - t["tasks"]
        leaders += 1
        signal = _word(mem, leader + t["signal"], 8)
        threads: list[int] = []
        if _kernel_pointer(signal):
            thead = signal + t["thread_head"]
            tnode = _word(mem, thead, 8)
            while _kernel_pointer(tnode) and tnode != thead and len(threads) < MAX_TASKS:
                threads.append(tnode - t["thread_node"])
                tnode = _word(mem, tnode, 8)
        for addr in threads or [leader]:
            if len(out) < MAX_TASKS and addr not in out and (task := _task(mem, addr, t)) is not None:
                out[addr] = task
        node = _word(mem, node, 8)
    init = _task(mem, t["variable"], t)  # the idle task of CPU 0 is on no list
    if init is not None:
        out.setdefault(t["variable"], init)
    return out


def _task(mem: Reader, addr: int, t: dict) -> Task | None:
    pid, tgid, state = _word(mem, addr + t["pid"], 4), _word(mem, addr + t["tgid"], 4), \
        _word(mem, addr + t["state"], 4)
    comm = _bytes(mem, addr + t["comm"], t["comm_bytes"])
    if pid is None or tgid is None or state is None or comm is None:
        return None
    size = t.get("on_cpu_bytes", 4)
    raw = _bytes(mem, addr + t["on_cpu"], size) if "on_cpu" in t and size in (1, 2, 4, 8) else None
    on_cpu = int.from_bytes(raw, "little") if raw is not None else None
    return Task(addr, pid, tgid, comm.split(b"\0", 1)[0].decode("ascii", "replace"), state, on_cpu)


def asleep(task: Task, t: dict) -> bool:
    """In D state, and not an idle worker's wait (TASK_IDLE: also NOLOAD)."""
    return bool(task.state & t["uninterruptible"]) and not task.state & t["noload"]


def read(mem: Reader, lay: dict, ncpus: int) -> dict:
    """{"tasks": [...], "waits": [...], "cpus": {cpu: pid}} of a guest whose
    kernel lives on: every task in D state and what it sleeps on, every task
    that holds such a lock, and the task each CPU runs (pid 0: idle);
    {"error": why} when the kernel's layout lacks a part."""
    t, lk = lay.get("tasks"), lay.get("locks")
    if not t or not lk:  # the graph is omitted: without the kernel's own layout nothing is guessed
        missing = lay.get("missing", {})
        why = f"no BTF: {missing['btf']}" if "btf" in missing else \
            missing.get("tasks") or missing.get("locks") or "no layout of this kernel"
        return {"error": f"the kernel's tasks and locks cannot be laid out ({why})"}
    everyone = tasks(mem, t)
    if not everyone:
        return {"error": "no task could be read from init_task's list"}
    waits = [w for task in everyone.values() if asleep(task, t) and (w := lock_of(mem, task, t, lk, everyone))]
    named = {a for a, task in everyone.items() if asleep(task, t)} | \
        {int(w["owner"], 16) for w in waits if w.get("owner")}
    running = kernel_waits.read(mem, lay, ncpus).get("running") or {}
    return {"tasks": [everyone[a].to_json() for a in sorted(named, key=lambda a: everyone[a].pid)],
            "waits": waits, "walked": len(everyone),
            "cpus": {cpu: {"pid": r["pid"], "comm": "idle" if r["pid"] == 0 else everyone[int(r["task"], 16)].comm
                           if int(r["task"], 16) in everyone else "?"} for cpu, r in running.items()}}


def lock_of(mem: Reader, task: Task, t: dict, lk: dict, everyone: dict[int, Task]) -> dict | None:
    """What a task in D state sleeps on: the lock its blocker field names, or
    the lock whose wait list holds a waiter on its stack; None for a wait on
    no lock of these kinds (a completion, a page, a wait queue)."""
    if "blocker" in t and (blocker := _word(mem, task.addr + t["blocker"], 8)):
        kind = t["blocker_kinds"][blocker & 3]
        found = _owned(mem, blocker & ~3, "semaphore" if kind == "semaphore" else
                       "rw_semaphore" if kind.startswith("rwsem") else "mutex", lk, everyone, queued=False)
        if found:
            return found | {"pid": task.pid, "how": "the task's blocker field"}
    # a mutex's and an rwsem's owner words lie at the same distance before their
    # wait lists: the flags a queued waiter sets tell the two apart
    listed = [kind for kind in ("rw_semaphore", "mutex", "semaphore") if "wait_list" in lk[kind]]
    head = _wait_list_head(mem, task, t, lk, everyone) if listed else None
    if head is None:
        return None
    for kind in listed:
        found = _owned(mem, head - lk[kind]["wait_list"], kind, lk, everyone, queued=True)
        if found:
            return found | {"pid": task.pid, "how": "its waiter on its stack"}
    return None


def _wait_list_head(mem: Reader, task: Task, t: dict, lk: dict, everyone: dict[int, Task]) -> int | None:
    """The wait list a waiter on the task's stack is queued on: a list_head
    followed (at waiter_task) by the task's own address, whose neighbours
    point back at it; the list's one node that is no task's waiter is its head."""
    base = _word(mem, task.addr + t["stack"], 8)
    if not _kernel_pointer(base) or (data := _bytes(mem, base, t["stack_bytes"])) is None:
        return None
    words = struct.unpack(f"<{len(data) // 8}Q", data)
    k = lk["waiter_task"] // 8
    for i in range(len(words) - k):
        if words[i + k] != task.addr or not _kernel_pointer(words[i]) or not _kernel_pointer(words[i + 1]):
            continue
        node = base + 8 * i
        if _word(mem, words[i] + 8, 8) != node or _word(mem, words[i + 1], 8) != node:
            continue
        heads, n = [], words[i]
        for _ in range(MAX_WAITERS):
            if n == node or not _kernel_pointer(n):
                break
            if _word(mem, n + lk["waiter_task"], 8) not in everyone:
                heads.append(n)
            n = _word(mem, n, 8)
        if n == node and len(heads) == 1:
            return heads[0]
    return None


def _owned(mem: Reader, lock: int, kind: str, lk: dict, everyone: dict[int, Task], queued: bool) -> dict | None:
    """A lock of this kind at lock, as its owner word says: who holds it
    (a task the walk found), or that readers do, or, for a semaphore, which
    records no owner, its count; None when the memory is no such lock (or,
    queued: no such lock with waiters, which says so in its flags)."""
    spec, flags = lk[kind], lk["owner_flags"]
    out: dict = {"lock": f"{lock:#x}", "kind": kind}
    if kind == "semaphore":
        count = _word(mem, lock + spec["count"], 4)
        if count is None:
            return None
        out["count"] = struct.unpack("<i", struct.pack("<I", count))[0]
        holder = _word(mem, lock + spec["last_holder"], 8) if "last_holder" in spec else None
        return out | ({"owner": f"{holder:#x}", "last_holder": True} if holder in everyone else {})
    owner_word = _word(mem, lock + spec["owner"], 8)
    if owner_word is None:
        return None
    owner = owner_word & ~flags
    if kind == "rw_semaphore":
        count = _word(mem, lock + spec["count"], 8)
        if count is None or queued and not count & lk["rwsem_waiters"]:
            return None
        if not count & lk["rwsem_writer_locked"]:
            if count >> 8 == 0:  # neither a writer nor a reader holds it
                return None
            return out | {"readers": count >> 8} | ({"owner": f"{owner:#x}", "last_reader": True}
                                                     if owner in everyone else {})
    if queued and kind == "mutex" and not owner_word & lk["mutex_waiters"]:
        return None
    if owner in everyone:
        return out | {"owner": f"{owner:#x}"}
    if kind == "mutex" and owner_word & lk["mutex_waiters"] and _kernel_pointer(owner):
        return out | {"unknown_owner": f"{owner:#x}"}  # a mutex with waiters, held by a task not on the lists
    return None


# -- the graph -------------------------------------------------------------

_NAMES: dict | None = None


def _names() -> dict:
    """kernel-waits.toml's [lock_names] and [waits_in]: a lock named by the
    function that takes it, a wait by the function it sleeps in."""
    global _NAMES
    if _NAMES is None:
        with open(SPEC_FILE, "rb") as f:
            doc = tomllib.load(f)
        _NAMES = {"locks": doc.get("lock_names", {}), "waits": doc.get("waits_in", {}),
                  "conditions": doc.get("waits_for", {})}
    return _NAMES


def _past_waits(kstack: list[str]) -> str:
    """The function a task sleeps in, past the scheduler and the lock and
    wait primitives (the hung-task title's rules)."""
    pats = console.default_patterns()
    hung = next(p for p in pats if p.name == "hung-task")
    assert hung.stack is not None and pats.rules is not None  # console-patterns.toml has both
    return report_title.function_of_stack(kstack, hung.stack, pats.rules)


@dataclass
class Graph:
    doc: dict  # read()'s result, each task with the agent's kstack, wchan and secs where it sent them

    def task(self, addr: str) -> dict:
        return next((t for t in self.doc.get("tasks", []) if t["task"] == addr), {"task": addr, "pid": "?",
                                                                                   "comm": "?"})

    def wait_of(self, pid) -> dict | None:
        return next((w for w in self.doc.get("waits", []) if w["pid"] == pid), None)

    def lock_name(self, w: dict) -> str:
        if w.get("name"):
            return w["name"]
        taker = self.task_by_pid(w["pid"])
        where = _past_waits(taker.get("kstack", [])) if taker.get("kstack") else ""
        named = _names()["locks"].get(where)
        kind = {"rw_semaphore": "rwsem"}.get(w["kind"], w["kind"])
        if named:
            return named
        return f"a {kind} ({w['lock']})" + (f" taken in {where}" if where else "")

    def task_by_pid(self, pid) -> dict:
        return next((t for t in self.doc.get("tasks", []) if t["pid"] == pid), {"pid": pid, "comm": "?"})

    def chain(self, pid) -> tuple[list[dict], bool]:
        """The waits from pid's on, each to the next lock's holder; whether they close a cycle."""
        out, seen = [], set()
        w = self.wait_of(pid)
        while w is not None and w["pid"] not in seen:
            seen.add(w["pid"])
            out.append(w)
            owner = w.get("owner")
            if not owner or w.get("readers"):
                return out, False
            w = self.wait_of(self.task(owner)["pid"])
        return out, w is not None

    def state_of(self, t: dict) -> str:
        """What a lock's holder does: sleeps in a function (and why, where
        kstall knows: userfaultfd), runs, or is in user space."""
        cpu = next((c for c, r in (self.doc.get("cpus") or {}).items() if r["pid"] == t["pid"]), None)
        if cpu is not None or t.get("on_cpu"):
            return f"running on CPU{cpu}" if cpu is not None else "running on a CPU"
        where = _past_waits(t["kstack"]) if t.get("kstack") else t.get("wchan", "")
        if where and where != "-":
            why = _names()["waits"].get(where)
            return f"blocked in {where}" + (f" ({why})" if why else "")
        return "in user space" if t.get("kstack") == [] else "in a wait kstall could not read"

    def finding(self, pid) -> str:
        """'waits for pipe->mutex held by pid 91 (console-trigger), blocked in
        handle_userfault (userfaultfd)'; a cycle is named a deadlock; a task
        asleep on no lock, what it waits for where kstall knows it."""
        links, cycle = self.chain(pid)
        if not links:
            return self.condition(self.task_by_pid(pid))
        parts = []
        for i, w in enumerate(links):
            lead = "waits for" if i == 0 else "which waits for"
            if w.get("readers"):
                parts.append(f"{lead} {self.lock_name(w)} held by {w['readers']} reader(s)")
                break
            if w.get("unknown_owner"):
                parts.append(f"{lead} {self.lock_name(w)} held by a task on no list of the kernel's "
                             f"({w['unknown_owner']}: exited, or freed)")
                break
            if not w.get("owner"):
                parts.append(f"{lead} {self.lock_name(w)}, which records no owner (count {w.get('count')})")
                break
            holder = self.task(w["owner"])
            parts.append(f"{lead} {self.lock_name(w)} held by pid {holder['pid']} ({holder['comm']})")
        text = ", ".join(parts)
        if cycle:
            return f"deadlock: pid {pid} {text}, which is where the chain began"
        last = links[-1]
        if last.get("owner") and not last.get("readers"):
            text += f", {self.state_of(self.task(last['owner']))}"
        sure = "certain" if all(w["how"] == "the task's blocker field" for w in links) else "read from the stacks"
        return f"{text} [{sure}]"

    def cpus_text(self) -> str:
        """'every CPU is idle', or what each busy CPU runs."""
        cpus = self.doc.get("cpus") or {}
        busy = [f"CPU{c} runs pid {r['pid']} ({r['comm']})" for c, r in sorted(cpus.items()) if r["pid"]]
        return "" if not cpus else ", ".join(busy) if busy else "every CPU is idle"

    def condition(self, t: dict) -> str:
        """A task in D state on no lock: where it sleeps, and what for."""
        where = _past_waits(t["kstack"]) if t.get("kstack") else t.get("wchan", "")
        if not where or where == "-":
            return ""
        what = _names()["conditions"].get(where)
        return f"sleeps in {where} on no lock" + (f": waits for {what}" if what else
                                                   " kstall knows (the kernel records no owner of such a wait)")

    def roots(self) -> list[str]:
        """One finding per waiter that heads a chain (no other waiter waits
        on it), then each task asleep on no lock, in pid order."""
        waits = self.doc.get("waits", [])
        owners = {self.task(w["owner"])["pid"] for w in waits if w.get("owner")}
        heads = [w["pid"] for w in waits if w["pid"] not in owners] or \
            [w["pid"] for w in waits][:1]  # all in a cycle: start anywhere
        # chains that end at the same lock and holder are one finding: its first waiter's, and how many more
        ends: dict[tuple, list] = {}
        for pid in sorted(heads):
            links, _ = self.chain(pid)
            end = (links[-1]["lock"], links[-1].get("owner")) if links else ("", pid)
            ends.setdefault(end, []).append(pid)
        out = []
        for pids in ends.values():
            if f := self.finding(pids[0]):
                more = f" (and {len(pids) - 1} more tasks whose waits end there)" if len(pids) > 1 else ""
                out.append(f"pid {pids[0]} ({self.task_by_pid(pids[0])['comm']}) {f}{more}")
        lockless = [t["pid"] for t in self.doc.get("tasks", [])
                    if t.get("state", 0) & 2 and not self.wait_of(t["pid"]) and t["pid"] not in owners]
        return out + [f"pid {pid} ({self.task_by_pid(pid)['comm']}) {f}" for pid in lockless
                      if (f := self.finding(pid))]
