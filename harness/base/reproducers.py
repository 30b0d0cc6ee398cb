# SPDX-License-Identifier: GPL-2.0
"""Reproducers: the built-ins (repro/<name>.toml next to their C sources) and
a user's own, in the same shape.

A reproducer spec is one of:
  NAME          a built-in (repro/NAME.toml)
  FILE.c        a C file, built on the host as the built-ins are
  EXECUTABLE    a program as it is (static, or with its shared libraries)
  FILE.toml     a reproducer's data file kept anywhere, with its program
  DIRECTORY     a directory holding one such data file
  run:CMD ARGS  a command run in the guest as it would run on the host, over
                the host's root filesystem (harness/guest/hostfs.py), from
                the directory kstall was started in
  syzbot:ID     syzbot's bug ID (or extid): its C reproducer and record, fetched
                from the dashboard once
  syz:FILE.c    a syzkaller C reproducer (a .c file with syzkaller's header is
                one anyway): built and run as syzbot runs it
                (harness/base/syzkaller.py, harness/base/guest_env.py)
A program named by a C file or an executable knows nothing of kstall: it is
run again and again (`repeat`), each completed run one pass. A data file may
say it speaks kstall's protocol instead (count_arg, duration_arg, progress
lines), as the built-ins do.
"""
from __future__ import annotations

import dataclasses
import hashlib
import os
import re
import tomllib
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from harness.base import arch, guest_env, paths, syzkaller
from harness.base.needs import AGENT, HOST_COMMAND, HOST_COMMAND_NEEDS, KernelNeeds

REPRO_DIR = paths.data_file("repro")
BUILTIN_CALIBRATION = REPRO_DIR / "calibration"
# a program run as it is: what its data file need not say
GENERIC: dict[str, Any] = {"count_name": "runs", "min_count": 1, "count_arg": "", "duration_arg": "", "max_seconds": 60,
           "stuck_after_s": 30, "default_cpus": 2, "sleep_after_s": 10}


class HangIn(StrEnum):
    """Where a reproducer's hang is read (its data file's `hang`)."""
    KERNEL = "kernel"    # the vCPUs, through GDB on QEMU's gdbstub
    PROCESS = "process"  # the stuck reproducer's threads, through GDB on its core


class ReproducerError(LookupError):
    """A reproducer spec kstall cannot use: a usage error."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


@dataclass(frozen=True)
class StallPath:
    """A code path the reproducer times itself ([stall.paths.NAME])."""
    name: str
    title: str          # "NMI reserve"
    progress: str       # the prefix of its fields in progress lines (nmi_max_ns, nmi_over)
    threshold_ms: float  # slower than this is a stall
    arg: str            # the reproducer's argument that sets the threshold
    min_stalls: int | None = None  # its own, when one stall of it is not enough


@dataclass(frozen=True)
class StallSpec:
    """A reproducer that measures latencies ([stall]): one measurement past its
    path's threshold is a stall, min_stalls of them a VULNERABLE verdict."""
    paths: tuple[StallPath, ...]
    min_stalls: int = 1
    measure: str = "measurement"   # what one measurement is: "3 reserves >= 50 ms"
    count_field: str = "count"     # the stats field that counts measurements
    title: str = "latency"         # what the chart shows
    signature: str = "latency-stall"  # the verdict's signature when a path stalls

    def thresholds(self) -> dict[str, float]:
        return {p.name: p.threshold_ms for p in self.paths}

    def titles(self) -> dict[str, str]:
        return {p.name: p.title for p in self.paths}

    def min_stalls_of(self) -> dict[str, int]:
        return {p.name: p.min_stalls or self.min_stalls for p in self.paths}

    @staticmethod
    def from_doc(doc: dict) -> "StallSpec | None":
        if not doc.get("paths"):
            return None
        paths = tuple(StallPath(name, p.get("title", name), p.get("progress", name), float(p["threshold_ms"]), p["arg"],
                                p.get("min_stalls"))
                      for name, p in doc["paths"].items())
        known = {k: doc[k] for k in ("measure", "count_field", "title", "signature") if k in doc}
        return StallSpec(paths, int(doc.get("min_stalls", 1)), **known)


@dataclass(frozen=True)
class Reproducer:
    name: str
    binary: str
    summary: str
    count_name: str
    min_count: int
    count_arg: str
    duration_arg: str
    max_seconds: float
    stuck_after_s: float
    default_cpus: int
    default_args: tuple[str, ...] = ()
    nmi_rate: float = 0.0          # NMIs/s the host injects when the guest asks
    stall: StallSpec | None = None  # None: the reproducer measures no latencies
    needs: KernelNeeds = KernelNeeds("")
    hang: HangIn = HangIn.KERNEL
    source: str = ""       # a C file kstall builds (images/guest/programs.py), or ""
    program: str = ""      # an executable on the host that goes into the guest as it is, or ""
    signatures: str = ""   # a directory of its own hang signatures, or ""
    calibration: str = ""  # where its calibration lives (built-ins: repro/calibration)
    command: str = ""      # run:CMD: a command the guest runs over the host's root, or ""
    cwd: str = ""          # where it runs
    # a task of its own in D state, in one kernel wait, this long is a sleeping hang (0: not watched)
    sleep_after_s: float = 0
    # [record]: the kernel bug's published record (harness/analysis/bug_record.py)
    record: dict = field(default_factory=dict, hash=False, compare=False)
    # the guest environment it expects (harness/base/guest_env.py), or "" for kstall's bare initramfs
    env: str = ""
    # a syzkaller reproducer's header (harness/base/syzkaller.py Header.to_json()), or {}
    syzbot: dict = field(default_factory=dict, hash=False, compare=False)
    # a program of another ABI than its guest's own ("386": a 32-bit x86 program, arches.toml compat), or ""
    abi: str = ""


    def arguments(self, users: list[str] | tuple[str, ...] = ()) -> list[str]:
        """What it runs with apart from its stop conditions: its defaults, the
        stall thresholds from its data file, then the user's (which win)."""
        args = list(self.default_args)
        for path in self.stall.paths if self.stall else ():
            args += [path.arg, f"{path.threshold_ms:g}"]
        return args + list(users)
    def stall_thresholds(self) -> dict[str, float]:
        return self.stall.thresholds() if self.stall else {}

    @property
    def generic(self) -> bool:
        """It knows nothing of kstall's protocol: run again and again, a completed run one pass."""
        return not self.count_arg

    @property
    def timebox(self) -> bool:
        """It runs for its time, not for a count: its progress is no evidence of a hang."""
        return bool(self.env)

    @property
    def builtin(self) -> bool:
        return not (self.source or self.program or self.command)

    @property
    def calibration_dir(self) -> Path:
        """Where `calibrate --write` writes its calibration: its own directory,
        or for a built-in of an installed kstall (whose tree dpkg owns, read
        only) the user's, in the cache."""
        if self.calibration:
            return Path(self.calibration)
        return paths.cache_dir() / "calibration" / "builtin" if paths.INSTALLED else BUILTIN_CALIBRATION

    @property
    def calibration_dirs(self) -> tuple[Path, ...]:
        """Where its calibrations are read from: the one calibrate writes first, then the package's."""
        return tuple(dict.fromkeys([self.calibration_dir, *([] if self.calibration else [BUILTIN_CALIBRATION])]))


def names() -> list[str]:
    return sorted(p.stem for p in REPRO_DIR.glob("*.toml") if p.stem != AGENT)


def load(name: str) -> Reproducer:
    """A built-in, by name."""
    path = REPRO_DIR / f"{name}.toml"
    if name == AGENT or not path.is_file():
        raise ReproducerError(f"unknown reproducer {name!r}: give one of {', '.join(names())}, a C file, "
                              "an executable, a reproducer's .toml or its directory")
    return from_file(path)


def looks_like_path(spec: str) -> bool:
    return not spec.startswith(HOST_COMMAND) and ("/" in spec or spec.endswith((".c", ".toml")) or
                                                 spec.startswith("."))


def canonical_spec(spec: str) -> str:
    """A spec that means the same from any directory (an absolute path for a file)."""
    if spec.startswith(syzkaller.SPEC):
        return syzkaller.SPEC + str(Path(spec[len(syzkaller.SPEC):]).expanduser().resolve())
    return str(Path(spec).expanduser().resolve()) if looks_like_path(spec) else spec


def resolve(spec: str) -> Reproducer:
    """The reproducer a spec names (see the module's docstring)."""
    if spec.startswith(HOST_COMMAND):
        return host_command(spec[len(HOST_COMMAND):].strip())
    if spec.startswith(syzkaller.FETCH):
        try:
            path = syzkaller.fetch(spec[len(syzkaller.FETCH):], paths.cache_dir() / "syzbot")
        except syzkaller.FetchError as e:
            raise ReproducerError(str(e)) from None
        return syzkaller_reproducer(path, syzkaller.read_header(path) or syzkaller.untitled(path))
    if spec.startswith(syzkaller.SPEC):
        path = Path(spec[len(syzkaller.SPEC):]).expanduser().resolve()
        if path.suffix != ".c" or not path.is_file():
            raise ReproducerError(f"{spec}: syz: names a syzkaller C reproducer file")
        return syzkaller_reproducer(path, syzkaller.read_header(path) or syzkaller.untitled(path))
    if not looks_like_path(spec):
        return load(spec)
    path = Path(spec).expanduser().resolve()
    if path.is_dir():
        found = sorted(path.glob("*.toml"))
        if len(found) != 1:
            raise ReproducerError(f"{spec}: a reproducer directory holds exactly one .toml data file "
                                  f"(found {len(found)})")
        path = found[0]
    if not path.exists():
        raise ReproducerError(f"no such reproducer file {spec}")
    if path.suffix == ".toml":
        return from_file(path)
    if path.suffix == ".c":
        header = syzkaller.read_header(path)
        if header is not None:
            return syzkaller_reproducer(path, header)
        return program_reproducer(path, source=True)
    if path.is_file() and os.access(path, os.X_OK):
        return program_reproducer(path, source=False)
    raise ReproducerError(f"{spec}: not a C file, an executable, a .toml data file or a directory holding one")


def guest_name(stem: str) -> str:
    """A name that is safe on the agent's GO line and in the initramfs."""
    name = re.sub(r"[^A-Za-z0-9._-]", "-", stem)[:40].strip(".-")
    if not name:
        raise ReproducerError(f"{stem!r} gives no usable program name")
    return name


def host_command(command: str) -> Reproducer:
    """run:CMD: the command, run by the host's /bin/sh in the guest, over the
    host's root, from this directory. Both travel hex-encoded on the agent's
    GO line (repro/agent/hostcmd.c: 2 KB of command, 1 KB of directory)."""
    cwd = os.getcwd()
    if not command:
        raise ReproducerError("run: needs a command, e.g. 'run:perf record -a -- sleep 5'")
    if len(command.encode()) > 2000:
        raise ReproducerError("run: the command is longer than 2000 bytes: put it in a script")
    if len(cwd.encode()) > 1000:
        raise ReproducerError(f"run: the current directory's path is longer than 1000 bytes: {cwd[:80]}...")
    d = GENERIC | HOST_COMMAND_NEEDS
    return _reproducer(guest_name("run-" + Path(command.split()[0]).name),
                       d | {"binary": "@host", "summary": f"run: {command}",
                            "calibration": str(paths.cache_dir() / "calibration" / "run")},
                       command=command, cwd=cwd)


def program_reproducer(path: Path, source: bool, doc: dict | None = None) -> Reproducer:
    """A C file or an executable run as it is, with what a data file says.
    Without a data file, its calibration is kept in the cache by its content."""
    d = GENERIC | (doc or {})
    name = guest_name(d.get("name") or path.stem)
    cal = d.get("calibration") or str(paths.cache_dir() / "calibration" /
                                       hashlib.sha256(path.read_bytes()).hexdigest()[:16])
    return _reproducer(name, d | {"binary": guest_name(path.stem), "calibration": cal,
                                  "summary": d.get("summary") or f"{path.name} (a user's program)"},
                       source=str(path) if source else "", program="" if source else str(path))


def syzkaller_reproducer(path: Path, header: syzkaller.Header) -> Reproducer:
    """A syzkaller C reproducer, run as syzbot runs one: in syzkaller's guest
    environment, for its time, watched by the kernel's own detectors."""
    known = {arch.get(n).table.get("syzkaller", n) for n in arch.names()}
    abi = syzkaller.abi_of(path, header)
    if header.arch and arch.by_syzkaller(header.arch) is None:
        raise ReproducerError(f"{path.name} is syzkaller's reproducer for {header.arch}: kstall builds programs "
                              f"for its guests, {', '.join(sorted(known))}")
    env = guest_env.get(syzkaller.ENV)
    compat = arch.compat_of(abi)
    d = GENERIC | {"max_seconds": env.seconds, "sleep_after_s": env.sleep_after_s, "default_cpus": env.cpus,
                   "kernel": {"options": [*env.options, *([compat["option"]] if compat.get("option") else [])]},
                   "summary": f"syzbot: {header.title}" if header.title else f"{path.name} (a syzkaller program)"}
    name = guest_name(("syz-" + header.bug_id[:12]) if header.bug_id else path.stem)
    r = program_reproducer(path, source=True, doc=d | {"name": name})
    record = syzkaller.record_beside(path)
    bug = header.to_json() | ({"record": record, "alt_titles": syzkaller.alt_titles(record, header.title)}
                              if record else {})
    return dataclasses.replace(r, env=syzkaller.ENV, syzbot=bug, abi=abi)


def from_file(path: Path) -> Reproducer:
    """A reproducer's data file (repro/NAME.toml, or a user's kept anywhere)."""
    try:
        with open(path, "rb") as f:
            d = tomllib.load(f)
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise ReproducerError(f"{path}: {e}") from None
    if path.parent == REPRO_DIR:
        return _reproducer(d["name"], d)
    return user_file(path, d)


def user_file(path: Path, d: dict) -> Reproducer:
    """A user's data file: its program (source = "x.c" or program = "x", or
    binary = one of kstall's own guest programs), its signatures/ and
    calibration/ beside it unless it names others."""
    home = path.parent
    here = {k: str((home / d[k]).resolve()) for k in ("source", "program", "signatures", "calibration") if d.get(k)}
    if "signatures" not in here and (home / "signatures").is_dir():
        here["signatures"] = str(home / "signatures")
    here.setdefault("calibration", str(home / "calibration"))
    d = d | here | {"name": d.get("name") or path.stem}
    if "signatures" in d and not Path(d["signatures"]).is_dir():
        raise ReproducerError(f"{path}: its signatures directory {d['signatures']} does not exist")
    if not (d.get("source") or d.get("program")):
        if not d.get("binary"):
            raise ReproducerError(f"{path}: say which program it runs: source = \"FILE.c\", program = \"FILE\" "
                                  "or binary = \"NAME\" (one of kstall's guest programs)")
        return _reproducer(d["name"], GENERIC | {"summary": f"{d['binary']} ({path.name})"} | d)
    prog = Path(d.get("source") or d["program"])
    if not prog.is_file():
        raise ReproducerError(f"{path}: its program {prog} does not exist")
    return program_reproducer(prog, bool(d.get("source")), d)


def _reproducer(name: str, d: dict, source: str = "", program: str = "", command: str = "",
                cwd: str = "") -> Reproducer:
    try:
        return Reproducer(
            name=name, binary=d["binary"], summary=d["summary"], count_name=d["count_name"],
            min_count=int(d["min_count"]), count_arg=d["count_arg"], duration_arg=d["duration_arg"],
            max_seconds=float(d["max_seconds"]), stuck_after_s=float(d["stuck_after_s"]),
            default_cpus=int(d["default_cpus"]), default_args=tuple(str(a) for a in d.get("default_args", ())),
            nmi_rate=float(d.get("nmi", {}).get("rate", 0)), stall=StallSpec.from_doc(d.get("stall", {})),
            needs=KernelNeeds.from_doc(name, d), hang=HangIn(d.get("hang", HangIn.KERNEL)),
            source=source, program=program,
            command=command, cwd=cwd,
            signatures=d.get("signatures", ""), calibration=d.get("calibration", ""),
            sleep_after_s=float(d.get("sleep_after_s", 0)), record=dict(d.get("record", {})))
    except (KeyError, TypeError, ValueError) as e:
        raise ReproducerError(f"reproducer {name}: its data file is missing or has a bad {e}") from None
