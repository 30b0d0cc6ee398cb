# SPDX-License-Identifier: GPL-2.0
"""`kstall inspect RUN [--with crash|drgn|gdb]`: a run's vmcore in the developer's debugger.

The core (verify --vmcore) is opened with the right vmlinux: the one with
DWARF kstall has for the kernel (a build's own, or `kstall symbols KERNEL
--debuginfo`), else, for gdb, the symbol file made from the captured
kallsyms. crash and drgn need DWARF; a debugger version known not to read
a kernel that new (debuggers.toml, measured here) is named with the one it
would take. On a terminal the debugger is started (exec); otherwise, or
with --print, its exact command is printed. With --ex the commands run in
batch and the debugger exits.

Whatever the debuggers can do, kstall says what it knows first: each CPU's
stack as kstall walked it, its state, and who waits for whom.
"""
from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

from harness.base import arch as arches
from harness.base import paths, untrusted
from harness.base.kernel_cache import KernelKey
from harness.debug.symfile import developer_gdb
from images.kernels import debuginfo

PACKAGES = {"crash": "crash", "drgn": "python3-drgn"}  # gdb's is the architecture's (its table's gdb)
KNOWN = Path(__file__).resolve().parent.parent / "debug" / "debuggers.toml"


class InspectError(RuntimeError):
    pass


@dataclass
class Run:
    path: Path
    doc: dict
    vmcore: Path
    vmlinux: Path | None
    symbols: Path | None

    @property
    def arch(self) -> arches.Arch:
        return arches.get(self.doc["kernel"].get("arch") or arches.DEFAULT)

    @property
    def upstream(self) -> str:
        return self.doc["kernel"].get("upstream") or ""


def load(run: Path) -> Run:
    try:
        doc = json.loads((run / "run.json").read_text())
    except (OSError, ValueError) as e:
        raise InspectError(f"{run}: no readable run.json ({e})") from None
    core = run / "vmcore"
    if not core.is_file():
        why = (doc.get("vm") or {}).get("vmcore") or {}
        raise InspectError(f"{run}: no vmcore" + (f" ({why['error']})" if why.get("error") else
                                                  " (verify --vmcore writes one when a run hangs)"))
    k = doc.get("kernel") or {}
    sha, arch = untrusted.sha256(k.get("sha256")), k.get("arch") or arches.DEFAULT
    if sha is None or arch not in arches.names():  # they name files in kstall's cache
        raise InspectError(f"{run}/run.json names no kernel kstall can look up (sha256 "
                           f"{str(k.get('sha256'))[:70]!r}, arch {str(arch)[:20]!r}): refused")
    own = untrusted.plain_file(k.get("vmlinux"))
    vmlinux = debuginfo.for_image(KernelKey(sha, arch), Path(str(k.get("vmlinuz"))), own)
    recorded = (doc.get("symbols") or {}).get("cached") or (doc.get("symbols") or {}).get("path")
    syms = untrusted.path_under(recorded, paths.cache_dir())  # a symbol file is written beside it
    return Run(run, doc, core, vmlinux, syms if syms and syms.is_file() else None)


def _version_of(tool: str) -> str:
    """The installed debugger's upstream version, as Debian packaged it (no need to run the debugger)."""
    try:
        p = subprocess.run(["dpkg-query", "-W", "-f", "${Version}", PACKAGES[tool]], capture_output=True,
                           text=True, timeout=10)
    except (KeyError, OSError, subprocess.TimeoutExpired):
        return ""
    return p.stdout.split(":")[-1].split("-")[0] if p.returncode == 0 else ""


def _kernel_key(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in v.split(".")[:2] if x.isdigit())


def too_new(tool: str, upstream: str) -> str:
    """Why the installed tool cannot read this kernel, from what was measured here ("" if nothing is known)."""
    version = _version_of(tool)
    known = tomllib.loads(KNOWN.read_text()).get(tool, {}).get(version)
    if not known or not upstream or _kernel_key(upstream) <= _kernel_key(known["reads_up_to"]):
        return ""
    return (f"{tool} {version} reads kernels up to {known['reads_up_to']} here ({known['why']}); "
            f"{upstream} needs {known['newer']}")


def _script(text: str, suffix: str) -> str:
    """A file of batch commands for the debugger, in kstall's cache under a
    name its text gives: a printed command can be pasted later, and the same
    commands again reuse the file rather than leave another behind."""
    path = paths.cache_dir() / "inspect" / f"{hashlib.sha256(text.encode()).hexdigest()[:16]}{suffix}"
    if not path.exists():
        paths.write_atomic(path, text)
    return str(path)


def command(r: Run, tool: str, commands: list[str]) -> list[str]:
    if tool == "gdb":
        return developer_gdb(r.arch, r.vmlinux, r.symbols, None, f"core-file {r.vmcore}", commands, bool(commands))
    if r.vmlinux is None:
        raise InspectError(f"{tool} needs the kernel's vmlinux with DWARF, which kstall does not have: fetch it "
                           f"with `kstall symbols {r.doc['kernel'].get('spec')} --debuginfo` (or give a file: "
                           "--debuginfo FILE); gdb opens the core without it (--with gdb)")
    if tool == "crash":
        args = ["crash", str(r.vmlinux), str(r.vmcore)]
        if commands:
            args += ["-i", _script("".join(f"{c}\n" for c in commands) + "quit\n", ".crash")]
        return args
    args = ["drgn", "--core", str(r.vmcore), "--symbols", str(r.vmlinux)]
    if commands:
        args.append(_script("".join(f"{c}\n" for c in commands), ".py"))
    return args


def what_kstall_knows(r: Run) -> str:
    """The stacks, CPU states and waits kstall recorded (backtraces.txt: each
    CPU's class or state, whom it waits for, its stack): there with no DWARF at all."""
    out = [f"{r.path.name}: {r.doc.get('line', '')}"]
    bt = r.path / "backtraces.txt"
    if bt.is_file():
        out.append(bt.read_text().rstrip())
    waits = r.doc.get("waits")
    out += [f"who holds what the sleeping tasks wait for: {f}"
            for f in (waits.get("findings", []) if isinstance(waits, dict) else []) if isinstance(f, str)]
    return "\n".join(out)


def inspect(run: Path, tool: str, commands: list[str], print_only: bool, echo) -> int:
    try:
        r = load(run)
        why = too_new(tool, r.upstream) if tool != "gdb" else ""
        if why:
            raise InspectError(why + "; gdb reads the core for every kernel (--with gdb)")
        package = PACKAGES.get(tool) or r.arch.gdb
        argv = command(r, tool, commands)
    except InspectError as e:
        echo(f"error: {e}")
        return 1
    echo(what_kstall_knows(r))
    if print_only or (not commands and not sys.stdin.isatty()):
        print(shlex.join(argv))  # pasted into a shell as it is
        return 0
    if shutil.which(argv[0]) is None:
        echo(f"error: {argv[0]} is not installed (Debian package {package})")
        return 1
    echo(f"opening {r.vmcore} with {argv[0]}" + (f" and {r.vmlinux}" if r.vmlinux else
                                                 " and the symbols captured from the guest (no DWARF)"))
    os.execvp(argv[0], argv)
    return 1  # (not reached)
