# SPDX-License-Identifier: GPL-2.0
"""Recognises kernel console reports (panics, oopses, stalls, hangs) from the
data in harness/analysis/console-patterns.toml, a line at a time, and names each the
way syzbot does: the kind of report plus the function it points at
("INFO: task hung in pipe_write"), read from the report's RIP or call trace.

Console text is untrusted and messy: lines of several CPUs interleave, the
UART garbles timestamps, unreliable `?` frames and old `[<ffff…>]` frames
appear. The function comes from the first frame-shaped line that is neither
unreliable nor in the data file's skip list (schedulers, lock primitives,
interrupt entry, the reporters themselves); other lines are passed over.
"""
from __future__ import annotations

import functools
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from harness.analysis import report_title
from harness.analysis.classify import base_name
from harness.base import arch, paths

PATTERNS = paths.data_file("harness", "analysis", "console-patterns.toml")
_TIMESTAMP = re.compile(r"^\[\s*(\d+\.\d+)\]\s?")
_CALLER = re.compile(r"^\[\s*[TC]\d+\]\s?")  # CONFIG_PRINTK_CALLER's [T123] / [C1]
_WHERE_IN = r"\+0x[0-9a-f]+/0x[0-9a-f]+"  # %pS's offset/size after a symbol
_FUNC = r"(?P<func>[A-Za-z_][\w.]*)" + _WHERE_IN
_FRAME = re.compile(r"^\s*(?:\[<[0-9a-f]+>\]\s*)*(?P<unreliable>\?\s*)?" + _FUNC + r"(?:\s+\[[\w-]+\])?\s*$")
_OFFSET = re.compile(r"(?<=[\w.])" + _WHERE_IN)
# where a CPU was, and where a stack trace starts, as each architecture's console says it (arches.toml console)
_KERNEL_PC = re.compile(r"^\s*(?:" + "|".join(re.escape(arch.get(n).table["console"]["pc"]) for n in arch.names())
                        + r")(?:\[<[0-9a-f]+>\]\s*)*" + _FUNC)
_TRACE_START = frozenset(arch.get(n).table["console"]["trace"] for n in arch.names())
# how far into a report its function is looked for (an RCU stall with its
# registers and two stacks runs to ~180)
TRACE_LINES = 240


@dataclass(frozen=True)
class Pattern:
    kind: str
    name: str
    regex: re.Pattern
    reason: str = ""
    title: str = ""      # syzbot-style template: "{func}" is the function, "{group}" a named group
    func_from: str = ""  # "rip": first kernel RIP on; "trace": first Call Trace on
    stack: report_title.StackSpec | None = None  # syzbot's way to the function (report_title.py)
    report: tuple[re.Pattern, ...] = ()  # lines found in turn, the last one's (?P<func>) names the report
    fields_from: tuple[re.Pattern, ...] = ()  # later lines whose named groups the title uses too
    fallback: str = ""   # the title when those lines are not there
    race: str = ""       # an infra pattern that is a race of multi-threaded TCG's: the kernel's elsewhere


@dataclass(frozen=True)
class Patterns:
    patterns: list[Pattern]
    skip: re.Pattern  # frames that never name a report
    rules: report_title.Rules | None = None
    not_new: frozenset[str] = frozenset()  # report names whose first line does not end the report before
    # register states no CPU can be in ([[impossible]]): (regex, why) - an oops
    # that shows one is the emulator's fault, not the kernel's
    impossible: tuple[tuple[re.Pattern, str], ...] = ()
    die_header: re.Pattern | None = None  # [titles] die_header: the line die() prints
    die_header_within: int = 0
    trace_end: re.Pattern | None = None  # [frames] trace_end: where one CPU's trace ends

    def die_header_of(self, new: "Report", prev: "Report", lines_since: int) -> bool:
        """Whether new's line is the die() header of the oops prev began a
        few lines before: the same oops's second part, not a report of its own."""
        if self.die_header is None or not new.kind == prev.kind == "oops" or lines_since > self.die_header_within:
            return False
        return bool(self.die_header.search(strip_prefix(new.line)[0]))

    def impossible_state(self, report: "Report") -> str:
        """Why report's own lines show a CPU state no CPU can be in, or ""."""
        for line in report.excerpt:
            for regex, why in self.impossible:
                if m := regex.search(line):
                    return f"{why} ({m.group(0)})"
        return ""

    def __iter__(self):
        return iter(self.patterns)


@dataclass
class Report:
    kind: str
    name: str
    message: str              # what the kernel said
    guest_time: float | None  # printk timestamp
    line: str
    fields: dict = field(default_factory=dict)
    reason: str = ""
    excerpt: list[str] = field(default_factory=list)
    pattern: Pattern | None = None
    skip: re.Pattern | None = None
    patterns: Patterns | None = None
    end: int | None = None  # where in the excerpt the next report starts
    _func: tuple | None = None  # (excerpt length, end, function): computed once per state
    _own: tuple | None = None   # (excerpt length, end, own_lines()): the same
    _titled: tuple | None = None  # (excerpt length, end, title): the same (a watch asks it often)
    # a detector's report as a candidate hang (candidates.py): what is stuck, how long, and its state
    stuck: dict | None = None
    before_program: bool = False  # came before the program started: the boot's, never the program's

    def ends_at(self, report: "Report", index: int) -> None:
        """report starts at this excerpt's line index: this one's lines end
        there, unless printk caller ids tell this report's lines apart."""
        if self.end is None and report.kind in TITLED_KINDS and self.patterns and \
                report.name not in self.patterns.not_new and caller_id(self.line) is None:
            self.end = index

    def own(self) -> list[str]:
        """own_lines() of this report as it stands, read once per state."""
        assert self.patterns
        if not self._own or self._own[:2] != (len(self.excerpt), self.end):
            self._own = (len(self.excerpt), self.end, own_lines(self.excerpt, self.patterns, self.end))
        return self._own[2]

    @property
    def func(self) -> str | None:
        """The function the report points at (None until its lines are in)."""
        p = self.pattern
        if p and self.patterns and self.patterns.rules and (p.stack or p.report):
            if self._func and self._func[:2] == (len(self.excerpt), self.end):
                return self._func[2]
            lines = self.own()
            if p.report:  # None when its lines are not there: titled by its first line, as syzbot does
                func = report_title.found_in_turn(lines, p.report, "func")
            else:
                assert p.stack
                func = report_title.function(lines, p.stack, self.patterns.rules)
            func = report_title.plain_name(func) if func else func
            self._func = (len(self.excerpt), self.end, func)
            return func
        if not p or not p.func_from:
            return None
        return report_function(self.excerpt, p.func_from, self.skip)

    @property
    def title(self) -> str:
        """syzbot-style: "BUG: soft lockup in smp_call_function_many_cond"; the
        kernel's message for reports without a template. A title names
        functions, not where in them (KCSAN prints "race in f+0x6df/0x760"):
        the same bug in another build gets the same title, and another run
        of it too (no addresses, pids or CPU numbers: [titles] volatile)."""
        if self._titled and self._titled[:2] == (len(self.excerpt), self.end):
            return self._titled[2]
        title = _OFFSET.sub("", self._title())
        rules = self.patterns.rules if self.patterns else None
        title = rules.steady(title) if rules else title
        self._titled = (len(self.excerpt), self.end, title)
        return title

    def _title(self) -> str:
        template = self.pattern.title if self.pattern else ""
        if not template:
            return self.message
        func = self.func
        if func is None and self.pattern and self.pattern.report and (m := self.pattern.regex.search(
                strip_prefix(self.line)[0])):
            return m.group(0).strip()
        if func is None and "{func}" in template:
            template = template.replace(" in {func}", "").replace("{func}", "?")
        fields = dict(self.fields)
        if self.pattern and self.pattern.fields_from and self.patterns:
            lines = self.own()
            for r in self.pattern.fields_from:
                m = next((m for line in lines if (m := r.search(line))), None)
                fields.update({k: v for k, v in (m.groupdict() if m else {}).items() if v is not None})
        for t in (template, self.pattern.fallback if self.pattern else ""):
            try:
                return t.format_map({**fields, "title": self.message, "func": func}) if t else self.message
            except (KeyError, IndexError, ValueError):
                continue
        return self.message

    def to_json(self) -> dict:
        return {"kind": self.kind, "name": self.name, "title": self.title, "message": self.message,
                "function": self.func, "guest_time": self.guest_time, "fields": self.fields,
                "reason": self.reason, "excerpt": self.excerpt} | (
            {"stuck": dict(self.stuck)} if self.stuck is not None else {}) | (
            {"before_program": True} if self.before_program else {})


def load_patterns(path: Path = PATTERNS) -> Patterns:
    with open(path, "rb") as f:
        doc = tomllib.load(f)
    rules = report_title.Rules.from_doc(doc["titles"]) if "titles" in doc else None
    pats = [Pattern(p["kind"], p["name"], re.compile(p["regex"]), p.get("reason", ""), p.get("title", ""),
                    p.get("func_from", ""), report_title.StackSpec.from_pattern(p, rules) if rules else None,
                    tuple(map(report_title.compile_step, p.get("report", ()))),
                    tuple(map(report_title.compile_step, p.get("fields_from", ()))), p.get("fallback", ""),
                    p.get("race", ""))
            for p in doc["pattern"]]
    skip = re.compile("|".join(f"(?:{r})" for r in doc["frames"]["skip"]))
    impossible = tuple((re.compile(i["regex"]), i["reason"]) for i in doc.get("impossible", ()))
    titles = doc.get("titles", {})
    die = re.compile(titles["die_header"]) if "die_header" in titles else None
    ends = doc["frames"].get("trace_end")
    return Patterns(pats, skip, rules, frozenset(titles.get("not_a_new_report", ())), impossible, die,
                    titles.get("die_header_within", 0),
                    re.compile("|".join(f"(?:{r})" for r in ends)) if ends else None)


@functools.cache
def default_patterns() -> Patterns:
    """kstall's own patterns, compiled once per process (a matrix's cells share them)."""
    return load_patterns()


def races(name: str) -> bool:
    """Whether kstall's pattern of that name is a race of multi-threaded
    TCG's, the emulator's only where the race can be (retry.py)."""
    return any(p.name == name and p.race for p in default_patterns().patterns)


def own_lines(excerpt: list[str], patterns: Patterns, end: int | None = None) -> list[str]:
    """A report's lines as syzbot reads them: without printk prefixes, only
    its own caller's (with printk caller ids), without unreliable `?`
    frames, and up to the next report's first line (end)."""
    caller = caller_id(excerpt[0]) if excerpt else None
    rules = patterns.rules
    out = []
    for i, line in enumerate(excerpt[:end]):
        if caller and caller_id(line) not in (caller, None):
            continue
        body, ts = strip_prefix(line)
        if i and rules and ts is not None and rules.questionable.search(body) and "<EOI>" not in body:
            continue
        out.append(body)
    return out


def strip_prefix(line: str) -> tuple[str, float | None]:
    """The line without its printk timestamp and caller id, and the timestamp."""
    m = _TIMESTAMP.match(line)
    body = line[m.end():] if m else line
    c = _CALLER.match(body)
    return (body[c.end():] if c else body), (float(m.group(1)) if m else None)


def caller_id(line: str) -> str | None:
    """CONFIG_PRINTK_CALLER's "T123"/"C1": which task or CPU printed the line."""
    m = _TIMESTAMP.match(line)
    c = _CALLER.match(line[m.end():] if m else line)
    return c.group(0).strip(" []") if c else None


def frame_function(line: str) -> tuple[str, bool] | None:
    """(function, reliable) of a call-trace or kernel-RIP line, else None."""
    body, _ = strip_prefix(line)
    m = _KERNEL_PC.match(body) or _FRAME.match(body)
    if not m:
        return None
    return base_name(m.group("func")), not m.groupdict().get("unreliable")


def report_frames(lines: list[str], func_from: str, ends: re.Pattern | None = None) -> list[str]:
    """The reliable frames of a report's own trace, from its first kernel
    RIP ("rip") or "Call Trace:" ("trace") to its end (ends, else [frames]
    trace_end: </TASK>, or the next CPU's report or dump): lines that are
    not frames (register dumps, interleaved output) and "? " frames (stale
    words a stack scan found) are passed over. With printk caller ids, only
    the lines of the report's own caller count."""
    ends = ends or default_patterns().trace_end
    lines = lines[:TRACE_LINES]
    caller = caller_id(lines[0]) if lines else None
    if caller:
        lines = [l for l in lines if caller_id(l) in (caller, None)]
    start = None
    for i, line in enumerate(lines[1:], 1):
        body, _ = strip_prefix(line)
        if (func_from == "rip" and _KERNEL_PC.match(body)) or \
                (func_from == "trace" and body.strip() in _TRACE_START):
            start = i
            break
    if start is None and func_from == "rip":  # a report without registers: its trace
        return report_frames(lines, "trace", ends)
    out: list[str] = []
    traces = int(func_from == "trace")  # trace headers passed: a second one is another CPU's
    for i, line in enumerate(lines[start:] if start is not None else []):
        body = strip_prefix(line)[0].strip()
        if i and body in _TRACE_START:
            traces += 1
            if traces > 1 and out:
                break
            continue
        f = frame_function(line)
        if f is None and i and ends is not None and ends.search(body) and (out or body == "</TASK>"):
            break
        if f and f[1]:
            out.append(f[0])
    return out


def report_function(lines: list[str], func_from: str, skip: re.Pattern | None) -> str | None:
    """The first of report_frames that skip does not pass over."""
    return next((f for f in report_frames(lines, func_from) if not (skip and skip.fullmatch(f))), None)


TITLED_KINDS = ("panic", "oops", "stall", "warning")  # the kernel's reports, not kstall's or QEMU's


def titles(reports: list[dict]) -> list[dict]:
    """The distinct titles of a run's kernel reports (run.json's
    console_reports), first seen first, with how often each came."""
    out: dict[str, dict] = {}
    for r in reports:
        if r.get("kind") in TITLED_KINDS and r.get("title"):
            out.setdefault(r["title"], {"title": r["title"], "kind": r["kind"], "count": 0})["count"] += 1
    return list(out.values())


PRINTK_LINE_MAX = 1024  # the kernel's record of a line holds no more (PRINTKRB_RECORD_MAX)


def match_line(line: str, patterns: Patterns) -> Report | None:
    body, ts = strip_prefix(line)
    body = body[:PRINTK_LINE_MAX]  # past it the line is not the kernel's; 70 searches of 4 KiB cost 1 ms
    for p in patterns:
        m = p.regex.search(body)
        if m:
            groups = {k: v for k, v in m.groupdict().items() if v is not None}
            message = groups.pop("title", None) or m.group(0)
            return Report(p.kind, p.name, message.strip(), ts, line, groups, p.reason, [line], p, patterns.skip,
                          patterns)
    return None


def scan(text: str, patterns: Patterns | None = None, excerpt_lines: int = TRACE_LINES) -> list[Report]:
    """Every report in a whole console log (for recorded consoles and tests)."""
    patterns = patterns or default_patterns()
    lines = text.splitlines()
    out = []
    starts: list[int] = []
    for i, line in enumerate(lines):
        r = match_line(line, patterns)
        if r and not (out and patterns.die_header_of(r, out[-1], i - starts[-1])):
            r.excerpt = lines[i:i + excerpt_lines]
            for prev, at in zip(out[::-1], starts[::-1]):
                if i - at >= excerpt_lines:
                    break
                prev.ends_at(r, i - at)
            out.append(r)
            starts.append(i)
    return out


class Tracker:
    """A live console, a line at a time: the reports it holds (each taking
    its following lines until it has enough to be named), the first report
    that ends a run (a panic, an oops, an emulator fault, a boot or agent
    failure) and when it came, and the last lines for a boot failure's
    reason. Every report, kept or not, is handed to on_report (a detector's
    report is a candidate hang there: candidates.py); one it returns True
    for is kept even past MAX_REPORTS."""
    MAX_REPORTS = 100  # kept per run; the rest are only counted
    ENDS_RUN = ("panic", "oops", "infra", "boot", "agent")
    SAID = ("stall", "infra", "panic", "oops")  # said as they come

    def __init__(self, patterns: Patterns, say=None, on_report=None) -> None:
        self.patterns = patterns
        self.say = say
        self.on_report = on_report  # (report, now) -> keep it
        self.reports: list[Report] = []
        self.dropped = 0  # past MAX_REPORTS: a guest that repeats itself
        self.open: list[Report] = []  # still taking their lines
        self.pending: Report | None = None
        self.pending_since = 0.0
        self.tail: list[str] = []

    def feed(self, line: str, now: float) -> None:
        self.tail = (self.tail + [line])[-200:]
        # a report's lines (its RIP and trace name it) follow its first one
        self.open = [r for r in self.open if len(r.excerpt) < TRACE_LINES]
        for r in self.open:
            r.excerpt.append(line)
        r = match_line(line, self.patterns)
        if r is None or (self.open and self.patterns.die_header_of(r, self.open[-1], len(self.open[-1].excerpt) - 1)):
            return
        for o in self.open:
            o.ends_at(r, len(o.excerpt) - 1)
        keep = bool(self.on_report(r, now)) if self.on_report else False
        if len(self.reports) >= self.MAX_REPORTS and not keep:
            self.dropped += 1
            return
        self.reports.append(r)
        self.open.append(r)
        if r.kind in self.ENDS_RUN and self.pending is None:
            self.pending, self.pending_since = r, now
        if r.kind in self.SAID and self.say:
            self.say(f"console: {r.message}")
