# SPDX-License-Identifier: GPL-2.0
"""Did a program's calls reach the kernel, and what did it ask for that the
kernel lacks? The account a guest environment's agent gives after the
program (repro/agent/account.c, report_env), as evidence for a run that hung nothing:

- the kernel's own count of the program's system calls as they returned
  (tracefs hist triggers on raw_syscalls:sys_exit, restricted to the
  program's processes): each call, and the failed ones by error;
- each request_module() it caused, and how busybox's modprobe ended it;
- whether each device path its source names is there at the end.

From that: the program's own calls (those its source makes through
syscall(__NR_x), as syzkaller writes every call) that succeeded at least
once reached the kernel, counting only those syzkaller's setup code does
not make too (its sandbox's open() and the program's openat are one
count: a run whose setup gave up before the calls counts them all the
same); what it needs that this kernel lacks is (1) a
request of a gating kind (guest_env AliasNeed: a socket family, a
filesystem, a device) no module of the kernel answers, or one whose module
did not load while the calls that need it failed with the error that
says so, where the program makes such calls itself (one only syzkaller's
setup code makes, its sandbox mounting binderfs, is listed, not a need);
(2) a call the kernel does not have (ENOSYS); (3) a device path it
names that is not there.
"""
from __future__ import annotations

import errno
import fnmatch
import functools
import re
import tomllib
from dataclasses import dataclass, field
from typing import Callable

from harness.base import paths
from harness.base.guest_env import GuestEnv
from harness.base.untrusted import num
from harness.analysis.usb_console import UsbSeen

_HIST = re.compile(r"^KSTALL hist sys_exit \{ id: (?:sys_)?(?P<name>\w+)\s*\[\s*(?P<nr>\d+)\]"
                   r"(?:, ret:\s*(?P<ret>\d+))? \} hitcount:\s*(?P<count>\d+)")
_MODPROBE = re.compile(r"^KSTALL modprobe status=(?P<status>-?\d+) name=(?P<name>\S+)")
_CHECK = re.compile(r"^KSTALL check path=(?P<path>\S+) exists=(?P<exists>[01])")
_NR = re.compile(r"\b__NR_(\w+)")
# calls every program's setup makes: reaching them says nothing of its path
SETUP_CALLS = frozenset({"mmap", "mmap2", "munmap", "mprotect", "exit", "exit_group"})
# a call that fails only with these did not run its code: the kernel lacks it, or the family it names
ABSENT_ERRORS = frozenset({"ENOSYS", "EAFNOSUPPORT", "EPROTONOSUPPORT", "ESOCKTNOSUPPORT"})


# the kernel's own restart codes (include/linux/errno.h): a call a signal interrupted
RESTART_ERRORS = {512: "ERESTARTSYS", 513: "ERESTARTNOINTR", 514: "ERESTARTNOHAND", 516: "ERESTART_RESTARTBLOCK"}


def errno_name(ret: int) -> str:
    return errno.errorcode.get(-ret) or RESTART_ERRORS.get(-ret) or f"E{-ret}"


@dataclass
class Call:
    name: str
    count: int = 0
    errors: dict[str, int] = field(default_factory=dict)  # errno name -> how often

    @property
    def ok(self) -> int:
        return max(self.count - sum(self.errors.values()), 0)

    def text(self) -> str:
        """'connect 1652 (ENODEV 826, ECONNRESET 826)', 'socket 826 ok'"""
        if not self.errors:
            return f"{self.name} {self.count} ok"
        errs = ", ".join(f"{e} {n}" for e, n in sorted(self.errors.items(), key=lambda x: -x[1])[:3])
        return f"{self.name} {self.count} ({f'{self.ok} ok, ' if self.ok else ''}{errs})"


class Aliases:
    """The kernel's module aliases (modules.alias, modules.builtin.alias)."""

    def __init__(self, text: str) -> None:
        self.rules = [(w[1], w[2]) for w in (line.split() for line in text.splitlines())
                      if len(w) == 3 and w[0] == "alias"]
        # each pattern's text before its first wildcard: a name is matched only against
        # the patterns it starts like (fnmatch compiles each pattern it tries, and
        # 6.1.170 has 25,000: 1.5 s a name)
        self._prefixed = [(re.split(r"[*?\[]", pattern, maxsplit=1)[0], pattern, m) for pattern, m in self.rules]

    def answers(self, name: str) -> list[str]:
        return sorted({m for prefix, pattern, m in self._prefixed
                       if name.startswith(prefix) and fnmatch.fnmatchcase(name, pattern)})


def program_calls(source: str) -> list[str]:
    """The system calls a syzkaller program makes itself (syscall(__NR_x, ...))."""
    return list(dict.fromkeys(_NR.findall(source)))


# where a syzkaller program's calls are, by the shape csource gives one that
# repeats them in a sandbox: one call per case (threaded), or all in a row.
# A program run once has its calls in main, beside little setup: nothing is
# set apart there, nor in a program of another shape (kstall's own tests')
_SECTIONS = (re.compile(r"^(?:static )?void execute_call\(int call\)\n\{", re.M),
             re.compile(r"^void execute_one\(void\)\n\{", re.M))
_CALLED = re.compile(r"\b([a-z_][a-z0-9_]*)\s*\(")
_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)


@functools.lru_cache(maxsize=None)
def _libc() -> dict[str, tuple[str, ...]]:
    with open(paths.data_file("harness", "analysis", "libc-calls.toml"), "rb") as f:
        return {k: tuple(v) for k, v in tomllib.load(f)["calls"].items()}


# where a program's calls are when it has no section of its own: a program run
# once in a sandbox has them in loop(), else in main
_ONCE = (re.compile(r"^static void loop\(void\)\n\{", re.M), re.compile(r"^int main\(void\)\n\{", re.M))
_STRING = re.compile(r'"((?:[^"\\\n]|\\.)*)"')


def _calls_body(source: str) -> str:
    """The section the program's own calls are in, comments apart ('' if none)."""
    m = next((m for r in (*_SECTIONS, *_ONCE) if (m := r.search(source)) is not None), None)
    if m is None:
        return ""
    end = source.find("\n}\n", m.end())
    return _COMMENT.sub("", source[m.end():end if end >= 0 else len(source)])


def program_strings(source: str) -> frozenset[str]:
    """The strings the program's own calls name (each up to its first NUL:
    syzkaller writes "bcachefs\\000"), from the section its calls are in."""
    return frozenset(text.split("\\0")[0].split("\\x00")[0] for text in _STRING.findall(_calls_body(source)))


def pseudo_calls(source: str) -> list[str]:
    """syzkaller's pseudo-calls (syz_emit_vhci, syz_usb_connect) among the
    program's own calls: their system calls go through the C library, as its
    setup's do, so the count cannot tell them apart."""
    return list(dict.fromkeys(n for n in _CALLED.findall(_calls_body(source)) if n.startswith("syz_")))


def setup_calls(source: str) -> set[str]:
    """The system calls syzkaller's setup code makes through the C library
    (its sandbox, its devices, its loop: all but the calls' own section).
    Empty for a source of another shape: nothing is set apart."""
    m = next((m for r in _SECTIONS if (m := r.search(source)) is not None), None)
    if m is None:
        return set()
    end = source.find("\n}\n", m.end())
    rest = _COMMENT.sub("", source[:m.start()] + (source[end:] if end >= 0 else ""))
    out: set[str] = set()
    for name in set(_CALLED.findall(rest)):
        out.update(_libc().get(name, (name,)))
    return out


@dataclass
class Reach:
    calls: dict[str, Call]
    program: list[str]                 # its own calls
    requests: dict[str, tuple[int, int]]  # alias -> (times asked, how the last one ended: modprobe's status)
    checks: dict[str, bool]
    needs: list[str]                   # what gates its path and this kernel lacks
    lacks: list[str]                   # asked for, lacking, not gating
    shared: frozenset[str] = frozenset()  # its calls syzkaller's setup makes too (setup_calls)
    pseudo: list[str] = field(default_factory=list)  # its syzkaller pseudo-calls (pseudo_calls): not counted
    usb: UsbSeen | None = None  # what its emulated USB device became (usb_console.py), read from the console

    def _own(self) -> list[str]:
        """Its calls that can say it ran: those its setup does not make too,
        or, where it makes all of them, every one (told apart() says which)."""
        calls = [c for c in self.program if c not in SETUP_CALLS]
        return [c for c in calls if c not in self.shared] or calls

    def told_apart(self) -> bool:
        return any(c not in self.shared for c in self.program if c not in SETUP_CALLS)

    def reached(self) -> list[str]:
        """Its own calls that ran in the kernel (setup calls apart): every one
        that returned, unless each time with an error that says the kernel
        lacks the call or the family (a rejection, EINVAL, ran the kernel's
        checks: a fix may be exactly such a check)."""
        return [c for c in self._own() if c in self.calls and not self._absent(c)]

    def _absent(self, name: str) -> bool:
        c = self.calls[name]
        return not c.ok and set(c.errors) <= ABSENT_ERRORS

    def failed(self) -> list[str]:
        """Its own calls that failed every time."""
        return [c for c in self.program if c in self.calls and not self.calls[c].ok]

    def never(self) -> list[str]:
        return [c for c in self.program if c not in self.calls and c not in SETUP_CALLS]

    @property
    def reached_kernel(self) -> bool:
        return bool(self.reached()) or bool(self.usb and self.usb.connects) or (
            not self.needs and bool(self.calls) and not [c for c in self.program if c not in SETUP_CALLS])

    def text(self) -> str:
        """What its calls did: 'its calls ran in the kernel: socket 826 ok, connect 1652 (ENODEV 826, ...)'"""
        parts = []
        if self.reached():
            parts.append("its calls ran in the kernel: " + ", ".join(self.calls[c].text() for c in self.reached()[:8])
                         + ("" if self.told_apart() else " (syzkaller's setup makes each of them too: not told apart)"))
            rejected = [c for c in self.reached() if set(self.calls[c].errors) == {"EINVAL"} and not self.calls[c].ok]
            if rejected:
                parts.append(f"every {'/'.join(rejected)} was rejected (EINVAL): this kernel refuses its arguments")
        absent = [c for c in self.program if c in self.calls and self._absent(c)]
        if absent:
            parts.append("absent from this kernel: " + ", ".join(self.calls[c].text() for c in absent))
        if self.never():
            parts.append("never ran: " + ", ".join(self.never()[:8]))
        if self.usb is not None:
            parts.append(self.usb.text())
        if not parts and self.pseudo:
            return (f"its calls are syzkaller's pseudo-calls ({', '.join(self.pseudo[:4])}), whose system calls "
                    "go through the C library as its setup's do: not counted apart")
        return "; ".join(parts) or "no call of its own was counted"

    def to_json(self) -> dict:
        return {"program_calls": self.program, "setup_too": sorted(self.shared & set(self.program)),
                "reached": self.reached(), "failed": self.failed(),
                "never_ran": self.never(), "needs": self.needs, "lacks": self.lacks,
                "pseudo_calls": self.pseudo, "usb": self.usb.to_json() if self.usb else None,
                "calls": {n: {"count": c.count, "errors": c.errors} for n, c in self.calls.items()},
                "requests": {n: {"count": k, "status": s} for n, (k, s) in self.requests.items()},
                "checks": self.checks}


def parse(lines: list[str], numbers: dict[int, str] | None = None
          ) -> tuple[dict[str, Call], dict[str, tuple[int, int]], dict[str, bool]]:
    """numbers: the program's own ABI's table (syscall_numbers), when it is not
    the kernel's native one the tracer named the calls by."""
    calls: dict[str, Call] = {}
    requests: dict[str, tuple[int, int]] = {}
    checks: dict[str, bool] = {}
    for line in lines:  # guest text: a number of more than 20 digits is no number, and its line is passed over
        if (m := _HIST.match(line)) is not None:
            nr, n = num(m.group("nr")), num(m.group("count"))
            ret = num(m.group("ret")) if m.group("ret") is not None else 0
            if nr is None or n is None or ret is None:
                continue
            name = m.group("name") if numbers is None else numbers.get(nr, f"syscall_{nr}")
            c = calls.setdefault(name, Call(name))
            if m.group("ret") is None:
                c.count += n
            else:
                ret = ret - (1 << 64) if ret >= 1 << 63 else ret
                if ret < 0:
                    c.errors[errno_name(ret)] = c.errors.get(errno_name(ret), 0) + n
        elif (m := _MODPROBE.match(line)) is not None and (status := num(m.group("status"))) is not None:
            asked, _ = requests.get(m.group("name"), (0, 0))
            requests[m.group("name")] = (asked + 1, status)
        elif (m := _CHECK.match(line)) is not None:
            checks[m.group("path")] = m.group("exists") == "1"
    return calls, requests, checks


def _fill(what: str, m: re.Match, env: GuestEnv) -> str:
    groups = {k: v for k, v in m.groupdict().items() if v is not None}
    text = what.format(**groups)
    if "family" in groups:
        text += f" ({env.family(int(groups['family']))})"
    return text


def config_note(key: str, env: GuestEnv, config: Callable[[str], str | None] | None) -> str:
    """What this kernel's config says of a need (environment.toml [needs.options]):
    '; this kernel's config leaves it out (CONFIG_X25 is not set)'; '' where it is
    built or kstall has no config to read."""
    option = dict(env.need_options).get(key)
    if option is None or config is None or config(f"CONFIG_{option}") not in (None, "n"):
        return ""
    return f"; this kernel's config leaves it out (CONFIG_{option} is not set)"


def analyse(lines: list[str], program: list[str], env: GuestEnv, aliases: Aliases | None,
            numbers: dict[int, str] | None = None, shared: frozenset[str] = frozenset(),
            config: Callable[[str], str | None] | None = None, strings: frozenset[str] = frozenset(),
            pseudo: list[str] | None = None) -> Reach:
    """config: the kernel's CONFIG_ values by option, CONFIG_ and all
    (Kernel.config_value; None: not set), where kstall has its config;
    strings: those the program's own calls name (program_strings);
    pseudo: its syzkaller pseudo-calls (pseudo_calls)."""
    calls, requests, checks = parse(lines, numbers)
    needs: list[str] = []
    lacks: list[str] = []
    for name, (asked, status) in requests.items():
        if status == 0:
            continue
        modules = aliases.answers(name) if aliases else None
        rule = next(((r, m) for r in env.alias_needs if (m := re.match(r.pattern, name))), None)
        if rule is None:
            if modules == []:
                lacks.append(f"{name} (no module)")
            continue
        r, m = rule
        what = _fill(r.what, m, env)
        failing = [c for c in r.calls if c in calls and any(e in calls[c].errors for e in r.errors)]
        if r.named and strings:  # the program names what it asks for: its request only if it names this one
            own = m.group(r.named) in strings
        else:
            own = bool(set(r.calls) & set(program))
        if program and not own:
            # asked for by syzkaller's setup code, not by a call of the program's
            # own (its sandbox mounts binderfs and gadgetfs whatever the program does)
            lacks.append(f"{name} ({what}, for its setup: {'no module' if modules == [] else 'did not load'})")
            continue
        if modules == []:
            family = env.family(int(m.group("family"))) if "family" in m.groupdict() and m.group("family") else ""
            needs.append(f"{what}: no module of this kernel answers request_module(\"{name}\")"
                         + config_note(family, env, config))
        elif failing:
            needs.append(f"{what}: request_module(\"{name}\") did not load "
                         f"{', '.join(modules) if modules else 'a module'}, and {'/'.join(failing)} failed with "
                         f"{'/'.join(e for e in r.errors if any(e in calls[c].errors for c in failing))}")
    for name in program:
        if name in calls and calls[name].errors.get("ENOSYS") == calls[name].count:
            needs.append(f"the system call {name} (ENOSYS: this kernel does not have it)")
    for path, exists in checks.items():
        if not exists:
            needs.append(f"{path}: the program opens it; the device is not there{config_note(path, env, config)}")
    return Reach(calls, program, requests, checks, needs, lacks, shared, list(pseudo or []))


# a need's kind, by how analyse() and left_out() word it: an answer about the
# kernel (the bug's code is not in it as configured), a test device kstall
# could not build for it, or what the guest or host lacks (a harness limit)
KERNEL, TEST_DEVICE, HOST = "not in the kernel", "test device not built", "not in the guest"


def need_kind(need: str) -> str:
    if "a test device kstall could not build" in need:
        return TEST_DEVICE
    if any(w in need for w in ("config leaves it out", "no module of this kernel answers",
                               "this kernel does not have it")):
        return KERNEL
    return HOST


def filesystems_left_out(strings: frozenset[str], env: GuestEnv, config: Callable[[str], str | None]) -> list[str]:
    """The filesystems a program mounts (its own calls' strings, program_strings)
    whose option this kernel's config leaves out ([needs.filesystems]), as
    analyse() words the need its account would give after the whole run."""
    return [f"filesystem {name}: the program mounts it; this kernel's config leaves it out (CONFIG_{option} is not set)"
            for name, option in env.filesystems if name in strings and config(f"CONFIG_{option}") not in ("y", "m")]


def left_out(paths: list[str], env: GuestEnv, config: Callable[[str], str | None]) -> list[str]:
    """The device paths a program opens (syzkaller.device_paths) whose option
    this kernel's config leaves out ([needs.options]), as analyse() words
    them: the need its account would give after the run, known before the
    boot; but for those the environment's setup goes on without
    ([needs] setup_goes_on). On the 2025 catalogue's 198 cells on two
    Debian kernels, every program this names ran to "needs" it, none to a hang."""
    return [f"{p}: the program opens it{note}" for p in paths
            if p not in env.setup_goes_on and (note := config_note(p, env, config))]
