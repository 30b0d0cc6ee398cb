# SPDX-License-Identifier: GPL-2.0
"""Names each vCPU's state from its stacks, using the signature data files.

A dump (one GDB sample) holds every vCPU's frames; a CPU is classified per
sample, then across samples: a CPU whose class and position are the same in
every sample is stuck (a spin), not passing through.
"""
from __future__ import annotations

import fnmatch
import re
import tomllib
from collections import Counter
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from harness.base import arch, paths
from harness.base.reproducers import Reproducer

SIGNATURE_DIR = paths.data_file("harness", "analysis", "signatures")
# GCC/LLVM clones: hrtimer_try_to_cancel.part.0, set_ptes.isra.0, foo.cold
_CLONE_SUFFIX = re.compile(r"(\.(?:part|isra|constprop|cold|llvm|lto_priv)(?:\.\d+)?)+$")


def base_name(function: str) -> str:
    return _CLONE_SUFFIX.sub("", function or "")


class Role(StrEnum):
    """What a CPU in a signature's state does to the run."""
    CULPRIT = "culprit"  # it causes the hang: the verdict is VULNERABLE
    VICTIM = "victim"    # it waits on a culprit
    BENIGN = "benign"    # idle, in user mode: says nothing
    INFRA = "infra"      # the emulator's fault, not the kernel's: ERROR, retried
    UNKNOWN = "unknown"  # matched no signature


@dataclass(frozen=True)
class Signature:
    name: str
    title: str
    role: Role
    priority: int
    at: frozenset[str]
    under: frozenset[str] = frozenset()
    within: int = 12
    depth: int = 1
    and_under: frozenset[str] = frozenset()
    and_within: int = 40
    states: frozenset[str] = frozenset()
    # [match] in_interrupted: the code an interrupt cut into counts (false: only
    # where the CPU is, not what its interrupt returns to)
    in_interrupted: bool = True
    description: str = ""
    bug: str = ""
    # an infra signature's whole picture of the emulator fault ([shape]): every
    # other CPU not idle or in user mode was seen in these signatures and in no
    # other (samples no signature names aside), and there are at least
    # shape_min of them; a CPU alone in it proves no fault
    shape: frozenset[str] = frozenset()
    shape_min: int = 1
    shape_alone: bool = False  # this CPU proves the fault alone (a panic: the guest's end)
    # a culprit's samples ([match] samples): "every" for a hang that never
    # leaves its loop (a self-deadlock), "most" or "any" for one that passes
    # through other code while it lasts (a livelock, a lock wait that times
    # out and retries); fewer and the CPU is not this culprit
    samples: str = "every"

    @classmethod
    def from_toml(cls, doc: dict[str, Any]) -> "Signature":
        m = doc.get("match", {})
        if doc.get("role") not in set(Role) - {Role.UNKNOWN}:
            raise ValueError(f"signature {doc.get('name')}: role must be culprit, victim, benign or infra")
        shape = doc.get("shape", {})
        if doc["role"] == Role.INFRA and not shape.get("others"):
            raise ValueError(f"signature {doc.get('name')}: an infra signature needs [shape] others, the "
                             "signatures of the other CPUs in the emulator fault's whole picture")
        return cls(name=doc["name"], title=doc["title"], role=Role(doc["role"]), priority=int(doc.get("priority", 0)),
                   at=frozenset(m.get("at", ())), under=frozenset(m.get("under", ())),
                   within=int(m.get("within", 12)), depth=int(m.get("depth", 1)),
                   and_under=frozenset(m.get("and_under", ())), and_within=int(m.get("and_within", 40)),
                   states=frozenset(m.get("states", ())), in_interrupted=bool(m.get("in_interrupted", True)),
                   description=doc.get("description", "").strip(), bug=doc.get("bug", ""),
                   shape=frozenset(shape.get("others", ())), shape_min=int(shape.get("min", 1)),
                   shape_alone=bool(shape.get("alone", False)),
                   samples=_samples_rule(doc.get("name", ""), m.get("samples", "every")))


SAMPLE_RULES = {"every": lambda k, n: k == n, "most": lambda k, n: 2 * k > n, "any": lambda k, n: k >= 1}


def _samples_rule(name: str, rule: str) -> str:
    if rule not in SAMPLE_RULES:
        raise ValueError(f"signature {name}: match.samples must be one of {', '.join(SAMPLE_RULES)}")
    return rule


def load_signatures(directory: Path = SIGNATURE_DIR, bug: str = "") -> list[Signature]:
    """The signatures in directory; bug: what those that name no bug are of
    (a user's signatures/ describe the user's reproducer)."""
    sigs = []
    for p in sorted(directory.glob("*.toml")):
        try:
            with open(p, "rb") as f:
                doc = tomllib.load(f)
            sigs.append(Signature.from_toml({"bug": bug} | doc))
        except (OSError, tomllib.TOMLDecodeError, KeyError, ValueError) as e:
            raise ValueError(f"signature {p}: {e}") from None
    return sorted(sigs, key=lambda s: -s.priority)


def signatures_for(repro: Reproducer) -> tuple[list[Signature], str]:
    """The reproducer's own signatures (tried first) and kstall's, and its
    bug name when some of them are its own ("" when none are: any hang it
    makes is its finding)."""
    own = load_signatures(Path(repro.signatures), repro.name) if repro.signatures else []
    sigs = own + load_signatures()
    return sigs, repro.name if any(s.bug == repro.name for s in sigs) else ""


USER = Signature("user", "in user mode", Role.BENIGN, -1, frozenset())
UNKNOWN = Signature("unknown", "unknown", Role.UNKNOWN, -2, frozenset())


def positions(frames: list[dict], depth: int = 1, interrupted: bool = True) -> list[int]:
    """Indices of the frames the CPU is 'in': the pc and the depth-1 frames
    below it (a spin loop that calls helpers, e.g. hrtimer_cancel ->
    hrtimer_try_to_cancel -> _raw_spin_lock_irqsave), frames inlined there
    (DWARF lists the inlined function first, its container next), and for
    every interrupt frame on the stack the pc it returns to (and depth-1
    frames below that). Below where a run starts, a frame the unwinder marks
    unreliable (the kernel's "? " frames: a stale return address found on
    the stack, no call in progress) or one that names no function (a stack
    word taken for a frame: ppc64el's pv spinlock slow path leaves one) is
    no call of the loop's and counts for no depth, as syzkaller's report
    reader skips "? " frames. interrupted=False: the pc's run only, not
    what an interrupt returns to."""
    if not frames:
        return []
    starts = [0] + [j for j, f in enumerate(frames) if f.get("interrupted") and j and interrupted]
    out: list[int] = []
    for start in starts:
        i, taken = start, 0
        while i < len(frames) and taken < depth:
            if i not in out:
                out.append(i)
            f = frames[i]
            if not f.get("inlined") and (i == start or (f.get("reliable") is not False and f.get("function"))):
                taken += 1
            i += 1
            if i < len(frames) and frames[i].get("interrupted"):
                break
    return out


def mark_interrupts(frames: list[dict], a: arch.Arch) -> list[dict]:
    """The frames with the one after each run of interrupt-entry frames (the
    architecture's `interrupt_entries`) marked as where the interrupt cut
    in, as kstall's own unwinders mark it: GDB's unwinder (DWARF) and a back
    chain that missed the frame's marker leave it unmarked, and a CPU caught
    once in a timer interrupt on top of its wait looked out of the wait."""
    entries = a.table.get("interrupt_entries", ())
    out = [dict(f) for f in frames]
    for i in range(1, len(out)):
        prev = base_name(out[i - 1].get("function", ""))
        here = base_name(out[i].get("function", ""))
        entry = any(fnmatch.fnmatchcase(prev, e) for e in entries)
        if entry and not any(fnmatch.fnmatchcase(here, e) for e in entries) and not out[i].get("inlined"):
            out[i]["interrupted"] = True
    return out


def matches(sig: Signature, cpu: dict) -> bool:
    if cpu.get("state") in sig.states:
        return True
    frames = cpu.get("frames", [])
    names = [base_name(f.get("function", "")) for f in frames]
    for i in positions(frames, sig.depth, sig.in_interrupted):
        if names[i] not in sig.at:
            continue
        if sig.under and not any(n in sig.under for n in names[i + 1:i + 1 + sig.within]):
            continue
        if sig.and_under and not any(n in sig.and_under for n in names[i + 1:i + 1 + sig.and_within]):
            continue
        return True
    return False


def in_user_mode(cpu: dict) -> bool:
    return arch.of_dump(cpu).in_user_mode(cpu.get("regs", {}))


def classify_cpu(cpu: dict, sigs: list[Signature]) -> Signature:
    if in_user_mode(cpu):
        return USER
    for sig in sigs:
        if matches(sig, cpu):
            return sig
    return UNKNOWN


# the roles a summary names (benign CPUs are left out)
NAMED_ROLES = (Role.CULPRIT, Role.VICTIM, Role.INFRA, Role.UNKNOWN)


@dataclass
class CpuClass:
    cpu: int
    signature: Signature
    samples: int
    seen: dict[str, int]
    stuck: bool
    pc: str
    frames: list[dict] = field(default_factory=list)
    state: str = ""
    # as the kernel's records in memory say (kernel_waits.py): the CPUs it waits for, the lock it spins on
    waits_for: list[int] = field(default_factory=list)
    lock: str = ""
    waits_how: str = ""  # "memory": waits_for is the kernel's record
    described: str = ""  # a CPU no signature names: what its state says it does (cpu_state.py)

    @property
    def title(self) -> str:
        """The signature's title, or for a CPU none names, its state: never "unknown" when that is known."""
        return self.described if self.signature.role == Role.UNKNOWN and self.described else self.signature.title

    def to_json(self) -> dict:
        return {"cpu": self.cpu, "class": self.title, "signature": self.signature.name,
                "role": self.signature.role, "stuck": self.stuck, "samples": self.samples,
                "seen": self.seen, "pc": self.pc, "state": self.state,
                "waits_for": self.waits_for, "lock": self.lock, "waits_how": self.waits_how,
                "frames": [frame_text(f) for f in self.frames]}

    def waits_text(self) -> str:
        return waits_text(self.cpu, self.waits_for, self.lock, self.waits_how == "memory")


def waits_text(cpu: int, waits_for: list[int], lock: str = "", recorded: bool = False) -> str:
    """'waits for CPU0', 'on lock X, held by CPU1' ("" for no wait): whom a
    CPU waits for; recorded: the kernel's records say so (a lock's holder)."""
    cpus = ",".join(f"CPU{n}" for n in waits_for)
    if lock and recorded:
        return f"on lock {lock}, which it holds itself" if waits_for == [cpu] else \
            f"on lock {lock}, held by {cpus or 'no CPU on record'}"
    waits = f"waits for {cpus}" if cpus else ""
    return ", ".join(p for p in (f"on lock {lock}" if lock else "", waits) if p)


def frame_text(f: dict) -> str:
    """One frame as the kernel prints it: '? ' when unreliable, and the pc an
    interrupt frame returns to marked as such."""
    text = f.get("text") or f.get("addr", "?")
    if f.get("interrupted"):
        return f"--- interrupted at {text}"
    if f.get("inlined"):
        return f"{text} (inlined)"
    return text if f.get("reliable", True) else f"? {text}"


def classify_samples(samples: list[dict], sigs: list[Signature]) -> list[CpuClass]:
    """samples: GDB dumps ({"cpus": [...]}) of the same guest, oldest first."""
    per_cpu: dict[int, list[tuple[Signature, dict]]] = {}
    for s in samples:
        for cpu in s.get("cpus", []):
            cpu = cpu | {"frames": mark_interrupts(cpu.get("frames", []), arch.of_dump(cpu))}
            per_cpu.setdefault(cpu["cpu"], []).append((classify_cpu(cpu, sigs), cpu))
    out = []
    for n, seq in sorted(per_cpu.items()):
        counts = Counter(sig.name for sig, _ in seq)
        by_name = {sig.name: sig for sig, _ in seq}
        # a culprit seen in fewer samples than its hang kind keeps a CPU is not this CPU's class
        held = [s for s in by_name.values()
                if s.role != Role.CULPRIT or SAMPLE_RULES[s.samples](counts[s.name], len(seq))]
        best = max(held, key=lambda s: (counts[s.name], s.priority)) if held else UNKNOWN
        pcs = {base_name(c.get("frames", [{}])[0].get("function", "")) or arch.of_dump(c).pc_of(c["regs"])
               for _, c in seq}
        last = ([c for sig, c in seq if sig.name == best.name] or [seq[-1][1]])[-1]
        frames = last.get("frames", [])
        out.append(CpuClass(cpu=n, signature=best, samples=len(seq), seen=dict(counts),
                            # a known class in every sample is a spin even if the loop
                            # spans functions; an unknown one must also stay put
                            stuck=len(seq) > 1 and len(counts) == 1 and (best is not UNKNOWN or len(pcs) == 1),
                            pc=frames[0].get("text", "") if frames else arch.of_dump(last).pc_of(last["regs"]),
                            frames=frames, state=last.get("state", "")))
    return out


def emulator_fault(classes: list[CpuClass]) -> CpuClass | None:
    """A CPU in an infra signature whose whole shape the other CPUs complete
    (Signature.shape), or None: one CPU's stack alone never makes a hang
    the emulator's."""
    def completes(o: CpuClass, shape: frozenset[str], trapped_at: set[str]) -> bool:
        # seen in the shape in some sample, and nowhere else: a CPU that
        # re-enters an int3 is caught at the patched byte as often as in
        # exc_int3, which no signature names on its own; or caught at that
        # byte in every sample, where the fault's CPU took its int3
        seen = set(o.seen) - {UNKNOWN.name}
        return seen <= shape if seen else o.stuck and o.pc in trapped_at
    for c in classes:
        sig = c.signature
        if sig.role != Role.INFRA:
            continue
        trapped_at = {f["text"] for f in c.frames if f.get("interrupted") and f.get("text")}
        others = [o for o in classes if o.cpu != c.cpu and o.signature.role != Role.BENIGN]
        if sig.shape_alone or len(others) >= sig.shape_min and all(completes(o, sig.shape, trapped_at)
                                                                   for o in others):
            return c
    return None


def summarize(classes: list[CpuClass]) -> str:
    """'hrtimer_cancel self-deadlock on CPU0,CPU1; csd_lock_wait victim on CPU3 (waits for CPU1)'"""
    groups: dict[str, list[CpuClass]] = {}
    order: dict[str, int] = {}
    for c in classes:
        if c.signature.role in NAMED_ROLES:
            groups.setdefault(c.title, []).append(c)
            order[c.title] = c.signature.priority
    parts = []
    for title, group in sorted(groups.items(), key=lambda kv: -order[kv[0]]):
        texts = [c.waits_text() for c in group]
        if len(set(texts)) == 1:  # the same wait (or none) for the whole group: said once
            cpus = ",".join(f"CPU{c.cpu}" for c in group) + (f" ({texts[0]})" if texts[0] else "")
        else:
            cpus = ",".join(f"CPU{c.cpu}" + (f" ({t})" if t else "") for c, t in zip(group, texts))
        parts.append(f"{title} on {cpus}")
    return "; ".join(parts)
