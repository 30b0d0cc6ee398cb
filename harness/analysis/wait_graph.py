# SPDX-License-Identifier: GPL-2.0
"""Who holds what the guest's sleeping tasks wait for, told: task_waits.read()'s
JSON, with the agent's stacks of the tasks it names, followed from each
waiter to the root of its chain, or round a cycle (a deadlock among
sleeping tasks); each lock and wait named as kernel-waits.toml's
[lock_names], [waits_in], [waits_for] and [follows] name them."""
from __future__ import annotations

from dataclasses import dataclass

from harness.analysis import console, report_title
from harness.analysis.kernel_layout import load_spec
from harness.base import arch
from harness.analysis.task_waits import settle


def _names() -> dict:
    """kernel-waits.toml's [lock_names] and [waits_in]: a lock named by the
    function that takes it, a wait by the function it sleeps in."""
    doc = load_spec()
    return {"locks": doc.get("lock_names", {}), "waits": doc.get("waits_in", {}),
            "conditions": doc.get("waits_for", {}), "follows": doc.get("follows", {})}


def asleep_in(t: dict) -> str:
    """The function a task sleeps in, past the scheduler and the lock and
    wait primitives (the hung-task title's rules, console-patterns.toml),
    from its kernel stack; else its wait channel."""
    if not t.get("kstack"):
        return t.get("wchan", "")
    pats = console.default_patterns()
    hung = next(p for p in pats if p.name == "hung-task")
    assert hung.stack is not None and pats.rules is not None  # console-patterns.toml has both
    return report_title.function_of_stack(t["kstack"], hung.stack, pats.rules) or t.get("wchan", "")


@dataclass
class Graph:
    doc: dict  # read()'s result, each task with the agent's kstack, wchan and secs where it sent them

    def __post_init__(self) -> None:
        settle(self.doc)

    def task(self, addr: str) -> dict:
        return next((t for t in self.doc.get("tasks", []) if t["task"] == addr), {"task": addr, "pid": "?",
                                                                                   "comm": "?"})

    def wait_of(self, pid) -> dict | None:
        """The task's wait: on a lock, or, where kstall follows it, on its thread group or its tracer."""
        return next((w for w in self.doc.get("waits", []) if w["pid"] == pid and
                     (w["kind"] != "threads" or self.follows(w))), None)

    def where(self, pid) -> str:
        """The function a task sleeps in; a system call's entry by its plain
        name whatever the architecture's wrapper (s390x inlines ptrace_attach
        into __s390x_sys_ptrace, where x86 keeps it)."""
        return arch.syscall_name(asleep_in(self.task_by_pid(pid)))

    def follows(self, w: dict) -> bool:
        """A wait on the task's own thread group is followed only where the
        function it sleeps in waits for its other threads ([follows])."""
        return _names()["follows"].get(self.where(w["pid"])) == "threads"

    def next_of(self, w: dict) -> str | None:
        """Whom a wait waits for: the lock's holder, the zombie thread it
        waits to be released (one with a wait of its own first), the tracer."""
        if w["kind"] == "threads":
            return next((a for a in w["others"] if self.wait_of(self.task(a)["pid"])), w["others"][0])
        return None if w.get("readers") else w.get("owner")

    def lock_name(self, w: dict) -> str:
        if w.get("name"):
            return w["name"]
        where = self.where(w["pid"])
        named = _names()["locks"].get(where)
        kind = {"rw_semaphore": "rwsem"}.get(w["kind"], w["kind"])
        if w["kind"] == "unknown":
            return f"a lock whose kind kstall cannot tell ({' or '.join(w.get('kinds', []))}; wait list " \
                   f"{w['lock']})" + (f" taken in {where}" if where else "")
        if named:
            return named
        return f"a {kind} ({w['lock']})" + (f" taken in {where}" if where else "")

    def task_by_pid(self, pid) -> dict:
        return next((t for t in self.doc.get("tasks", []) if t["pid"] == pid), {"pid": pid, "comm": "?"})

    def chain(self, pid) -> tuple[list[dict], bool]:
        """The waits from pid's on, each to whom it waits for; whether they close a cycle."""
        out, seen = [], set()
        w = self.wait_of(pid)
        while w is not None and w["pid"] not in seen:
            seen.add(w["pid"])
            out.append(w)
            nxt = self.next_of(w)
            if not nxt:
                return out, False
            w = self.wait_of(self.task(nxt)["pid"])
        return out, w is not None

    def state_of(self, t: dict) -> str:
        """What a lock's holder does: sleeps in a function (and why, where
        kstall knows: userfaultfd), runs, or is in user space."""
        cpu = next((c for c, r in (self.doc.get("cpus") or {}).items() if r["pid"] == t["pid"]), None)
        if cpu is not None or t.get("on_cpu"):
            return f"running on CPU{cpu}" if cpu is not None else "running on a CPU"
        where = asleep_in(t)
        if t.get("state") == 0 and t.get("kstack"):  # TASK_RUNNING, on no CPU: preempted, its turn to come
            return f"runnable, waiting for a CPU in {where}"
        if where and where != "-":
            why = _names()["waits"].get(where)
            return f"blocked in {where}" + (f" ({why})" if why else "")
        return "in user space" if t.get("kstack") == [] else "in a wait kstall could not read"

    def link(self, w: dict, first: bool) -> tuple[str, bool]:
        """One wait of a chain in words, and whether the chain goes on past it."""
        who = self.task(self.next_of(w) or "")
        if w["kind"] == "threads":
            lead = "sleeps" if first else "which sleeps"
            return f"{lead} in {self.where(w['pid'])} until its thread pid {who['pid']} ({who['comm']}) is released", \
                True
        if w["kind"] == "reap":
            return f"{'is' if first else 'which is'} a zombie until its tracer pid {who['pid']} ({who['comm']}) " \
                   "reaps it", True
        lead = "waits for" if first else "which waits for"
        if w.get("readers"):
            return f"{lead} {self.lock_name(w)} held by {w['readers']} reader(s)", False
        if w.get("unread") or w["kind"] == "unknown":
            why = "" if w["kind"] == "unknown" else ", whose words are no such lock kstall can read"
            return f"{lead} {self.lock_name(w)}{why}", False
        if w.get("unknown_owner"):
            return f"{lead} {self.lock_name(w)} held by a task on no list of the kernel's " \
                   f"({w['unknown_owner']}: exited, or freed)", False
        if not w.get("owner"):
            return f"{lead} {self.lock_name(w)}, which records no owner (count {w.get('count')})", False
        return f"{lead} {self.lock_name(w)} held by pid {who['pid']} ({who['comm']})", True

    def finding(self, pid) -> str:
        """'waits for pipe->mutex held by pid 91 (console-trigger), blocked in
        handle_userfault (userfaultfd)'; a cycle is named a deadlock; a task
        asleep on no lock, what it waits for where kstall knows it."""
        links, cycle = self.chain(pid)
        if not links:
            return self.condition(self.task_by_pid(pid))
        parts = []
        for i, w in enumerate(links):
            text, goes_on = self.link(w, i == 0)
            parts.append(text)
            if not goes_on:
                break
        text = ", ".join(parts)
        if cycle:
            return f"deadlock: pid {pid} ({self.task_by_pid(pid)['comm']}) {text}, which is where the chain began"
        last = links[-1]
        if (nxt := self.next_of(last)) and not last.get("readers"):
            text += f", {self.state_of(self.task(nxt))}"
        stacked = any(w["how"] == "its waiter on its stack" for w in links)
        return f"{text} [{'read from the stacks' if stacked else 'certain'}]"

    def cpus_text(self) -> str:
        """'every CPU is idle', or what each busy CPU runs."""
        cpus = self.doc.get("cpus") or {}
        busy = [f"CPU{c} runs pid {r['pid']} ({r['comm']})" for c, r in sorted(cpus.items()) if r["pid"]]
        return "" if not cpus else ", ".join(busy) if busy else "every CPU is idle"

    def condition(self, t: dict) -> str:
        """A task in D state on no lock: where it sleeps, and what for."""
        where = asleep_in(t)
        if not where or where == "-":
            return ""
        what = _names()["conditions"].get(where)
        return f"sleeps in {where} on no lock" + (f": waits for {what}" if what else
                                                   " kstall knows (the kernel records no owner of such a wait)")

    def roots(self) -> list[str]:
        """One finding per waiter that heads a chain (no other waiter waits
        on it), then each task asleep on no lock, in pid order."""
        waits = [w for w in self.doc.get("waits", []) if self.wait_of(w["pid"]) is w]
        targets = {self.task(n)["pid"] for w in waits if (n := self.next_of(w))}
        heads = [w["pid"] for w in waits if w["pid"] not in targets] or \
            [w["pid"] for w in waits][:1]  # all in a cycle: start anywhere
        # chains that end at the same wait and holder are one finding: its first waiter's, and how many more
        ends: dict[tuple, list] = {}
        for pid in sorted(heads):
            links, _ = self.chain(pid)
            end = (links[-1].get("lock", links[-1]["kind"]), self.next_of(links[-1])) if links else ("", pid)
            ends.setdefault(end, []).append(pid)
        out = []
        for pids in ends.values():
            if f := self.finding(pids[0]):
                more = f" (and {len(pids) - 1} more tasks whose waits end there)" if len(pids) > 1 else ""
                who = f"pid {pids[0]} ({self.task_by_pid(pids[0])['comm']}) "
                out.append((f if f.startswith("deadlock: ") else who + f) + more)
        lockless = [t["pid"] for t in self.doc.get("tasks", [])
                    if t.get("state", 0) & 2 and not self.wait_of(t["pid"]) and t["pid"] not in targets]
        return out + [f"pid {pid} ({self.task_by_pid(pid)['comm']}) {f}" for pid in lockless
                      if (f := self.finding(pid))]
