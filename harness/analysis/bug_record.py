# SPDX-License-Identifier: GPL-2.0
"""A verdict predicted from the kernel's own record, without a boot.

The record is the kernel CVE team's: for each stable branch, where the bug
came in (a mainline release, or a stable release the culprit was backported
to) and where it was fixed (a stable release, a mainline release, or 0: that
branch never got the fix), one "introduced:commit:fixed:commit" line each (a
`.dyad` file of the vulns repository). A reproducer's data file carries its
bug's lines under [record]; `explain --cve --vulns DIR` reads them from a
clone of that repository. The package's changelog, where it has one, then
says what the distro really shipped: a fix backported where the record has
none, or a culprit the record does not know of.
"""
from __future__ import annotations

import functools
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from harness.analysis.verdict import VerdictKind
from harness.base import paths
from images.kernels import changelog

AFFECTED, FIXED, NOT_INTRODUCED, UNKNOWN = "affected", "fixed", "not introduced", "unknown"
_CVE = re.compile(r"CVE-\d{4}-\d{4,}")
Version = tuple[int, ...]


class RecordError(ValueError):
    """A record kstall cannot read: a usage error naming it."""


def version(text: str) -> Version:
    return tuple(int(p) for p in text.split("."))


def vtext(v: Version) -> str:
    return ".".join(map(str, v))


def _stable(v: Version) -> bool:
    return len(v) >= 3


@dataclass(frozen=True)
class Branch:
    """One line of the record."""
    introduced: Version
    culprit: str          # the introducing commit (short)
    fixed: Version | None  # None: this branch has no fix
    fix: str = ""


@dataclass(frozen=True)
class BugRecord:
    cve: str
    fix_subject: str          # the fixing commit's subject, as changelogs list it
    culprit_subject: str = ""  # the introducing commit's, when known
    branches: tuple[Branch, ...] = ()
    files: tuple[str, ...] = ()  # the files the fix changes (the record's "Affected files")
    fixed_on: str = ""  # syzbot's: the day it closed the bug as fixed upstream (YYYY-MM-DD)

    @staticmethod
    def parse_lines(lines: list[str], where: str) -> tuple[Branch, ...]:
        out = []
        for raw in lines:
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            parts = line.split(":")
            try:
                if len(parts) != 4:
                    raise ValueError("not introduced:commit:fixed:commit")
                intro, culprit, fixed, fix = parts
                out.append(Branch(version(intro), culprit[:12], None if fixed == "0" else version(fixed),
                                  "" if fix == "0" else fix[:12]))
            except ValueError as e:
                raise RecordError(f"{where}: bad record line {line!r} ({e})") from None
        if not out:
            raise RecordError(f"{where}: no record lines")
        return tuple(out)

    @staticmethod
    def from_doc(doc: dict, where: str) -> "BugRecord":
        """[record] of a reproducer's data file."""
        try:
            return BugRecord(doc["cve"], doc["fix"], doc.get("culprit", ""),
                             BugRecord.parse_lines(list(doc["lines"]), where), tuple(doc.get("files", ())))
        except KeyError as e:
            raise RecordError(f"{where}: [record] lacks {e}") from None

    @staticmethod
    def from_syzbot(doc: dict, where: str) -> "BugRecord":
        """syzbot's record of a bug, as its dashboard serves it (?json=1;
        syzkaller's dashboard/api Bug: title, id, fix-commits, cause-commit):
        the fixing and the causing commit by subject, and the day it closed
        the bug as fixed upstream (its status, "fixed on DATE"). It gives no
        versions: a fix closed before the kernel's mainline base was
        released is in that base (mainline-releases.toml); else the
        package's changelog decides "fixed" by the fix's subject."""
        if not isinstance(doc, dict) or not isinstance(doc.get("fix-commits", []), list):
            raise RecordError(f"{where}: not syzbot's record of a bug (dashboard/api's Bug)")
        fixes = [c.get("title", "") for c in doc.get("fix-commits") or [] if isinstance(c, dict)]
        cause = doc.get("cause-commit") or {}
        closed = re.match(r"fixed on (\d{4})/(\d{2})/(\d{2})\b", str(doc.get("status", "")))
        return BugRecord(f"syzbot {str(doc.get('id', ''))[:40]}".strip(), next((f for f in fixes if f), ""),
                         cause.get("title", "") if isinstance(cause, dict) else "", (),
                         fixed_on="-".join(closed.groups()) if closed and fixes else "")

    @staticmethod
    def from_vulns(vulns: Path, cve: str) -> "BugRecord":
        """CVE's record in a clone of the kernel's vulns repository (or a
        directory of its CVE-*.dyad and CVE-*.mbox files)."""
        if not _CVE.fullmatch(cve):
            raise RecordError(f"{cve!r} is not a CVE id (CVE-YYYY-NNNN)")
        found = sorted(vulns.glob(f"**/{cve}.dyad")) if vulns.is_dir() else []
        if not found:
            raise RecordError(f"no {cve}.dyad under {vulns}: give --vulns a clone of the kernel's vulns repository")
        dyad = found[0]
        mbox = dyad.with_suffix(".mbox")
        subject, files = "", tuple[str, ...]()
        if mbox.exists():
            text = mbox.read_text(errors="replace")
            m = re.search(rf"^Subject: {cve}: (.+)$", text, re.M)
            subject = m.group(1).strip() if m else ""
            # "Affected files" then its ===== line, a sentence, and one tab-indented path per line
            section = re.search(r"^Affected files\n=+\n(.*?)(?=^\S[^\n]*\n=+\n|\Z)", text, re.M | re.S)
            files = tuple(re.findall(r"^\t(\S+)$", section.group(1), re.M)) if section else ()
        return BugRecord(cve, subject, "", BugRecord.parse_lines(dyad.read_text().splitlines(), str(dyad)), files)

    def architecture_reason(self, source_dir: str, arch_name: str) -> tuple[str, bool]:
        """What the fix's files say of a kernel whose architecture's code is
        under arch/source_dir/: a reason, and whether the bug's code cannot be
        in it (every file under other architectures' arch/). ("", False) when
        the record lists no files."""
        if not self.files:
            return "", False
        dirs = sorted({f.split("/")[1] for f in self.files if f.startswith("arch/") and f.count("/") > 1})
        if not dirs:
            return f"record: the fix is in generic code ({', '.join(self.files)}): it holds on {arch_name} too", False
        generic = [f for f in self.files if not f.startswith("arch/")]
        where = "arch/" + ", arch/".join(dirs)
        if source_dir in dirs:
            return f"record: the fix is architecture-specific ({where}), {arch_name}'s included", False
        if generic:
            return (f"record: the fix changes {where} besides generic code: "
                    f"only its generic part concerns {arch_name}"), False
        return f"record: the fix is in {where} only: {arch_name} kernels do not build it", True

    @property
    def mainline_fix(self) -> Version | None:
        fixes = [b.fixed for b in self.branches if b.fixed and not _stable(b.fixed)]
        return min(fixes) if fixes else None


@dataclass
class Prediction:
    status: str                                   # AFFECTED, FIXED, NOT_INTRODUCED or UNKNOWN
    reasons: list[str] = field(default_factory=list)
    cve: str = ""
    fix_version: str = ""  # where this kernel's branch got the fix, by the record ("" if never)

    def to_json(self) -> dict:
        return {"status": self.status, "cve": self.cve, "reasons": self.reasons, "fix_version": self.fix_version}

    def text(self) -> str:
        return f"{self.status} ({self.cve})" if self.cve else self.status


def _by_record(rec: BugRecord, upstream: Version) -> tuple[str, list[str], str]:
    branch = upstream[:2]
    on_branch = [b for b in rec.branches if _stable(b.introduced) and b.introduced[:2] == branch]
    mainline = [b for b in rec.branches if not _stable(b.introduced)]
    if on_branch:
        b = min(on_branch, key=lambda x: x.introduced)
        if upstream < b.introduced:
            return NOT_INTRODUCED, [f"record: the culprit reached {vtext(branch)}.y in {vtext(b.introduced)} "
                                    f"({b.culprit}), after {vtext(upstream)}"], ""
        why = [f"record: the culprit was backported to {vtext(branch)}.y in {vtext(b.introduced)} ({b.culprit})"]
    elif mainline and branch >= min(b.introduced for b in mainline)[:2]:
        b = min(mainline, key=lambda x: x.introduced)
        why = [f"record: introduced in {vtext(b.introduced)} ({b.culprit})"]
    elif mainline:
        b = min(mainline, key=lambda x: x.introduced)
        return NOT_INTRODUCED, [f"record: introduced in {vtext(b.introduced)} ({b.culprit}), "
                                f"and never backported to {vtext(branch)}.y"], ""
    elif not rec.branches:  # syzbot's: the commits, not the releases
        return _by_date(rec, upstream)
    else:
        return UNKNOWN, ["record: no line for a mainline introduction or this branch"], ""
    fixes = [b for b in rec.branches if b.fixed and _stable(b.fixed) and b.fixed[:2] == branch]
    if fixes:
        f = min(fixes, key=lambda x: x.fixed or ())
        assert f.fixed
        if upstream >= f.fixed:
            return FIXED, why + [f"record: fixed on {vtext(branch)}.y in {vtext(f.fixed)} ({f.fix})"], vtext(f.fixed)
        return AFFECTED, why + [f"record: fixed on {vtext(branch)}.y only in {vtext(f.fixed)} ({f.fix})"], \
            vtext(f.fixed)
    main = rec.mainline_fix
    if main and branch >= main[:2]:
        f = next(b for b in rec.branches if b.fixed == main)
        return FIXED, why + [f"record: fixed in mainline {vtext(main)} ({f.fix})"], vtext(main)
    return AFFECTED, why + [f"record: no fix on {vtext(branch)}.y"], ""


@functools.lru_cache(maxsize=None)
def mainline_releases() -> dict[Version, str]:
    """Each mainline release's date (mainline-releases.toml)."""
    with open(paths.data_file("harness", "analysis", "mainline-releases.toml"), "rb") as f:
        return {version(v): d for v, d in tomllib.load(f)["released"].items()}


@functools.lru_cache(maxsize=None)
def _fix_configs() -> dict[str, tuple[str, str]]:
    with open(paths.data_file("harness", "analysis", "fix-configs.toml"), "rb") as f:
        return {x["subject"]: (x["option"], x["effective"]) for x in tomllib.load(f).get("fix", ())}


def config_gate(fix_subject: str) -> tuple[str, str] | None:
    """(option, value) a fix needs in the kernel's config to take effect
    (fix-configs.toml), None for a fix that always does."""
    return _fix_configs().get(fix_subject)


def _by_date(rec: BugRecord, upstream: Version) -> tuple[str, list[str], str]:
    """syzbot's record names commits, not releases; the day it closed the
    bug as fixed upstream puts the fix in every mainline release after it."""
    if not rec.fixed_on:
        return UNKNOWN, ["record: it names the commits, not the releases they are in"], ""
    dates = mainline_releases()
    base = upstream[:2]
    released = dates.get(base) or (max(dates.values()) if base > max(dates) else None)
    if released is None:
        return UNKNOWN, [f"record: fixed upstream on {rec.fixed_on}; when {vtext(base)} was released is "
                         "unknown to kstall"], ""
    if rec.fixed_on < released:
        on = "on" if base in dates else "after"
        return FIXED, [f"record: syzbot closed it as fixed upstream on {rec.fixed_on}, before {vtext(base)} "
                       f"was released ({on} {released}): the fix \"{rec.fix_subject}\" is in this kernel's "
                       "mainline base"], vtext(base)
    return UNKNOWN, [f"record: fixed upstream on {rec.fixed_on}, after {vtext(base)} was released ({released}): "
                     "only a backport brings it"], ""


def predict(rec: BugRecord | None, upstream: str | None, log: changelog.Log | None,
            no_log: str = "none") -> Prediction:
    """The verdict the record (and the changelog, when there is one) predicts
    for a kernel of that upstream version; no_log: why there is no changelog."""
    if rec is None:
        return Prediction(UNKNOWN, ["no record of a kernel bug for this reproducer"])
    if not upstream or not re.fullmatch(r"\d+\.\d+(\.\d+)?", upstream):
        return Prediction(UNKNOWN, [f"the kernel's upstream version is unknown ({upstream or 'none'})"], rec.cve)
    v = version(upstream)
    v = v + (0,) * (3 - len(v))
    status, reasons, fix_version = _by_record(rec, v)
    if log is None:
        reasons.append(f"changelog: {no_log} (the record alone decides)")
        return Prediction(status, reasons, rec.cve, fix_version)
    fix = changelog.find(log, rec.fix_subject) if rec.fix_subject else None
    culprit = changelog.find(log, rec.culprit_subject) if rec.culprit_subject else None
    if culprit and not culprit.reverted:
        reasons.append(f"changelog: lists the culprit \"{culprit.line.text}\" (in {culprit.line.version})")
    if fix and fix.reverted:
        reasons.append(f"changelog: the fix \"{rec.fix_subject}\" (in {fix.line.version}) was reverted "
                       f"(\"{fix.reverted.text}\", in {fix.reverted.version})")
        fix = None
    if fix:
        reasons.append(f"changelog: lists the fix \"{fix.line.text}\" (in {fix.line.version})")
        if status != FIXED:
            reasons.append("the package carries the fix the record does not know of on this branch: fixed")
        return Prediction(FIXED, reasons, rec.cve, fix_version)
    if rec.fix_subject:
        reasons.append(f"changelog: does not list the fix \"{rec.fix_subject}\"")
    if status == NOT_INTRODUCED and culprit and not culprit.reverted:
        reasons.append("the package carries the culprit the record does not know of on this branch: affected")
        return Prediction(AFFECTED, reasons, rec.cve, fix_version)
    return Prediction(status, reasons, rec.cve, fix_version)


def line_of(upstream: str) -> str:
    """The stable line a version belongs to: "6.12" for 6.12.94."""
    return ".".join(upstream.split(".")[:2])


@dataclass
class ExpectedChange:
    """Where the record alone puts the change over a range of versions."""
    statuses: list[tuple[str, str]]   # (version, status) in order
    last_old: str = ""                # the last version in the old end's state, "" if none changes
    first_new: str = ""
    reasons: list[str] = field(default_factory=list)  # the record lines for first_new
    old_reasons: list[str] = field(default_factory=list)  # and for last_old

    @property
    def crosses_line(self) -> bool:
        return bool(self.first_new) and line_of(self.last_old) != line_of(self.first_new)

    def text(self) -> str:
        if not self.first_new:
            old, new = self.statuses[0], self.statuses[-1]
            return (f"the record predicts no change from {old[0]} ({old[1]}) to {new[0]} ({new[1]})")
        what = "first affected" if self.statuses[-1][1] == AFFECTED else "first fixed"
        if not self.crosses_line:
            return f"the record predicts {what}: {self.first_new} ({'; '.join(self.reasons)})"
        return (f"the record predicts {what}: {self.first_new}, where the range crosses from the "
                f"{line_of(self.last_old)} line to the {line_of(self.first_new)} line ({self.last_old}: "
                f"{'; '.join(self.old_reasons)}. {self.first_new}: {'; '.join(self.reasons)})")

    def to_json(self) -> dict:
        return {"last_old": self.last_old, "first_new": self.first_new, "crosses_line": self.crosses_line,
                "reasons": self.reasons, "old_reasons": self.old_reasons, "statuses": dict(self.statuses),
                "text": self.text()}


def expected_change(rec: BugRecord, versions: list[str]) -> ExpectedChange:
    """The record's status for each of versions (upstream, oldest first)
    and the first one whose state (affected or not) differs from the
    first's: what a version bisection over them should find, before any
    distro backport."""
    statuses, reasons = [], {}
    for v in versions:
        p = predict(rec, v, None)
        statuses.append((v, p.status))
        reasons[v] = [r for r in p.reasons if r.startswith("record:")]
    first_bad = statuses[0][1] == AFFECTED
    for (prev, _), (v, status) in zip(statuses, statuses[1:]):
        if (status == AFFECTED) != first_bad and status != UNKNOWN:
            return ExpectedChange(statuses, prev, v, reasons[v], reasons[prev])
    return ExpectedChange(statuses)


def of(doc: dict, name: str, syzbot: dict | None = None) -> BugRecord | None:
    """A reproducer's record ([record] of its data file, or syzbot's record
    of a syzkaller reproducer's bug), None without one."""
    if doc:
        return BugRecord.from_doc(doc, f"reproducer {name}: [record]")
    return BugRecord.from_syzbot(syzbot, f"reproducer {name}: syzbot's record") if syzbot else None


# the measured verdict each prediction expects (an unknown one expects nothing)
EXPECTED_VERDICT = {AFFECTED: VerdictKind.VULNERABLE, FIXED: VerdictKind.NOT_REPRODUCED,
                    NOT_INTRODUCED: VerdictKind.NOT_REPRODUCED}


def agreement(status: str, verdict: str) -> str:
    """'agrees', 'disagrees', or '' when one side says nothing (an unknown
    prediction, or an ERROR or INCONCLUSIVE run)."""
    if status not in EXPECTED_VERDICT or verdict not in (VerdictKind.VULNERABLE, VerdictKind.NOT_REPRODUCED):
        return ""
    return "agrees" if EXPECTED_VERDICT[status] == verdict else "disagrees"
