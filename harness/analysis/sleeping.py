# SPDX-License-Identifier: GPL-2.0
"""A sleeping hang: a task of the reproducer's that stayed in D state, in
the same kernel wait, past its threshold while the kernel went on (the
agent's "KSTALL dstate" lines, repro/agent/tasks.c sleep_watch). Titled from its
kernel stack as syzbot titles the kernel's own hung-task report, by the
same rules as that report on the console (console-patterns.toml's hung-task
pattern: the first frame past the scheduler, sleep and lock primitives),
"INFO: task hung in anon_pipe_write". Named by the
first signature (harness/analysis/signatures/) that matches a task's kernel
stack, as a vCPU's stack is."""
from __future__ import annotations

from dataclasses import dataclass

from harness.analysis import classify, console, wait_graph
from harness.analysis.classify import Role, Signature, base_name
from harness.base.untrusted import num

@dataclass
class SleepingHang:
    tasks: list[dict]  # tid, pid, comm, secs, wchan, kstack (function names, innermost first)
    signature: Signature | None = None  # the culprit signature a task's stack matched
    graph: dict | None = None  # who holds what they wait for (task_waits.py read()), once read

    @classmethod
    def named(cls, tasks: list[dict], sigs: list[Signature]) -> "SleepingHang":
        """The tasks, and the first culprit signature one of their kernel stacks matches."""
        for t in tasks:
            sig = classify.classify_cpu({"frames": [{"function": f} for f in t["kstack"]]}, sigs)
            if sig.role == Role.CULPRIT:
                return cls(tasks, sig)
        return cls(tasks)

    @property
    def culprits(self) -> list[dict]:
        return self.tasks

    @property
    def title(self) -> str:
        """The kernel's hung-task report's title (console-patterns.toml), from
        the first task's stack; a killed task that is not asleep in D state
        (running on in the kernel) "can't die", as syzbot titles it."""
        if not self.tasks:
            return ""
        if self.tasks[0].get("state", "D") not in ("D", "?"):  # a running task's stack /proc may not show
            func = wait_graph.asleep_in(self.tasks[0])
            return "INFO: task can't die" + (f" in {func}" if func not in ("", "-", "0") else "")
        hung = next(p for p in console.default_patterns() if p.name == "hung-task")
        return hung.title.format(func=wait_graph.asleep_in(self.tasks[0]))

    def summary(self) -> str:
        """The title, then what the first task waits for and who holds it
        (the root of its chain, task_waits.py), then each task."""
        return "; ".join([self.title] + ([self.waits] if self.waits else []) + [task_text(t) for t in self.tasks])

    @property
    def waits(self) -> str:
        if not self.tasks or not self.graph or "error" in self.graph:
            return ""
        return wait_graph.Graph(self.graph).finding(num(self.tasks[0]["tid"]))

    def to_json(self) -> dict:
        return {"kind": "sleeping", "title": self.title, "tasks": self.tasks,
                "signature": self.signature.name if self.signature else None}


def task_text(t: dict) -> str:
    """'task writer:42 in D state for 10s in __mutex_lock: __schedule < ... < anon_pipe_write'"""
    return (f"task {t['comm']}:{t['tid']} in {t.get('state', 'D')} state for {t['secs']}s in {t['wchan']}: "
            f"{' < '.join(t['kstack'][:8])}")


def task_from_fields(fields: dict) -> dict:
    """A "KSTALL dstate" line's fields: kstack "f1+0x1/0x2,f2+..." to function names."""
    frames = [base_name(f.split("+", 1)[0]) for f in fields.get("kstack", "").split(",") if f and f != "-"]
    return {"tid": fields.get("tid", "?"), "pid": fields.get("pid", "?"), "comm": fields.get("comm", "?"),
            "secs": fields.get("secs", "?"), "wchan": fields.get("wchan", "-"), "kstack": frames[:64]}
