# SPDX-License-Identifier: GPL-2.0
"""Names a user-space hang from a thread dump: futex groups, the lock's owner,
and the hang class (signature files in harness/analysis/signatures/threads/).

Threads are grouped by the futex word they wait on. The owner of a word comes
from the word itself when the lock records one (a pthread_mutex_t's __owner,
as jemalloc's mutexes have; only trusted when the waiters went through
pthread_mutex_lock), otherwise from the stacks: the thread that waits inside a
signal handler and was interrupted in allocator code that runs with the lock
held. A signature matches an owner that waits for its own lock inside its
handler (shape "self": the self-deadlock), or a deadlock cycle closed by a
thread waiting inside its handler after the signal interrupted it in the
allocator (shape "cycle": the handler took the allocator's locks out of order).
"""
from __future__ import annotations

import fnmatch
import signal
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from harness.base import paths
from harness.analysis.classify import Role, base_name
from harness.analysis.threads import Dump, ProcThread, futex_words

SIGNATURE_DIR = paths.data_file("harness", "analysis", "signatures", "threads")
WAITS = paths.data_file("harness", "analysis", "thread-waits.toml")


@dataclass(frozen=True)
class ThreadSignature:
    name: str
    title: str
    role: Role
    lock_wait: tuple[str, ...]
    handler_alloc: tuple[str, ...]
    held_in: tuple[tuple[str, ...], ...]  # tiers, most certain first
    mutex_lock: tuple[str, ...]
    just_acquired: tuple[str, ...] = ()
    depth: int = 4
    within: int = 12
    description: str = ""
    shape: str = "self"  # "self" | "cycle"

    @classmethod
    def from_toml(cls, doc: dict) -> "ThreadSignature":
        m, shape = doc["match"], doc.get("shape", "self")
        if shape not in ("self", "cycle"):
            raise ValueError(f"thread signature {doc.get('name')}: shape must be self or cycle")
        return cls(doc["name"], doc["title"], Role(doc.get("role", Role.CULPRIT)), tuple(m["lock_wait"]),
                   tuple(m["handler_alloc"]), tuple(tuple(tier) for tier in m["held_in"]),
                   tuple(m.get("mutex_lock", ())), tuple(m.get("just_acquired", ())), int(m.get("depth", 4)),
                   int(m.get("within", 12)),
                   doc.get("description", "").strip(), shape)


def load_signatures(directory: Path = SIGNATURE_DIR) -> list[ThreadSignature]:
    """Self-deadlocks first: a process that shows both is named by its own
    lock. [match] like = NAME takes NAME's match (its function lists) and
    overrides what it sets itself."""
    docs = {}
    for p in sorted(directory.glob("*.toml")):
        with open(p, "rb") as f:
            doc = tomllib.load(f)
        docs[doc.get("name", p.stem)] = doc
    out = []
    for doc in docs.values():
        like = doc.get("match", {}).get("like")
        if like is not None:
            if like not in docs or "like" in docs[like].get("match", {}):
                raise ValueError(f"thread signature {doc.get('name')}: like = {like!r} names no signature with a "
                                 "match of its own")
            doc = doc | {"match": docs[like]["match"] | {k: v for k, v in doc["match"].items() if k != "like"}}
        out.append(ThreadSignature.from_toml(doc))
    return sorted(out, key=lambda s: s.shape != "self")


def _is(func: str | None, patterns: tuple[str, ...]) -> bool:
    name = base_name(func or "")
    return bool(name) and any(fnmatch.fnmatchcase(name, p) for p in patterns)


def signal_name(n: int | None) -> str:
    try:
        return signal.Signals(n).name if n else "signal"
    except ValueError:
        return f"signal {n}"


@dataclass
class Thread:
    lwp: int
    name: str
    frames: list[dict]
    futex: int | None = None
    state: str = ""
    kstack: list[str] = field(default_factory=list)
    error: str = ""

    def split(self) -> tuple[list[dict], dict | None, list[dict]]:
        """Frames inside the innermost signal frame, that frame, and the
        frames it interrupted."""
        for i, f in enumerate(self.frames):
            if f.get("sigtramp"):
                return self.frames[:i], f, self.frames[i + 1:]
        return self.frames, None, []

    def handler(self) -> str:
        inner, tramp, _ = self.split()
        return (inner[-1].get("func") or "??") if tramp and inner else ""

    def line(self, n: int = 8) -> str:
        parts = [f"<{signal_name(f.get('signal'))} handler called>" if f.get("sigtramp") else (f.get("func") or "??")
                 for f in self.frames[:n]]
        return " < ".join(parts) + (" < ..." if len(self.frames) > n else "") or f"(no stack: {self.error})"

    def to_json(self) -> dict:
        return {"lwp": self.lwp, "name": self.name, "state": self.state,
                "futex": f"{self.futex:#x}" if self.futex is not None else None, "frames": self.frames,
                "kstack": self.kstack, "error": self.error or None}


@dataclass
class Group:
    word: int
    waiters: list[int]
    owner: int | None = None
    owner_from: str = ""  # "__owner" | "stacks"

    def to_json(self) -> dict:
        return {"word": f"{self.word:#x}", "waiters": self.waiters, "owner": self.owner, "owner_from": self.owner_from}


@dataclass(frozen=True)
class Wait:
    """One edge of the wait-for graph: lwp waits for other, through word."""
    lwp: int
    other: int
    word: int
    kind: str  # "mutex" | "join"

    def text(self) -> str:
        how = " to exit (pthread_join)" if self.kind == "join" else f", which holds mutex {self.word:#x}"
        return f"LWP {self.lwp} waits for LWP {self.other}{how}"


@dataclass
class Analysis:
    threads: list[Thread]
    groups: list[Group]
    signature: ThreadSignature | None = None
    owner: Thread | None = None
    group: Group | None = None
    signal: str = ""
    waits: list[Wait] = field(default_factory=list)
    cycles: list[list[Wait]] = field(default_factory=list)  # deadlocks: each a cycle of waits
    cycle: list[Wait] = field(default_factory=list)  # the one a "cycle" signature matched

    def title(self) -> str:
        """The hang's name, the same in every run of it (no LWP numbers):
        the signature's, or 'user-space deadlock: 2 threads, mutex -> mutex'."""
        if self.signature:
            return self.signature.title.format(signal=self.signal or "signal")
        if self.cycles:
            c = self.cycles[0]
            return f"user-space deadlock: {len(c)} threads, {' -> '.join(w.kind for w in c)}"
        return ""

    @staticmethod
    def cycle_text(cycle: list[Wait]) -> str:
        """'deadlock: LWP 7 <-> LWP 8 (LWP 7 waits for LWP 8, which holds mutex 0x...; ...)'"""
        ring = " <-> ".join(f"LWP {w.lwp}" for w in cycle) if len(cycle) == 2 else \
            " -> ".join(f"LWP {w.lwp}" for w in cycle + cycle[:1])
        return f"deadlock: {ring} ({'; '.join(w.text() for w in cycle)})"

    @property
    def queued(self) -> list[int]:
        """Threads that wait for the hang's threads without being one of them."""
        if self.cycle:
            ring = {w.lwp for w in self.cycle}
            return sorted(w.lwp for w in self.waits if w.other in ring and w.lwp not in ring)
        return [w for w in self.group.waiters if w != self.owner.lwp] if self.group and self.owner else []

    def summary(self) -> str:
        n = len(self.queued)
        queued = f"{n} thread{'s' if n != 1 else ''} queued"
        if self.signature and self.owner and self.cycle:
            return (f"{self.title()} (LWP {self.owner.lwp} waits in its handler {self.owner.handler()}, called "
                    f"inside the allocator: {self.cycle_text(self.cycle)}; {queued})")
        if self.cycles:
            return "; ".join(self.cycle_text(c) for c in self.cycles)
        if self.signature and self.owner and self.group:
            return (f"{self.title()} (LWP {self.owner.lwp} holds {self.group.word:#x} and waits for it in its "
                    f"handler {self.owner.handler()}; {queued})")
        if self.groups:
            g = max(self.groups, key=lambda g: len(g.waiters))
            owner = f"owner LWP {g.owner} ({g.owner_from})" if g.owner else "no owner found" + self._suspects(g)
            return f"{len(g.waiters)} threads wait on futex {g.word:#x}; {owner}; no hang signature matched"
        return "no thread waits on a futex; no hang signature matched"

    def _suspects(self, g: Group) -> str:
        """Where the group's waiters that wait inside a signal handler, or
        whose stack was lost, were: what a reader needs when no owner is named."""
        out = []
        for t in self.threads:
            if t.lwp not in g.waiters:
                continue
            if not t.frames:
                out.append(f"LWP {t.lwp}: no stack")
            elif t.handler():
                out.append(f"LWP {t.lwp} waits in {t.handler()}, interrupted in "
                           + " < ".join(f.get("func") or "??" for f in t.split()[2][:3]))
        return f" ({'; '.join(out)})" if out else ""

    def to_json(self) -> dict:
        return {"signature": self.signature.name if self.signature else None, "summary": self.summary(),
                "owner": self.owner.lwp if self.owner else None,
                "owner_from": self.group.owner_from if self.group else None,
                "word": f"{self.group.word:#x}" if self.group else None,
                "handler": self.owner.handler() if self.owner else None, "signal": self.signal or None,
                "queued": self.queued, "groups": [g.to_json() for g in self.groups],
                "waits": [vars(w) for w in self.waits],
                "cycles": [[w.lwp for w in c] for c in self.cycles], "cycle": [w.lwp for w in self.cycle],
                "threads": [t.to_json() for t in self.threads]}

    def table(self) -> str:
        """The thread table, the futex groups and the verdict, for people."""
        rows = [f"{'LWP':>7}  {'NAME':<15} {'ST':<2} {'WAITS ON':<20} STACK (innermost first)"]
        joins = {w.lwp: w.other for w in self.waits if w.kind == "join"}
        for t in self.threads:
            waits = f"join LWP {joins[t.lwp]}" if t.lwp in joins else \
                f"futex {t.futex:#x}" if t.futex is not None else "-"
            rows.append(f"{t.lwp:>7}  {t.name[:15]:<15} {t.state[:2]:<2} {waits:<20} {t.line()}")
        rows.append("")
        for g in self.groups:
            owner = f"owner LWP {g.owner} (from {g.owner_from})" if g.owner else "owner unknown"
            rows.append(f"futex {g.word:#x}: {len(g.waiters)} waiting (LWP {', '.join(map(str, g.waiters))}); {owner}")
        rows.append(self.summary())
        return "\n".join(rows) + "\n"


def merge(dump: Dump, proc: dict[int, ProcThread]) -> list[Thread]:
    words = futex_words(dump, proc)
    out = []
    for t in sorted(dump.threads, key=lambda t: t["lwp"]):
        p = proc.get(t["lwp"])
        out.append(Thread(t["lwp"], (p.comm if p else "") or t.get("name") or "", t.get("frames") or [],
                          words.get(t["lwp"]), p.state if p else "", p.kstack if p else [], t.get("error") or ""))
    return out


def _waits_in_handler(t: Thread, sig: ThreadSignature) -> bool:
    inner, tramp, _ = t.split()
    return (tramp is not None and any(_is(f.get("func"), sig.lock_wait) for f in inner[:sig.depth])
            and any(_is(f.get("func"), sig.handler_alloc) for f in inner))


def _interrupted_in(t: Thread, patterns: tuple[str, ...], sig: ThreadSignature) -> bool:
    """The signal interrupted this thread in one of patterns, and not while it
    was itself waiting for a lock (then it holds none it waits for)."""
    outer = t.split()[2]
    if outer and _is(outer[0].get("func"), sig.lock_wait):
        return False
    return any(_is(f.get("func"), patterns) for f in outer[:sig.within])


# a system call instruction's length at most (x86's syscall and s390's svc
# are 2 bytes, the others 4): a wait interrupted there was being restarted
SYSCALL_INSN = 4


def _sleeping_pcs(members: list[Thread]) -> set[int]:
    """Where the waiters sleep: the instruction after their futex call."""
    return {t.frames[0]["pc"] for t in members if t.frames and t.frames[0].get("pc") is not None}


def _just_acquired(t: Thread, sig: ThreadSignature, sleeping: set[int]) -> bool:
    """Interrupted in its own lock wait, called from code that holds the lock,
    and not where the waiters sleep in the kernel (its wait was cut short by
    the signal, or restarted: it holds nothing)."""
    outer = t.split()[2]
    if not outer or not _is(outer[0].get("func"), sig.just_acquired):
        return False
    pc = outer[0].get("pc")
    if pc is not None and any(0 <= s - pc <= SYSCALL_INSN for s in sleeping):
        return False
    return any(_is(f.get("func"), tier) for f in outer[1:sig.within] for tier in sig.held_in)


def _owner_from_stacks(members: list[Thread], sig: ThreadSignature) -> Thread | None:
    """Interrupted where the lock is surely held beats interrupted where it
    may not have been taken yet (the signature's tiers). Last, with every
    waiter's stack known, the only one that may just have taken it."""
    for patterns in sig.held_in:
        found = [t for t in members if _waits_in_handler(t, sig) and _interrupted_in(t, patterns, sig)]
        if found:
            return found[0]
    if all(t.frames for t in members):
        sleeping = _sleeping_pcs(members)
        found = [t for t in members if _waits_in_handler(t, sig) and _just_acquired(t, sig, sleeping)]
        if len(found) == 1:
            return found[0]
    return None


def analyse(dump: Dump, proc: dict[int, ProcThread], sigs: list[ThreadSignature] | None = None) -> Analysis:
    sigs = load_signatures() if sigs is None else sigs
    waits = load_waits()
    threads = merge(dump, proc)
    by_lwp = {t.lwp: t for t in threads}
    words: dict[int, list[int]] = {}
    for t in threads:
        if t.futex is not None:
            words.setdefault(t.futex, []).append(t.lwp)
    groups = [Group(w, lwps) for w, lwps in sorted(words.items(), key=lambda kv: -len(kv[1]))]
    a = Analysis(threads, groups)
    for g in groups:
        members = [by_lwp[l] for l in g.waiters]
        word = dump.lock_words.get(g.word, {})
        mutex_lock = waits["mutex"] + tuple(p for s in sigs for p in s.mutex_lock)
        through_mutex = any(_is(f.get("func"), mutex_lock) for t in members for f in t.frames)
        if through_mutex and word.get("owner") in by_lwp:
            g.owner, g.owner_from = word["owner"], "__owner"
        for sig in (s for s in sigs if s.shape == "self"):
            if g.owner is None:
                t = _owner_from_stacks(members, sig)
                if t is not None:
                    g.owner, g.owner_from = t.lwp, "stacks"
            owner = by_lwp.get(g.owner) if g.owner is not None else None
            if a.signature is None and owner is not None and owner.lwp in g.waiters and _waits_in_handler(owner, sig):
                a.signature, a.owner, a.group = sig, owner, g
                a.signal = signal_name(owner.split()[1].get("signal"))
    a.waits = wait_for(threads, groups, dump.lock_words, waits)
    a.cycles = cycles(a.waits)
    if a.signature is None:
        _name_cycle(a, [s for s in sigs if s.shape == "cycle"], by_lwp)
    return a


def _name_cycle(a: Analysis, sigs: list[ThreadSignature], by_lwp: dict[int, Thread]) -> None:
    """A cycle one of whose threads waits in its handler's allocation, and
    was interrupted inside the allocator (where it holds the allocator's
    locks): the handler took them in another order than the allocator does."""
    for sig in sigs:
        for cycle in a.cycles:
            for w in cycle:
                t = by_lwp[w.lwp]
                if _waits_in_handler(t, sig) and any(_interrupted_in(t, tier, sig) for tier in sig.held_in):
                    a.signature, a.owner, a.cycle = sig, t, cycle
                    a.group = next((g for g in a.groups if g.word == w.word), None)
                    a.signal = signal_name(t.split()[1].get("signal"))
                    return


def load_waits(path: Path = WAITS) -> dict[str, tuple[str, ...]]:
    with open(path, "rb") as f:
        return {kind: tuple(t["functions"]) for kind, t in tomllib.load(f).items()}


def wait_for(threads: list[Thread], groups: list[Group], lock_words: dict[int, dict],
             waits: dict[str, tuple[str, ...]] | None = None) -> list[Wait]:
    """The wait-for graph's edges: a thread in a mutex lock waits for its
    word's owner; one in pthread_join for the thread whose tid its word holds."""
    waits = load_waits() if waits is None else waits
    lwps = {t.lwp for t in threads}
    owners = {g.word: g.owner for g in groups if g.owner is not None}
    out = []
    for t in threads:
        if t.futex is None:
            continue
        funcs = [f.get("func") for f in t.frames]
        joined = lock_words.get(t.futex, {}).get("lock")
        if any(_is(f, waits.get("join", ())) for f in funcs) and joined in lwps and joined != t.lwp:
            out.append(Wait(t.lwp, joined, t.futex, "join"))
        elif any(_is(f, waits.get("mutex", ())) for f in funcs) and owners.get(t.futex) not in (None, t.lwp):
            out.append(Wait(t.lwp, owners[t.futex], t.futex, "mutex"))
    return out


def cycles(waits: list[Wait]) -> list[list[Wait]]:
    """The cycles of the wait-for graph, each once, from its lowest LWP (a
    thread waits for one other at most: follow the edges)."""
    edge = {w.lwp: w for w in waits}
    found: list[list[Wait]] = []
    seen: set[int] = set()
    for start in sorted(edge):
        path: list[int] = []
        at = start
        while at in edge and at not in seen and at not in path:
            path.append(at)
            at = edge[at].other
        if at in path:  # back to a thread of this walk: a cycle from there
            ring = path[path.index(at):]
            first = ring.index(min(ring))
            found.append([edge[l] for l in ring[first:] + ring[:first]])
        seen.update(path)
    return found
