# SPDX-License-Identifier: GPL-2.0
"""`kstall bisect debian`: bisect over Debian's kernel package versions.

No build: every candidate is a Debian package kstall can download. While one
step runs, the kernels the next step may need (one for either outcome) are
downloaded in the background, as mozregression does. The state is written
after every step (bisect.json), so `--resume DIR` continues an interrupted
bisection from its recorded steps.
"""
from __future__ import annotations

import json
import time
from pathlib import Path
from dataclasses import dataclass
from typing import Callable

from harness.analysis import bug_record
from harness.analysis.bug_record import BugRecord
from harness.analysis.record import RunRecord
from harness.base import background, paths, procs, rundir as results
from harness.drivers import explain
from harness.drivers.bisect import fix_entries
from harness.drivers.bisect.steps import StepPolicy, run_step
from harness.drivers.bisect.search import REPRODUCES, Bisection, Outcome, Step, TooManyErrors, ending
from images.kernels import debian
from images.kernels.kernel import SpecError
from images.kernels.schemes import changelog, resolve

SCHEMA = "kstall.bisect/1"


def flavour_of(old: str, new: str) -> str:
    """The flavour both ends name ("6.19.14-rt": rt-amd64; plain: amd64)."""
    flavours = {debian.parse_query(v)[2] for v in (old, new)}
    if len(flavours) != 1:
        raise SpecError(f"--old {old} and --new {new} name different flavours: give both the same suffix (-rt)")
    return flavours.pop()


def suffix(flavour: str) -> str:
    """What a version takes to name this flavour in a debian: spec ("-rt")."""
    return "" if flavour == debian.DEFAULT_FLAVOUR else "-" + flavour.removesuffix("-" + debian.DEFAULT_FLAVOUR)


def upstream_of(version: str) -> str:
    return debian.parse_query(version)[0] or version


def candidates(old: str, new: str) -> list[str]:
    """Upstream versions from old to new (inclusive) that debian: can fetch,
    in the flavour the ends name."""
    flavour = flavour_of(old, new)
    kernels = [k for k, _ in debian.available(arch=debian.arch_of(flavour)) if k.flavour == flavour]
    versions = sorted({k.upstream for k in kernels}, key=debian.version_key)
    old, new = upstream_of(old), upstream_of(new)
    for v in (old, new):
        if v not in versions:
            debian.find(kernels, v + suffix(flavour))  # raises with the nearest versions
    lo, hi = sorted((versions.index(old), versions.index(new)))
    if versions.index(old) > versions.index(new):
        raise SpecError(f"--old {old} is newer than --new {new}")
    return versions[lo:hi + 1]


class Prefetcher:
    """Downloads kernels ahead of the steps that will need them (bounded: one
    download at a time, never more than a few queued)."""

    def __init__(self, echo: Callable[[str], None], enabled: bool = True, flavour_suffix: str = "") -> None:
        self.enabled = enabled
        self.suffix = flavour_suffix
        self.echo = echo
        self.queue = background.Serial("prefetch", procs.background_priority)
        self.queued: dict[str, background.Pending[None]] = {}

    def __call__(self, versions: list[str]) -> None:
        if not self.enabled:
            return
        for v in versions:
            if v not in self.queued:
                self.queued[v] = self.queue.submit(self._fetch, v)

    def _fetch(self, version: str) -> None:
        try:
            resolve(f"debian:{version}{self.suffix}", fetch=True)
        except SpecError as e:  # the step itself will report it
            self.echo(f"prefetch of {version} failed: {e}")

    def close(self) -> None:
        self.queue.close()


def upstream_range(outcome: Outcome) -> str:
    if not outcome.last_old or not outcome.first_new:
        return ""
    return f"v{outcome.last_old}..v{outcome.first_new}"


def crossing(outcome: Outcome) -> str:
    """What a change found where two stable lines meet is: not one version's."""
    if not outcome.last_old or not outcome.first_new:
        return ""
    old, new = bug_record.line_of(outcome.last_old), bug_record.line_of(outcome.first_new)
    if old == new:
        return ""
    what = "the hang" if outcome.direction == "regression" else "the fix"
    return (f"{what} shows up where the range crosses from the {old} line (last: {outcome.last_old}) to the "
            f"{new} line (first: {outcome.first_new}): the two lines differ by much more than one change, so no "
            f"first {'bad' if outcome.direction == 'regression' else 'fixed'} version is named; bisect within "
            "one line, or the commits between with `kstall bisect git`")


def summary_line(outcome: Outcome) -> str:
    if crossing(outcome):
        return crossing(outcome)
    if outcome.direction == "regression":
        return (f"last version without the hang: {outcome.last_old}; first version with it: {outcome.first_new} "
                f"(upstream range {upstream_range(outcome)})")
    if outcome.direction == "fix":
        return (f"last version with the bug: {outcome.last_old}; first version without it (the fix): "
                f"{outcome.first_new} (upstream range {upstream_range(outcome)})")
    return outcome.message


def beside_the_record(record: BugRecord, cands: list[str], outcome: Outcome, flavour_suffix: str = "") -> dict:
    """The change the record alone predicts over the candidates, and what
    each found end's own package says (its changelog lists backports the
    record does not know of)."""
    doc = bug_record.expected_change(record, cands).to_json()
    doc["cve"], doc["found"] = record.cve, {}
    for v in (outcome.last_old, outcome.first_new):
        if v:
            try:
                doc["found"][v] = explain.predict(resolve(f"debian:{v}{flavour_suffix}"), record).to_json()
            except SpecError as e:
                doc["found"][v] = {"status": bug_record.UNKNOWN, "reasons": [str(e)]}
    return doc


def record_lines(doc: dict) -> list[str]:
    """The record's prediction printed beside the range found, and what the
    first fixed version's changelog says of the fix."""
    fix = doc.get("fix_entries")
    said = [f"fix: {fix['text']}", *(f"  {e['version']}: {e['subject']} ({e['why']})" for e in fix["entries"])] \
        if fix else []
    rec = doc.get("record")
    if not rec:
        return said
    out = [f"{rec['text']} ({rec['cve']})"]
    for v, p in rec["found"].items():
        why = "; ".join(r for r in p["reasons"] if r.startswith(("changelog:", "the package")))
        out.append(f"debian:{v}{doc.get('flavour_suffix', '')} by its package: {p['status']}"
                   + (f" ({why})" if why else ""))
    return out + said


def run(old: str, new: str, policy: StepPolicy, out: results.RunDir, echo: Callable[[str], None],
        prefetch: bool = True, resumed: dict[str, Step] | None = None, argv: list[str] | None = None,
        record: BugRecord | None = None) -> dict:
    """record: the reproducer's bug record, whose prediction goes beside the range found."""
    cands = candidates(old, new)
    flavour_suffix = suffix(flavour_of(old, new))
    log = open(out.work / "bisect.log", "a")
    started = time.time()
    doc: dict = {"schema": SCHEMA, "kind": "debian", "id": out.id, "old": old, "new": new,
                 "reproducer": policy.reproducer, "candidates": cands, "flavour_suffix": flavour_suffix,
                 "pmiss_target": policy.pmiss_target,
                 "prefetch": prefetch, "command": argv or [], "steps": [], "status": "running"}

    def save() -> None:
        doc["steps"] = [s.to_json(out.work) for s in b.steps.values()]
        paths.write_atomic(out.work / "bisect.json", json.dumps(doc, indent=2) + "\n")

    def test(version: str) -> Step:
        procs.check_terminated()
        n = len(b.steps) + 1
        echo(f"step {n}: debian:{version} ...")
        return learned(run_step(f"debian:{version}{flavour_suffix}", version, policy, echo, provisional=True))

    def confirm(unsure: Step) -> Step:
        procs.check_terminated()
        why = "one clean run of its time" if policy.timed else "clean, but on a host too busy for its P(miss)"
        echo(f"{unsure.candidate}: {why}: confirming it before the answer rests on it ...")
        return learned(run_step(f"debian:{unsure.candidate}{flavour_suffix}", unsure.candidate, policy, echo,
                                after=unsure))

    def learned(done: tuple[Step, list[RunRecord]]) -> Step:
        step, recs = done
        if step.state == REPRODUCES and not policy.bad_end_runs:
            policy.learn_from_bad_end(recs[-1])
        return step

    def on_step(step: Step) -> None:
        n = list(b.steps).index(step.candidate) + 1  # a confirmed step keeps the number it first had
        line = (f"step {n}: {step.candidate:<9} {step.state:<10} {step.verdict:<14} {step.seconds:6.1f}s  "
                f"{step.p_miss or step.line}")
        echo(line)
        log.write(line + "\n")
        log.flush()
        save()

    fetcher = Prefetcher(echo, prefetch, flavour_suffix)
    b = Bisection(cands, test, resumed, fetcher, on_step, confirm=confirm)
    flavour = f" ({flavour_suffix[1:]} flavour)" if flavour_suffix else ""
    echo(f"{len(cands)} Debian versions from {old} to {new}{flavour}: {', '.join(cands)}")
    try:
        outcome = b.run()
        doc["status"] = "done"
    except TooManyErrors as e:
        outcome = Outcome("none", message=f"stopped: {e}")
        doc["status"] = "errors"
    except BaseException as e:  # --resume still works from what was saved
        doc.update(ending(e))
        save()
        raise
    finally:
        fetcher.close()
        log.close()
    doc.update({"direction": outcome.direction, "last_old": outcome.last_old, "first_new": outcome.first_new,
                "skipped_between": outcome.skipped_between, "message": outcome.message,
                "upstream_range": upstream_range(outcome), "summary": summary_line(outcome),
                "crosses_line": bool(crossing(outcome)),
                "verifies": len(b.steps), "wall_s": round(time.time() - started, 1),
                "seconds_per_step": round((time.time() - started) / max(len(b.steps), 1), 1)})
    if record is not None:
        doc["record"] = beside_the_record(record, cands, outcome, flavour_suffix)
    if outcome.direction == "fix" and not crossing(outcome):
        doc["fix_entries"] = fix_in_changelog(outcome, b.steps, record, flavour_suffix)
    save()
    return doc


def fix_in_changelog(outcome: Outcome, steps: dict[str, Step], record: BugRecord | None, flavour_suffix: str) -> dict:
    """The first fixed version's changelog entry that names the fix, or the
    candidates near the hang's code (fix_entries.py), from the console of the
    last version's run that hung."""
    assert outcome.last_old and outcome.first_new  # a fix was found: both ends are named
    hung = steps.get(outcome.last_old)
    console = ""
    for run in reversed(hung.runs if hung else []):
        if (log := Path(run) / "console.log").is_file():
            console = log.read_text(errors="replace")
            break
    try:
        log_path = changelog(resolve(f"debian:{outcome.first_new}{flavour_suffix}"))
    except SpecError:
        log_path = None
    return fix_entries.answer(log_path, outcome.last_old, outcome.first_new,
                              record.fix_subject if record else "", console)


@dataclass
class Resumed:
    """An earlier (interrupted) bisection --resume continues: its steps and
    what it was asked (old, new, reproducer), which the command line may
    override."""
    directory: Path
    steps: dict[str, Step]
    old: str
    new: str
    reproducer: str

    @classmethod
    def load(cls, directory: Path) -> "Resumed":
        """FileNotFoundError without bisect.json. A killed bisection's
        directory, which the sweep keeps as .NAME.incomplete, is found by
        the name it would have had."""
        if not directory.exists() and directory.name.endswith(".incomplete"):
            directory = directory.with_name(directory.name[1:-len(".incomplete")])
        p = directory / "bisect.json"
        if not p.is_file():
            raise FileNotFoundError(f"{directory}: no bisect.json to resume from")
        d = json.loads(p.read_text())
        steps = {s["candidate"]: Step.from_json(s, directory) for s in d.get("steps", [])}
        return cls(directory, steps, d["old"], d["new"], d["reproducer"])

    def teach(self, policy: StepPolicy) -> None:
        """The bad end's reproduction, as its run recorded it, joins the policy (StepPolicy.learn_from_bad_end)."""
        bad = next((s for s in self.steps.values() if s.state == REPRODUCES and s.runs), None)
        if bad and (Path(bad.runs[-1]) / "run.json").exists():
            policy.learn_from_bad_end(RunRecord.from_json(json.loads((Path(bad.runs[-1]) / "run.json").read_text())))
