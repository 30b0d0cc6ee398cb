# SPDX-License-Identifier: GPL-2.0
"""The function a kernel report is named after, chosen the way syzbot
chooses it, from rules that are data (console-patterns.toml: a pattern's
`stack`, `stack2`, `skip` and `extractor`; the [titles] table's shared lists).

A pattern's `stack` is a list of steps matched down the report in order: a
regular expression (with {FUNC} for a captured function name, {PC} for a
bracketed address) advances to the first line it matches and takes its
function as a frame; "trace" takes the frames of the stack trace that
follows, up to the next stack header. Frames whose name contains a skip
word are not taken, nor are unreliable `?` frames. The extractor then picks
one frame: the first ("first"), the caller of the first dispatch frame for
loops that a stall report catches anywhere ("stall"), or the first frame
past the waits of a hung task, with its common buckets ("hung"). When no
frame is left the function is "corrupted", as syzbot says of a garbled report.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

PC = r"\[<?(?:0x)?[0-9a-f]+>?\]"
FUNC = r"([a-zA-Z0-9_]+)(?:\.|\+)"
CORRUPTED = "corrupted"


def compile_step(text: str) -> re.Pattern:
    return re.compile(text.replace("{PC}", PC).replace("{FUNC}", FUNC))


@dataclass(frozen=True)
class Rules:
    """The shared lists: what starts a stack trace, the frame line, the
    frames never named, the dispatch frames of stalls and the buckets and
    waits of hung tasks."""
    stack_start: re.Pattern
    frame: re.Pattern
    rip: re.Pattern
    skip: tuple[str, ...]
    strip_prefixes: tuple[str, ...]
    stall_anchors: re.Pattern
    stall_strip: tuple[str, ...]
    stall_buckets: dict[str, str]
    hung_buckets: dict[str, str]
    hung_skip: tuple[str, ...]
    hung_switch: tuple[str, ...]  # the context switch a sleeping task's own stack starts at
    questionable: re.Pattern
    corrupting: re.Pattern  # a line that means another report's lines are mixed in
    volatile: tuple[tuple[re.Pattern, str], ...] = ()  # what differs between runs, and its stand-in
    title_max: int = 120  # how much of a title is read (console-patterns.toml)

    def steady(self, title: str) -> str:
        """The title without what differs between runs of one bug, each
        replacement applied until nothing changes, then sanitized: at most
        title_max characters read, control characters dropped, one space
        for many (syzkaller's dynamicTitleReplacement and sanitizeTitle)."""
        for r, stand_in in self.volatile:
            for _ in range(len(title) + 1):  # each pass replaces one more of overlapping matches
                new = r.sub(stand_in, title)
                if new == title:
                    break
                title = new
        title = "".join(" " if c == "\t" else c for c in title[:self.title_max] if c == "\t" or " " <= c < "\x7f")
        return re.sub(" {2,}", " ", title).strip()

    @staticmethod
    def from_doc(doc: dict) -> "Rules":
        return Rules(re.compile("|".join(doc["stack_start"])), compile_step(doc["frame"]),
                     compile_step(doc["rip"]), tuple(doc["skip"]), tuple(doc["strip_prefixes"]),
                     re.compile("|".join(doc["stall_anchors"])), tuple(doc["stall_strip"]), dict(doc["stall_buckets"]),
                     dict(doc["hung_buckets"]),
                     tuple(doc["hung_skip"]), tuple(doc["hung_switch"]), re.compile(doc["questionable"]),
                     compile_step("|".join(doc["corrupting"])),
                     tuple((re.compile(r), stand_in) for r, stand_in in doc.get("volatile", ())),
                     int(doc.get("title_max", 120)))


@dataclass(frozen=True)
class StackSpec:
    steps: tuple[str | re.Pattern, ...]
    steps2: tuple[str | re.Pattern, ...] = ()
    skip: tuple[str, ...] = ()
    extractor: str = "first"

    @staticmethod
    def from_pattern(doc: dict, rules: Rules) -> "StackSpec | None":
        if "stack" not in doc:
            return None

        def steps(items: list[str]) -> tuple[str | re.Pattern, ...]:
            return tuple("trace" if s == "trace" else rules.rip if s == "rip" else compile_step(s) for s in items)
        return StackSpec(steps(doc["stack"]), steps(doc.get("stack2", [])), tuple(doc.get("skip", ())),
                         doc.get("extractor", "first"))


@dataclass
class _Walk:
    skip: re.Pattern | None
    rules: Rules
    frames: list[str] = field(default_factory=list)
    caller: tuple[str, bool] | None = None  # arm's caller on the last frame line, and whether at +0x0

    def take(self, m: re.Match | None) -> None:
        if m:
            self.take_name(next((g for g in m.groups() if g), None))

    def take_frame(self, m: re.Match | None) -> None:
        """A stack trace's line: a frame, or arm's callee and its caller. The
        caller is the next line's callee, so it is taken only where no line
        follows (the trace's end), or where the next line names another
        function and the caller's offset is not 0: a return address at a
        function's first byte is past a call that never returned (panic)."""
        if not m:
            return
        func, callee, caller, offset = m.groups()
        name = func or callee
        if self.caller and self.caller[0] != name and not self.caller[1]:
            self.take_name(self.caller[0])
        self.caller = (caller, int(offset, 16) == 0) if caller else None
        self.take_name(name)

    def end_trace(self) -> None:
        if self.caller:
            self.take_name(self.caller[0])
        self.caller = None

    def take_name(self, name: str | None) -> None:
        if name is None or (self.skip and self.skip.search(name)):
            return
        for p in self.rules.strip_prefixes:
            name = name.removeprefix(p)
        self.frames.append(name)


def _walk(lines: list[str], steps: tuple[str | re.Pattern, ...], rules: Rules, skip: re.Pattern | None) \
        -> list[str]:
    """The frames the steps take. A line of another report mixed in (a
    fault-injection stack) is never a frame: it ends the step it meets."""
    w = _Walk(skip, rules)
    i, n = 0, len(lines)
    k = 0
    while k < len(steps):
        step = steps[k]
        if step == "trace":
            nxt = steps[k + 1] if k + 1 < len(steps) else None
            while i < n:
                line = lines[i]
                i += 1
                if rules.stack_start.search(line) or rules.corrupting.search(line):
                    break
                if isinstance(nxt, re.Pattern) and (m := nxt.search(line)):
                    w.end_trace()
                    w.take(m)
                    k += 1
                    break
                w.take_frame(rules.frame.search(line))
            w.end_trace()
            k += 1
            continue
        assert isinstance(step, re.Pattern)
        while i < n and not rules.corrupting.search(lines[i]) and not (m := step.search(lines[i])):
            i += 1
        if i >= n:
            return w.frames
        if not rules.corrupting.search(lines[i]):
            w.take(m)
        i += 1
        k += 1
    return w.frames


def _bucket(frame: str, buckets: dict[str, str]) -> str:
    return next((b or frame for anchor, b in buckets.items() if frame.startswith(anchor)), "")


def found_in_turn(lines: list[str], steps: tuple[re.Pattern, ...], group: str) -> str | None:
    """The named group of the last step, each step matched on a line after
    the previous one's (one pass: consoles are untrusted and can be long)."""
    k, m = 0, None
    for line in lines:
        if k == len(steps):
            break
        if m := steps[k].search(line):
            k += 1
    return m.group(group) if k == len(steps) and m and m.groupdict().get(group) else None


def _stall(frames: list[str], rules: Rules) -> str:
    if bucket := _bucket(frames[0], rules.stall_buckets):  # the code the stall caught running
        return bucket
    prev = frames[0]
    for f in frames:
        if rules.stall_anchors.search(f):
            for p in rules.stall_strip:
                prev = prev.removeprefix(p)
            return prev
        prev = f
    return ""


def _hung(frames: list[str], rules: Rules) -> str:
    switch = next((i for i, f in enumerate(frames) if f in rules.hung_switch), 0)
    frames = frames[switch:]  # what a stack shows before the switch is a stale slot
    for f in frames:
        if bucket := _bucket(f, rules.hung_buckets):
            return bucket
    return next((f for f in frames if not any(s in f for s in rules.hung_skip)), "")


def _skip(spec: StackSpec, rules: Rules) -> re.Pattern | None:
    words = rules.skip + spec.skip
    return re.compile("|".join(words)) if words else None


def _extract(frames: list[str], spec: StackSpec, rules: Rules) -> str:
    return frames[0] if spec.extractor == "first" else \
        _stall(frames, rules) if spec.extractor == "stall" else _hung(frames, rules)


def function(lines: list[str], spec: StackSpec, rules: Rules) -> str:
    """The function a report's (prefix-stripped, questionable-free) lines
    point at, or "corrupted"."""
    skip = _skip(spec, rules)
    for steps in (spec.steps, spec.steps2):
        if not steps:
            continue
        frames = _walk(lines, steps, rules, skip)
        if frames and (picked := _extract(frames, spec, rules)):
            return picked
    return CORRUPTED


def function_of_stack(frames: list[str], spec: StackSpec, rules: Rules) -> str:
    """The function a report of this kind would be named after, from a stack
    as function names, innermost first (a task's /proc/PID/stack); "" when
    every frame is skipped."""
    w = _Walk(_skip(spec, rules), rules)
    for f in frames:
        w.take_name(f or None)
    return _extract(w.frames, spec, rules) if w.frames else ""


_ITANIUM = re.compile(r"_Z(\d+)")


def plain_name(name: str) -> str:
    """A C++ function's plain name from its Itanium-mangled symbol ("_Z",
    the name's length, the name, its parameter types: _Z8fakeNameiii is
    fakeName), as a title names it; any other name as it is."""
    m = _ITANIUM.match(name)
    if m and len(name) >= m.end() + int(m[1]):
        return name[m.end():m.end() + int(m[1])]
    return name
