# SPDX-License-Identifier: GPL-2.0
"""`kstall analyze RUN`: a recorded hang read again, offline, with today's
signature and CPU-state files: the GDB samples the run kept are classified
anew and compared, CPU by CPU, with what the run recorded. Nothing boots, so
old runs stay comparable as signatures improve, and a matrix can be judged
again from its run directories.

What it reads again: each CPU's signature and role, the CPU states of the
CPUs no signature names (cpu_state.py), and the titles of the kernel's
reports in the run's console.log (console-patterns.toml). When the run kept a vmcore
(verify --vmcore), every CPU is also read from it, as a sample of its own
(harness/debug/coresample.py): the stacks and the waits the kernel records,
at the moment the core was taken. What it does not read: the console,
latency stalls and a process's threads (their evidence is in the record).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from harness.analysis import classify, console, cpu_state, task_waits, wait_graph
from harness.analysis.classify import Role
from harness.analysis.kallsyms import Kallsyms
from harness.base import arch as arches
from harness.base import paths, reproducers, untrusted
from harness.debug import corekernel, coresample
from harness.drivers import layouts


class AnalyzeError(ValueError):
    """A directory that is no run kstall can read again."""


@dataclass
class Reading:
    run: Path
    recorded: dict                  # CPU number -> {"signature", "role", "class"} as run.json has them
    now: dict                       # the same, read today
    culprit_before: str             # run.json's signature ("" when none)
    culprit_now: str
    title_now: str
    differences: list[str] = field(default_factory=list)
    core: dict = field(default_factory=dict)  # CPU number -> its class read from the vmcore
    titles: list[str] | None = None  # the console's report titles read today (None: no console kept)
    waits: list[str] | None = None  # who holds what the sleeping tasks wait for, read from the vmcore

    @property
    def agrees(self) -> bool:
        return not self.differences

    def to_json(self) -> dict:
        return {"run": str(self.run), "agrees": self.agrees, "signature_recorded": self.culprit_before,
                "signature_now": self.culprit_now, "title_now": self.title_now, "differences": self.differences,
                "cpus_now": self.now, "cpus_in_vmcore": self.core or None, "console_titles_now": self.titles,
                "waits_in_vmcore": self.waits}

    def text(self) -> str:
        head = (f"{self.run.name}: the same reading as recorded ({self.culprit_now or 'no culprit signature'})"
                if self.agrees else f"{self.run.name}: read differently today")
        core = [f"  vmcore: CPU{n} {c['class']}" for n, c in sorted(self.core.items())]
        titles = [f"  console: {t}" for t in self.titles or []]
        waits = [f"  vmcore: {w}" for w in self.waits or []]
        return "\n".join([head, *(f"  {d}" for d in self.differences), *core, *waits, *titles])


def _signatures(doc: dict) -> list[classify.Signature]:
    """Today's signatures for the run's reproducer (its own first), or kstall's alone."""
    r = doc.get("reproducer") or {}
    try:
        repro = reproducers.resolve(r["name"]) if r.get("name") in reproducers.names() else None
    except (reproducers.ReproducerError, KeyError):
        repro = None
    return classify.signatures_for(repro)[0] if repro else classify.load_signatures()


def recorded_culprit(doc: dict) -> str:
    """The culprit signature the run's CPUs had: what today's reading of the
    same samples is set against. A verdict judged by another judge (a
    latency stall the reproducer measured, a process's threads) named no CPU
    culprit, and its evidence is in the record, not in the samples."""
    return next((c.get("signature") or "" for c in doc.get("cpus", []) if c.get("role") == str(Role.CULPRIT)), "")


def read(run: Path) -> Reading:
    """The run's samples classified with today's files, beside its record."""
    try:
        doc = json.loads((run / "run.json").read_text())
    except (OSError, ValueError) as e:
        raise AnalyzeError(f"{run}: no readable run.json ({e})") from None
    samples = [json.loads(p.read_text()) for p in sorted(run.glob("sample-*.json"))]
    if not samples and not (run / "console.log").is_file():
        raise AnalyzeError(f"{run}: no vCPU samples and no console kept: nothing to read again")
    classes = classify.classify_samples(samples, _signatures(doc))
    hang = cpu_state.analyze(samples, classes)
    cpu_state.note_waits(classes, hang)  # as a live run does: a CPU no signature names, by its state
    now = {c.cpu: {"signature": c.signature.name, "role": str(c.signature.role), "class": c.title} for c in classes}
    recorded = {c["cpu"]: {k: c.get(k) for k in ("signature", "role", "class")} for c in doc.get("cpus", [])}
    culprits = [c for c in classes if c.signature.role == Role.CULPRIT]
    culprit_now = culprits[0].signature.name if culprits else ""
    out = Reading(run, recorded, now, recorded_culprit(doc), culprit_now,
                  culprits[0].title if culprits else hang.title)
    if samples and out.culprit_before != culprit_now:  # (without samples the culprit was read another way)
        out.differences.append(f"culprit signature: recorded {out.culprit_before or 'none'}, "
                               f"today {culprit_now or 'none'}")
    for n in sorted(set(recorded) | set(now)):
        was, is_ = recorded.get(n) or {}, now.get(n) or {}
        if (was.get("signature"), was.get("role")) != (is_.get("signature"), is_.get("role")):
            out.differences.append(f"CPU{n}: recorded {was.get('signature')} ({was.get('role')}), "
                                   f"today {is_.get('signature')} ({is_.get('role')})")
    if (run / "vmcore").is_file():
        _read_core(run, doc, out)
    if (run / "console.log").is_file():
        _read_console(run, doc, out)
    return out


def _read_console(run: Path, doc: dict, out: Reading) -> None:
    """The kernel's reports in the console titled with today's patterns. A
    report the run recorded is found again by its first line: a title that
    changed, or a report no pattern matches any more, is a difference. The
    log may go on past the verdict (a held guest, a core being written), so
    a report the run never saw is listed, not counted."""
    reports = console.scan((run / "console.log").read_text(errors="replace"))
    today = {r.line: r.title for r in reports}
    recorded = [r for r in (doc.get("evidence") or {}).get("console_reports") or [] if r.get("title")]
    out.titles = [t["title"] for t in console.titles([{"kind": r.kind, "title": r.title} for r in reports])]
    for r in recorded:
        first = (r.get("excerpt") or [""])[0]
        if first in today and today[first] != r["title"]:
            out.differences.append(f"console: recorded {r['title']!r}, today {today[first]!r}")
        elif first not in today:
            out.differences.append(f"console: {r['title']!r} is no report by today's patterns")


def _read_core_waits(doc: dict, core: dict, out: Reading) -> None:
    """Who holds what the sleeping tasks wait for, as the vmcore has it, with
    the stacks the run recorded; a wait the run recorded that the core does
    not hold (or the other way round) is a difference."""
    recorded = doc.get("waits") or {}
    if "waits" not in core or "waits" not in recorded:
        return
    task_waits.with_stacks(core, {t["pid"]: t for t in recorded.get("tasks", []) if isinstance(t, dict) and "pid" in t})
    out.waits = wait_graph.Graph(core).roots()

    def key(w: dict) -> tuple:
        return w.get("pid"), w.get("lock"), w.get("owner")
    was, now = {key(w) for w in recorded["waits"]}, {key(w) for w in core["waits"]}
    if was != now:
        out.differences.append(f"vmcore: {len(now - was)} wait(s) the run did not record, "
                               f"{len(was - now)} recorded that the core does not hold")


def _read_core(run: Path, doc: dict, out: Reading) -> None:
    """The CPUs as the vmcore has them; a culprit the record names that no CPU of the core shows is a difference."""
    name = (doc.get("kernel") or {}).get("arch") or arches.DEFAULT
    if name not in arches.names():
        out.differences.append(f"vmcore: run.json names no architecture kstall knows ({str(name)[:20]!r})")
        return
    a = arches.get(name)
    # only from kstall's own cache: a layout is written beside the symbols, and another user's may not be readable
    kallsyms = untrusted.path_under((doc.get("symbols") or {}).get("cached"), paths.cache_dir())
    syms = Kallsyms.load(kallsyms) if kallsyms is not None and kallsyms.is_file() else None
    lay = layouts.cached(kallsyms, a) if syms and kallsyms else None
    try:
        s = coresample.sample(run / "vmcore", a, syms, json.loads(lay.read_text()) if lay else None)
    except (corekernel.CoreError, OSError) as e:
        out.differences.append(f"vmcore: unreadable ({e})")
        return
    _read_core_waits(doc, s.get("task_waits") or {}, out)
    classes = classify.classify_samples([s], _signatures(doc))
    out.core = {c.cpu: {"signature": c.signature.name, "role": str(c.signature.role), "class": c.title}
                for c in classes}
    if out.culprit_before and not any(c.signature.name == out.culprit_before for c in classes):
        out.differences.append(f"vmcore: no CPU in {out.culprit_before}, the culprit recorded")
