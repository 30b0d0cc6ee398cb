# SPDX-License-Identifier: GPL-2.0
"""Recognises kernel console reports (panics, oopses, stalls) from the data in
harness/console-patterns.toml, a line at a time."""
from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from harness import paths

PATTERNS = paths.data_file("harness", "console-patterns.toml")
_TIMESTAMP = re.compile(r"^\[\s*(\d+\.\d+)\]\s?")


@dataclass(frozen=True)
class Pattern:
    kind: str
    name: str
    regex: re.Pattern
    reason: str = ""


@dataclass
class Report:
    kind: str
    name: str
    title: str
    guest_time: float | None  # printk timestamp
    line: str
    fields: dict = field(default_factory=dict)
    reason: str = ""
    excerpt: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return {"kind": self.kind, "name": self.name, "title": self.title, "guest_time": self.guest_time,
                "fields": self.fields, "reason": self.reason, "excerpt": self.excerpt}


def load_patterns(path: Path = PATTERNS) -> list[Pattern]:
    with open(path, "rb") as f:
        doc = tomllib.load(f)
    return [Pattern(p["kind"], p["name"], re.compile(p["regex"]), p.get("reason", "")) for p in doc["pattern"]]


def match_line(line: str, patterns: list[Pattern]) -> Report | None:
    m_ts = _TIMESTAMP.match(line)
    body = line[m_ts.end():] if m_ts else line
    for p in patterns:
        m = p.regex.search(body)
        if m:
            groups = {k: v for k, v in m.groupdict().items() if v is not None}
            title = groups.pop("title", None) or m.group(0)
            return Report(p.kind, p.name, title.strip(), float(m_ts.group(1)) if m_ts else None,
                          line, groups, p.reason)
    return None


def scan(text: str, patterns: list[Pattern] | None = None, excerpt_lines: int = 40) -> list[Report]:
    """Every report in a whole console log (for recorded consoles and tests)."""
    patterns = patterns or load_patterns()
    lines = text.splitlines()
    out = []
    for i, line in enumerate(lines):
        r = match_line(line, patterns)
        if r:
            r.excerpt = lines[i:i + excerpt_lines]
            out.append(r)
    return out
