# SPDX-License-Identifier: GPL-2.0
"""A hang no signature names, classified from each CPU's state.

Each CPU's state comes from its stack and registers (cpu-states.toml): idle,
in user mode, waiting in hrtimer_cancel, waiting for another CPU in
csd_lock_wait, spinning on a lock, or running elsewhere; in NMI or not;
interrupts off (RFLAGS.IF clear) or on. A CPU in the same state in every
sample is stuck there. The culprits are the stuck CPUs the others wait for:
first those that spin with interrupts off (no IPI reaches them), then those
that spin on their own, then any stuck CPU; the CPUs that wait for another
CPU wait for them. The hang is titled, as syzbot titles one, after the
culprit's first frame past the lock, wait and entry code.
"""
from __future__ import annotations

import tomllib
from collections import Counter
from dataclasses import dataclass, field

from harness.analysis import classify
from harness.analysis.classify import Role, base_name
from harness.base import paths

STATES_FILE = paths.data_file("harness", "analysis", "cpu-states.toml")
IF_FLAG = 1 << 9  # RFLAGS.IF: maskable interrupts enabled


@dataclass(frozen=True)
class StateRule:
    sig: classify.Signature  # the functions that put a CPU in this state
    waits: str               # "cpu", "lock" or ""


@dataclass(frozen=True)
class Rules:
    states: tuple[StateRule, ...]
    skip: frozenset[str]
    skip_prefixes: tuple[str, ...]
    nmi: frozenset[str]

    @staticmethod
    def load(path=STATES_FILE) -> "Rules":
        with open(path, "rb") as f:
            doc = tomllib.load(f)
        states = tuple(StateRule(classify.Signature(
            s["name"], s["title"], Role.UNKNOWN, 0, frozenset(s["at"]), under=frozenset(s.get("under", ())),
            within=int(s.get("within", 12)), depth=int(s.get("depth", 1))), s.get("waits", ""))
            for s in doc["state"])
        return Rules(states, frozenset(doc["title"]["skip"]), tuple(doc["title"]["skip_prefixes"]),
                     frozenset(doc["nmi"]["under"]))

    def meaningful(self, name: str) -> bool:
        return bool(name) and name not in self.skip and not name.startswith(self.skip_prefixes)


@dataclass
class CpuState:
    cpu: int
    state: str          # a cpu-states.toml name, "running", "idle" or "user"
    title: str
    irqs_off: bool
    nmi: bool
    stuck: bool
    function: str       # the first frame past lock, wait and entry code
    waits: str = ""
    samples: int = 0
    role: Role = Role.UNKNOWN
    waits_for: list[int] = field(default_factory=list)

    @property
    def benign(self) -> bool:
        return self.state in ("idle", "user")

    def describe(self) -> str:
        """'CPU0: waiting in hrtimer_cancel, interrupts off, in cpu_clock_event_stop (culprit)'"""
        if self.benign:
            return f"CPU{self.cpu}: {self.title}"
        how = " in NMI" * self.nmi + (", interrupts off" if self.irqs_off else ", interrupts on")
        where = f", in {self.function}" if self.function else ""
        stuck = "" if self.stuck else f", not stuck (moved between {self.samples} samples)"
        role = {Role.CULPRIT: " (culprit)", Role.VICTIM: " (victim)"}.get(self.role, "")
        waits = f", waits for {cpus_text(self.waits_for)}" if self.waits_for else ""
        return f"CPU{self.cpu}: {self.title}{how}{where}{stuck}{waits}{role}"

    def to_json(self) -> dict:
        return {"cpu": self.cpu, "state": self.state, "title": self.title, "irqs_off": self.irqs_off,
                "nmi": self.nmi, "stuck": self.stuck, "function": self.function, "role": self.role,
                "waits_for": self.waits_for, "samples": self.samples}


def describe(doc: dict) -> str:
    """CpuState.describe() of a CPU as run.json holds it (to_json())."""
    return CpuState(doc["cpu"], doc["state"], doc["title"], doc["irqs_off"], doc["nmi"], doc["stuck"],
                    doc["function"], samples=doc.get("samples", 0), role=Role(doc["role"]),
                    waits_for=doc["waits_for"]).describe()


def cpus_text(cpus: list[int]) -> str:
    return ",".join(f"CPU{n}" for n in cpus)


@dataclass
class Hang:
    title: str                 # "hang in cpu_clock_event_stop"; "" when nothing is stuck
    cpus: list[CpuState]

    @property
    def culprits(self) -> list[CpuState]:
        return [c for c in self.cpus if c.role == Role.CULPRIT]

    def summary(self) -> str:
        """The title, then each CPU that is not idle or in user mode."""
        parts = [c.describe() for c in self.cpus if not c.benign]
        return "; ".join([self.title or "no CPU stuck"] + parts)

    def to_json(self) -> dict:
        return {"title": self.title, "cpus": [c.to_json() for c in self.cpus]}


def _names(frames: list[dict]) -> list[str]:
    return [base_name(f.get("function", "")) for f in frames]


def state_of(cpu: dict, rules: Rules) -> CpuState:
    """One CPU in one sample."""
    n = cpu["cpu"]
    if classify.in_user_mode(cpu):
        return CpuState(n, "user", "in user mode", False, False, False, "")
    frames = cpu.get("frames", [])
    names = _names(frames)
    irqs_off = not int(cpu.get("regs", {}).get("eflags", hex(IF_FLAG)), 16) & IF_FLAG
    nmi = any(name in rules.nmi for name in names)
    reliable = [name for f, name in zip(frames, names) if f.get("reliable", True)] or names
    function = next((name for name in reliable if rules.meaningful(name)), names[0] if names else "")
    for rule in rules.states:
        if classify.matches(rule.sig, cpu):
            return CpuState(n, rule.sig.name, rule.sig.title, irqs_off, nmi, False, function, rule.waits)
    return CpuState(n, "running", "running", irqs_off, nmi, False, function)


def _merge(seq: list[CpuState]) -> CpuState:
    """One CPU across samples: its most frequent state; stuck when it was in
    that state (and, running elsewhere, in that function) in every sample."""
    counts = Counter((s.state, s.function if s.state == "running" else "") for s in seq)
    (state, _), seen = counts.most_common(1)[0]
    last = [s for s in seq if s.state == state][-1]
    last.samples = len(seq)
    last.stuck = len(seq) > 1 and seen == len(seq)
    last.irqs_off = all(s.irqs_off for s in seq if s.state == state)
    return last


def _assign_roles(cpus: list[CpuState]) -> list[CpuState]:
    active = [c for c in cpus if not c.benign and c.stuck]
    tiers = ([c for c in active if c.irqs_off and c.waits != "cpu"],
             [c for c in active if c.waits != "cpu"],
             active)
    culprits = next((t for t in tiers if t), [])
    for c in culprits:
        c.role = Role.CULPRIT
    for c in active:
        if c.role == Role.CULPRIT:
            continue
        c.role = Role.VICTIM
        # an IPI waits for a CPU that cannot take it: one with interrupts off
        blocked = [x.cpu for x in culprits if x.irqs_off] if c.waits == "cpu" else []
        c.waits_for = blocked or [x.cpu for x in culprits]
    return culprits


def analyze(samples: list[dict], classes: list[classify.CpuClass], rules: Rules | None = None) -> Hang:
    """samples: the GDB dumps a classification came from; classes: it (idle
    and user-mode CPUs as the signatures named them stay benign)."""
    rules = rules or Rules.load()
    benign = {c.cpu: c.signature for c in classes if c.signature.role == Role.BENIGN}
    per_cpu: dict[int, list[CpuState]] = {}
    for s in samples:
        for cpu in s.get("cpus", []):
            st = state_of(cpu, rules)
            if cpu["cpu"] in benign and st.state != "user":
                st = CpuState(cpu["cpu"], "idle" if benign[cpu["cpu"]].name == "idle" else "user",
                              benign[cpu["cpu"]].title, st.irqs_off, False, False, "")
            per_cpu.setdefault(cpu["cpu"], []).append(st)
    cpus = [_merge(seq) for _, seq in sorted(per_cpu.items())]
    culprits = _assign_roles(cpus)
    title = f"hang in {culprits[0].function}" if culprits and culprits[0].function else \
        ("hang" if culprits else "")
    return Hang(title, cpus)
