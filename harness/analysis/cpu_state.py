# SPDX-License-Identifier: GPL-2.0
"""A hang no signature names, classified from each CPU's state.

Each CPU's state comes from its stack and registers (cpu-states.toml): idle,
in user mode, waiting in hrtimer_cancel, waiting for another CPU in
csd_lock_wait, spinning on a lock, or running elsewhere; in NMI or not;
interrupts off (RFLAGS.IF clear) or on. A CPU in the same state in every
sample is stuck there. Who waits for whom is read from the kernel's own
records where the samples have them (kernel_waits.py: the CPUs whose
call-function requests a csd waiter's are still locked, the holder of a
resilient spinlock): the CPUs waited for are culprits. Otherwise, and for
the rest, the culprits are the stuck CPUs the others must be waiting for:
first those that spin with interrupts off (no IPI reaches them), then those
that spin on their own, then any stuck CPU. The hang is titled, as syzbot
titles one, after the culprit's first frame past the lock, wait and entry
code.
"""
from __future__ import annotations

import tomllib
from collections import Counter
from dataclasses import dataclass, field

from harness.analysis import classify
from harness.analysis.classify import Role, base_name
from harness.analysis.kernel_waits import LockNames, Variables, Waits, register_lock
from harness.base import arch, paths

STATES_FILE = paths.data_file("harness", "analysis", "cpu-states.toml")


@dataclass(frozen=True)
class StateRule:
    sig: classify.Signature  # the functions that put a CPU in this state
    waits: str               # "cpu", "lock" or ""
    lock_table: str = ""     # the kernel's table of held locks that names the lock (kernel-waits.toml)
    moves_with: str = ""     # "console": moving, not stuck, while the console's output grows


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
            within=int(s.get("within", 12)), depth=int(s.get("depth", 1))), s.get("waits", ""),
            s.get("lock_table", ""), s.get("moves_with", "")) for s in doc["state"])
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
    waits_how: str = ""  # "memory": read from the kernel's records; "": inferred from the CPUs' states
    lock: str = ""       # the lock it spins on: its variable, or its address
    lock_table: str = ""
    moves_with: str = ""
    sample: int = -1     # the sample it was last seen in this state in
    regs: tuple = ()     # its registers in that sample: a CPU running with interrupts on is stuck only if
                         # they never change (a busy program's page clearing stays in one function, moving)

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
        waits = classify.waits_text(self.cpu, self.waits_for, self.lock, self.waits_how == "memory")
        return f"CPU{self.cpu}: {self.title}{how}{where}{stuck}{', ' * bool(waits)}{waits}{role}"

    def short(self) -> str:
        """'spinning on a lock in foo', 'running in bar (moving)', 'idle': a CPU in a line."""
        if self.benign or not self.function:
            return self.title
        return f"{self.title} in {self.function}" + ("" if self.stuck or self.samples < 2 else " (moving)")

    def to_json(self) -> dict:
        return {"cpu": self.cpu, "state": self.state, "title": self.title, "irqs_off": self.irqs_off,
                "nmi": self.nmi, "stuck": self.stuck, "function": self.function, "role": self.role,
                "waits_for": self.waits_for, "waits_how": self.waits_how, "lock": self.lock,
                "samples": self.samples}


def describe(doc: dict) -> str:
    """CpuState.describe() of a CPU as run.json holds it (to_json())."""
    return CpuState(doc["cpu"], doc["state"], doc["title"], doc["irqs_off"], doc["nmi"], doc["stuck"],
                    doc["function"], samples=doc.get("samples", 0), role=Role(doc["role"]),
                    waits_for=doc["waits_for"], waits_how=doc.get("waits_how", ""),
                    lock=doc.get("lock", "")).describe()


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


def state_of(cpu: dict, rules: Rules, sample: int = -1) -> CpuState:
    """One CPU in one sample."""
    n = cpu["cpu"]
    if classify.in_user_mode(cpu):
        return CpuState(n, "user", "in user mode", False, False, False, "")
    frames = cpu.get("frames", [])
    names = _names(frames)
    irqs_off = arch.of_dump(cpu).irqs_off(cpu.get("regs", {}))
    nmi = any(name in rules.nmi for name in names)
    reliable = [name for f, name in zip(frames, names) if f.get("reliable", True)] or names
    function = next((name for name in reliable if rules.meaningful(name)), names[0] if names else "")
    for rule in rules.states:
        if classify.matches(rule.sig, cpu):
            return CpuState(n, rule.sig.name, rule.sig.title, irqs_off, nmi, False, function, rule.waits,
                            lock_table=rule.lock_table, moves_with=rule.moves_with, sample=sample)
    return CpuState(n, "running", "running", irqs_off, nmi, False, function, sample=sample,
                    regs=tuple(sorted(cpu.get("regs", {}).items())))


def _merge(seq: list[CpuState], printed: list[int | None]) -> CpuState:
    """One CPU across samples: its most frequent state; stuck when it was in
    that state (and, running elsewhere, in that function) in every sample.
    printed: how much the console held at each sample, where known."""
    counts = Counter((s.state, s.function if s.state == "running" else "") for s in seq)
    (state, _), seen = counts.most_common(1)[0]
    last = [s for s in seq if s.state == state][-1]
    last.samples = len(seq)
    last.irqs_off = all(s.irqs_off for s in seq if s.state == state)
    # running with interrupts on in the same function is a CPU busy in it, not stuck, unless it
    # is stuck at one place: the same registers in every sample
    busy = state == "running" and not last.irqs_off and len({s.regs for s in seq}) > 1
    # a CPU in the console's write path while the console grew is printing (an OOM killer's
    # task list under TCG keeps a CPU there, interrupts off, for seconds): not stuck
    first = [s for s in seq if s.state == state][0]
    before, after = (printed[s.sample] if 0 <= s.sample < len(printed) else None for s in (first, last))
    printing = last.moves_with == "console" and before is not None and after is not None and after > before
    last.stuck = len(seq) > 1 and seen == len(seq) and not busy and not printing
    return last


def _read_waits(cpus: list[CpuState], samples: list[dict], waits: Waits,
                locks: LockNames | None) -> dict[int, list[int]]:
    """Who each CPU stuck waiting waits for, as the kernel's records say:
    the CPUs a csd waiter's requests are still locked on (in every sample);
    the holders of the resilient lock a CPU spins on (its table's last
    entry, in the last sample that saw it spin); the name of a queued
    spinlock. A CPU that moved between samples waits for no one."""
    spinning = {c.cpu for c in cpus if c.lock_table and c.stuck}
    measured: dict[int, list[int]] = {}
    for c in cpus:
        if c.benign or not c.stuck:
            continue
        if c.waits == "cpu" and c.cpu in waits.csd:
            measured[c.cpu] = waits.csd[c.cpu]
        elif c.lock_table and (lock := waits.spun_lock(c.cpu, c.sample)) is not None:
            c.lock = (locks.name(lock) if locks else "") or f"{lock:#x}"
            measured[c.cpu] = waits.holders(lock, c.cpu, c.sample, spinning)
        else:
            if c.waits == "lock" and locks is not None:  # a queued spinlock records no holder: only its name
                dump = next((d for d in samples[c.sample].get("cpus", []) if d.get("cpu") == c.cpu), {})
                c.lock = register_lock(dump, locks)
            continue
        c.waits_for, c.waits_how = measured[c.cpu], "memory"
    return measured


def _assign_roles(cpus: list[CpuState], measured: dict[int, list[int]]) -> list[CpuState]:
    """Culprits: the CPUs the kernel's records say others wait for, and the
    stuck ones no record explains (first those with interrupts off, then
    those that do not wait for another CPU, then any). The rest of the stuck
    CPUs are their victims."""
    by_cpu = {c.cpu: c for c in cpus}
    waiting = {n: ts for n, ts in measured.items() if any(t != n for t in ts)}
    held_up = [by_cpu[t] for ts in waiting.values() for t in ts if t in by_cpu and not by_cpu[t].benign]
    active = [c for c in cpus if not c.benign and c.stuck]
    rest = [c for c in active if c.cpu not in waiting]
    tiers = ([c for c in rest if c.irqs_off and c.waits != "cpu"],
             [c for c in rest if c.waits != "cpu"],
             rest)
    culprits = list({c.cpu: c for c in held_up + next((t for t in tiers if t), [])}.values())
    for c in culprits:
        c.role = Role.CULPRIT
    for c in active:
        if c.role == Role.CULPRIT:
            continue
        c.role = Role.VICTIM
        if c.cpu in measured:
            continue
        # an IPI waits for a CPU that cannot take it: one with interrupts off
        blocked = [x.cpu for x in culprits if x.irqs_off] if c.waits == "cpu" else []
        c.waits_for = blocked or [x.cpu for x in culprits]
    return culprits


def analyze(samples: list[dict], classes: list[classify.CpuClass], rules: Rules | None = None,
            variables: Variables | None = None) -> Hang:
    """samples: the GDB dumps a classification came from; classes: it (idle
    and user-mode CPUs as the signatures named them stay benign); variables:
    the kernel's variables, to name a lock by."""
    rules = rules or Rules.load()
    benign = {c.cpu: c.signature for c in classes if c.signature.role == Role.BENIGN}
    per_cpu: dict[int, list[CpuState]] = {}
    for i, s in enumerate(samples):
        for cpu in s.get("cpus", []):
            st = state_of(cpu, rules, i)
            if cpu["cpu"] in benign and st.state != "user":
                st = CpuState(cpu["cpu"], "idle" if benign[cpu["cpu"]].name == "idle" else "user",
                              benign[cpu["cpu"]].title, st.irqs_off, False, False, "")
            per_cpu.setdefault(cpu["cpu"], []).append(st)
    printed = [s.get("console_bytes") for s in samples]
    cpus = [_merge(seq, printed) for _, seq in sorted(per_cpu.items())]
    waits = Waits.from_samples(samples)
    locks = LockNames(variables, waits.per_cpu_offsets) if variables is not None else None
    culprits = _assign_roles(cpus, _read_waits(cpus, samples, waits, locks))
    title = f"hang in {culprits[0].function}" if culprits and culprits[0].function else \
        ("hang" if culprits else "")
    return Hang(title, cpus)


def note_waits(classes: list[classify.CpuClass], hang: Hang) -> None:
    """What the kernel's records say each CPU waits for, onto the CPUs its
    signatures named too; a CPU no signature names is described by its state."""
    states = {c.cpu: c for c in hang.cpus}
    for c in classes:
        if c.signature.role == Role.UNKNOWN and c.cpu in states:
            c.described = states[c.cpu].short()
    read = {c.cpu: c for c in hang.cpus if c.waits_how == "memory" or c.lock}
    for c in classes:
        if c.cpu in read and c.signature.role != Role.BENIGN:
            s = read[c.cpu]
            c.lock, c.waits_how = s.lock, s.waits_how
            c.waits_for = s.waits_for if s.waits_how == "memory" else []
