# SPDX-License-Identifier: GPL-2.0
"""A kernel package's changelog: which upstream commits it carries, by subject.

Debian's kernel changelog (/usr/share/doc/linux-image-*/changelog.gz) lists,
under each package version, every upstream stable commit it took ("- perf:
Fix ...") and Debian's own backports. Newest version first; a long subject
wraps onto lines indented deeper than its "- ".

An rpm's %changelog (`rpm -qp --changelog`, kept as changelog.rpm) has
"* Mon Nov 10 2025 Name <mail> - 6.17.8-100" headers and "- subject (Author)"
items. Fedora's often lists only "Linux v6.17.8", not the stable commits:
a subject missing there says less than one missing from Debian's.
"""
from __future__ import annotations

import gzip
import marshal
import os
import re
import sys
from dataclasses import astuple, dataclass
from pathlib import Path

_HEADER = re.compile(r"^(?P<source>[a-z0-9][a-z0-9.+-]*) \((?P<version>[^)\s]+)\)")
_ITEM = re.compile(r"^(?P<indent>\s+)[-*] (?P<text>.*)$")
# what follows a subject in the changelog, not part of it: "(CVE-2025-37747)", "(Closes: #123)"
_TRAILER = re.compile(r"(\s+\((?:CVE-\d+-\d+(?:,\s*)?|Closes:[^)]*|bug #\d+)+\))+\s*$", re.I)
_ARCH = re.compile(r"^(\[[^\]]+\]\s*)+")  # "[amd64] x86: ..."
_REVERT = re.compile(r'^Revert "(?P<subject>.*)"$')
PARSED_FORMAT = 1  # of the parsed copy load() keeps beside a changelog
MAX_BYTES = 64 << 20  # a kernel changelog is ~1.3 MB compressed, ~10 MB unpacked


@dataclass(frozen=True)
class Line:  # load() keeps it as a tuple in this order: bump PARSED_FORMAT on a change
    version: str   # the package version whose entry lists it
    subject: str   # as upstream wrote it, without arch tags and CVE/bug trailers
    text: str      # the line as the changelog has it


def subject_key(subject: str) -> str:
    """Subjects compare without case and runs of whitespace."""
    return " ".join(subject.split()).lower()


def _clean(text: str) -> str:
    return _ARCH.sub("", _TRAILER.sub("", " ".join(text.split())))


def parse(text: str) -> list[Line]:
    """Every listed change, newest first."""
    out: list[Line] = []
    version, item, indent = "", "", -1

    def flush() -> None:
        if item and version:
            out.append(Line(version, _clean(item), " ".join(item.split())))

    for raw in text.splitlines():
        if h := _HEADER.match(raw):
            flush()
            version, item, indent = h["version"], "", -1
            continue
        m = _ITEM.match(raw)
        if m:
            flush()
            item, indent = m["text"], len(m["indent"].expandtabs())
            continue
        stripped = raw.strip()
        if item and stripped and len(raw) - len(raw.lstrip()) > indent and not stripped.startswith("--"):
            item += " " + stripped  # a wrapped subject
        else:
            flush()
            item, indent = "", -1
    flush()
    return out


_RPM_HEADER = re.compile(r"^\* \w{3} \w{3} +\d+ \d{4} .*?(?:>\s*(?:-\s*)?|\s-\s)\[?(?P<version>[^\s\]]+)\]?\s*$")
_RPM_AUTHOR = re.compile(r"\s+\([^():]+\)\s*$")  # Fedora's "(Peter Zijlstra)" after a subject


def parse_rpm(text: str) -> list[Line]:
    """Every change an rpm's %changelog lists, newest first."""
    out: list[Line] = []
    version = ""
    for raw in text.splitlines():
        if h := _RPM_HEADER.match(raw):
            version = h["version"]
        elif raw.startswith("- ") and version:
            item = raw[2:].strip()
            out.append(Line(version, _clean(_RPM_AUTHOR.sub("", item)), " ".join(item.split())))
    return out


def load(path: Path) -> list[Line]:
    """The changelog's lines, through a parsed copy beside it (marshal: data
    only), made again when the changelog changes: parsing a kernel's
    changelog (~40,000 lines) took 0.4 s of every verify's prediction."""
    index = path.with_name(f"{path.name}.py{sys.version_info[0]}{sys.version_info[1]}.marshal")
    try:
        st = path.stat()
        key = (st.st_size, st.st_mtime_ns, PARSED_FORMAT)
        stored, rows = marshal.loads(index.read_bytes())
        if tuple(stored) == key and all(isinstance(r, tuple) and len(r) == 3 for r in rows):
            return [Line(*r) for r in rows]
    except (OSError, ValueError, EOFError, TypeError):
        pass
    lines = _read(path)
    try:  # best effort: a read-only cache still works, only slower
        st = path.stat()
        data = marshal.dumps(((st.st_size, st.st_mtime_ns, PARSED_FORMAT),
                              [(l.version, l.subject, l.text) for l in lines]))
        tmp = index.with_name(f".{index.name}.{os.getpid()}")
        tmp.write_bytes(data)
        os.replace(tmp, index)
    except OSError:
        pass
    return lines


def _read(path: Path) -> list[Line]:
    if path.suffix == ".rpm":  # changelog.rpm: an rpm's %changelog, as text
        with open(path, "rb") as f:
            data = f.read(MAX_BYTES + 1)
    else:
        with gzip.open(path, "rb") as f:
            data = f.read(MAX_BYTES + 1)
    if len(data) > MAX_BYTES:
        raise ValueError(f"{path}: changelog larger than {MAX_BYTES >> 20} MB unpacked")
    text = data.decode("utf-8", errors="replace")
    return parse_rpm(text) if path.suffix == ".rpm" else parse(text)


@dataclass(frozen=True)
class Found:
    line: Line
    reverted: Line | None = None  # a newer entry that reverts it


def find(log: "Log", subject: str) -> Found | None:
    """The newest line that lists subject, and a newer revert of it if any."""
    if isinstance(log, Lookup):
        return log.find(subject)
    key = subject_key(subject)
    revert = None
    for line in log:  # newest first
        r = _REVERT.match(line.subject)
        if r and subject_key(r["subject"]) == key:
            revert = revert or line
        elif subject_key(line.subject) == key:
            return Found(line, revert)
    return None


class Lookup:
    """find() on a changelog through the answers it gave before, kept beside
    it (marshal: data only) until it changes: a verify asks one kernel's
    changelog the same two subjects every time, and loading its ~40,000
    lines to answer them was 0.18 s of CPU in every verdict."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.memo = path.with_name(f"{path.name}.found.py{sys.version_info[0]}{sys.version_info[1]}.marshal")
        st = path.stat()
        self.key = (st.st_size, st.st_mtime_ns, PARSED_FORMAT)
        self.lines: list[Line] | None = None
        self.answers: dict[str, tuple | None] = {}
        try:
            stored, answers = marshal.loads(self.memo.read_bytes())
            if tuple(stored) == self.key and isinstance(answers, dict):
                self.answers = answers
        except (OSError, ValueError, EOFError, TypeError):
            pass

    def find(self, subject: str) -> Found | None:
        key = subject_key(subject)
        if key in self.answers:
            try:
                return _found(self.answers[key])
            except (TypeError, ValueError):
                pass  # a damaged memo: asked again
        if self.lines is None:
            self.lines = load(self.path)
        found = find(self.lines, subject)
        self.answers[key] = None if found is None else (
            tuple(astuple(found.line)), tuple(astuple(found.reverted)) if found.reverted else None)
        try:  # best effort, like load()'s parsed copy
            tmp = self.memo.with_name(f".{self.memo.name}.{os.getpid()}")
            tmp.write_bytes(marshal.dumps((self.key, self.answers)))
            os.replace(tmp, self.memo)
        except OSError:
            pass
        return found


Log = list[Line] | Lookup  # what find() reads


def _found(answer: tuple | None) -> Found | None:
    if answer is None:
        return None
    line, reverted = answer
    return Found(Line(*line), Line(*reverted) if reverted else None)
