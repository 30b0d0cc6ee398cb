# SPDX-License-Identifier: GPL-2.0
"""Reads every vCPU's state from a stopped guest: GDB first, QMP as fallback.

GDB runs interactively under pexpect against QEMU's gdbstub (a unix socket),
with gdbscripts/kstall_gdb.py loaded. Several samples are taken a fraction of
a second apart (`continue &`, sleep, `interrupt`) so that a CPU spinning in
one place can be told from one that merely passed through it. If GDB cannot
attach, QMP's human monitor gives the same dump format (registers from
`info registers`, stack and code bytes from `x`), walked by the same code.
"""
from __future__ import annotations

import contextlib
import functools
import json
import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Literal

import pexpect

from harness.base import paths, rundir
from harness.guest.qmp import QMP, QMPError, QMPTimeout

from harness.analysis import kernel_waits, unwind
from harness.base.arch import Arch
from harness.analysis.kallsyms import Kallsyms
from harness.debug.gdb import DebugError, end_gdb, spawn_gdb

GDB_SCRIPT = paths.REPO / "gdbscripts" / "kstall_gdb.py"
PROMPT = "(gdb) "
GONE_POLL_S = 0.25  # how often a silent GDB's QEMU is looked at


@dataclass
class Samples:
    dumps: list[dict] = field(default_factory=list)
    method: str = ""       # gdb | qmp
    seconds: float = 0.0
    errors: list[str] = field(default_factory=list)
    resumed: bool = False  # the guest was left running afterwards


@dataclass(frozen=True)
class Target:
    """The kernel whose vCPUs are read: its architecture, its symbols
    captured from the guest, a vmlinux with DWARF when there is one, and where
    it keeps who waits for whom (harness/analysis/kernel_waits.py)."""
    arch: Arch
    symbols: Path | None = None
    vmlinux: Path | None = None
    layout: Path | None = None


class GdbSession:
    """One interactive GDB for the guest, started with its symbols; attach()
    connects it (which stops the guest). close() always reaps it."""

    def __init__(self, log_path: Path, target: Target, timeout: float = 20.0, load: bool = True) -> None:
        self.timeout = timeout
        # what ended QEMU from under GDB (killed, stopped), or None: asked while GDB is silent
        self.qemu_gone: Callable[[], str | None] = lambda: None
        args = ["-ex", f"set architecture {target.arch.gdb_arch}"]
        if target.vmlinux:
            args += ["-ex", f"file {target.vmlinux}"]
        args += ["-ex", f"source {GDB_SCRIPT}"]
        self.log = open(log_path, "a")
        try:
            self.child = spawn_gdb(args, self.log, timeout, target.arch.gdb)
        except DebugError:
            self.log.close()
            raise
        self.symbols, self.layout = target.symbols, target.layout
        if load:
            self.load()

    def load(self) -> None:
        """Wait for GDB to have started and read the symbols. (Apart from
        __init__, so that it can wait on another thread: GDB itself must be
        forked by the main one, as PR_SET_PDEATHSIG fires when the thread that
        forked it ends.)"""
        try:
            self._expect_prompt()
            if self.symbols:
                self.run(f"kstall-symbols {self.symbols}")
            if self.layout:
                self.run(f"kstall-layout {self.layout}")
        except DebugError:  # a GDB that died or hung on the way in is reaped here
            self.close(resume=True)
            raise

    def attach(self, gdb_socket: Path) -> None:
        out = self.run(f"target remote {gdb_socket}")
        # (with a vmlinux, GDB also says "<source>: No such file or directory":
        # that is about source files, not the socket)
        if "Remote debugging using" not in out or re.search(
                r"(Connection refused|Remote connection closed|Connection timed out|Target disconnected|"
                rf"{re.escape(str(gdb_socket))}: No such file)", out):
            raise DebugError(f"gdb could not attach: {out.strip()[-200:]}")

    def _expect_prompt(self, timeout: float | None = None) -> str:
        # in slices: a GDB waiting on a QEMU that was killed or stopped waits for nothing
        deadline = time.monotonic() + (timeout or self.timeout)
        while True:
            try:
                self.child.expect_exact(PROMPT, timeout=max(0.0, min(GONE_POLL_S, deadline - time.monotonic())))
                return self.child.before
            except pexpect.EOF:
                raise DebugError("gdb stopped answering (EOF)") from None
            except pexpect.TIMEOUT:
                gone = self.qemu_gone()
                if gone:
                    raise DebugError(f"gdb waited on a QEMU that is gone: {gone}") from None
                if time.monotonic() >= deadline:
                    raise DebugError("gdb stopped answering (TIMEOUT)") from None

    def run(self, command: str, timeout: float | None = None) -> str:
        self.child.sendline(command)
        return self._expect_prompt(timeout)

    def sample(self, out: Path) -> dict:
        text = self.run(f"kstall-sample {out}")
        if not out.exists():
            raise DebugError(f"kstall-sample wrote nothing: {text.strip()[-300:]}")
        return json.loads(out.read_text())

    def let_run(self, seconds: float) -> None:
        """Let the guest run for a moment, then stop it again."""
        out = self.run("continue &")
        if "The program is not being run" in out:  # the target went away (QEMU ended): no stop to wait for
            raise DebugError("gdb lost its target: the program is not being run")
        time.sleep(seconds)
        self.child.sendline("interrupt")
        try:
            self.child.expect([r"received signal SIGINT", r"stopped"], timeout=self.timeout)
        except (pexpect.TIMEOUT, pexpect.EOF):
            raise DebugError("guest did not stop on interrupt") from None
        self.run("echo")

    def close(self, resume: bool) -> None:
        """Detach (resume: the guest runs on) or disconnect, then end GDB
        (killed: a GDB that tidies up the kernel's symbols before it exits
        kept the verdict waiting 40 ms)."""
        try:
            if self.child.isalive():
                self.run("detach" if resume else "disconnect", timeout=5)
        except (DebugError, pexpect.ExceptionPexpect, OSError):
            pass
        finally:
            end_gdb(self.child)
            self.log.close()


class Prepared:
    """A GdbSession started in the background while a hang is only suspected,
    so that its start (fork, GDB, symbols: about 0.6 s) is not on the path
    from a detected hang to its verdict."""

    def __init__(self, log_path: Path, target: Target) -> None:
        self.session: GdbSession | None = None
        self.error = ""
        try:
            self.starting: GdbSession | None = GdbSession(log_path, target, load=False)
        except DebugError as e:
            self.starting, self.error = None, str(e)
        self.thread = threading.Thread(target=self._load, name="gdb-prepare", daemon=True)
        self.thread.start()

    def _load(self) -> None:
        if self.starting is None:
            return
        try:
            self.starting.load()
            self.session = self.starting
        except DebugError as e:
            self.error = str(e)

    def take(self, timeout: float = 50.0) -> GdbSession | None:
        """The started session (now the caller's to close), or None."""
        self.thread.join(timeout)  # load() is bounded: two waits of 20 s at most, then a 5 s close
        session, self.session = self.session, None
        return session

    def close(self) -> None:
        session = self.take()
        if session is not None:
            session.close(resume=True)


def sample_with_gdb(gdb_socket: Path, out_dir: Path, target: Target, count: int, interval: float, resume: bool,
                    prepared: Prepared | None = None, console: Path | None = None,
                    qemu_gone: Callable[[], str | None] | None = None) -> list[dict]:
    if prepared is not None:
        session = prepared.take()
        if session is None:  # not a second start: a GDB that could not start once will not now
            raise DebugError(prepared.error or "gdb did not start in time")
    else:
        session = GdbSession(out_dir / "gdb.log", target)
    if qemu_gone is not None:
        session.qemu_gone = qemu_gone
    dumps = []
    try:
        session.attach(gdb_socket)
        for i in range(count):
            if i:
                session.let_run(interval)
            dumps.append(_with_console(session.sample(out_dir / f"sample-{i}.json"), out_dir / f"sample-{i}.json",
                                       console))
    finally:
        session.close(resume)
    return dumps


# -- QMP fallback --------------------------------------------------------------

# HMP's `info registers`, as QEMU prints each architecture's: NAME=hex (x86_64,
# aarch64, s390x's R00=); NAME hex (ppc64's NIP and LR, riscv64's pc and its
# x2/sp, named by the ABI name after the slash); ppc64's GPR00 and the three
# registers after it on one row; s390x's PSW as its mask and address
_REG = re.compile(r"\b([A-Z][A-Z0-9]*)\s*=\s*([0-9a-f]+)\b", re.I)
_SPACED = re.compile(r"(?<!\S)(?:[a-z][a-z0-9]*/)?([a-z][a-z0-9]*) +([0-9a-f]{8,16})(?!\S)", re.I)
_ROW = re.compile(r"^GPR(\d+)((?: +[0-9a-f]{16})+) *$", re.M)
_PSW = re.compile(r"\bPSW=mask ([0-9a-f]+) addr ([0-9a-f]+)")


def hmp_registers(text: str, a: Arch) -> dict[str, int]:
    """The registers a dump keeps, by GDB's names, from HMP's `info registers`
    of one CPU (the row's qmp_registers rename QEMU's spellings: an x86 CPU
    not in 64-bit mode, such as one still in the firmware at boot, prints
    EIP and ESP where a 64-bit one prints RIP and RSP). Recorded outputs of
    each form: tests/fixtures/hmp-registers."""
    found: list[tuple[str, str]] = _REG.findall(text)
    for m in _PSW.finditer(text):
        found += [("pswm", m[1]), ("pswa", m[2])]
    for m in _ROW.finditer(text):
        found += [(f"r{int(m[1]) + i}", v) for i, v in enumerate(m[2].split())]
    found += _SPACED.findall(text)
    named: dict[str, int] = {}
    for k, v in found:  # the first spelling found wins
        named.setdefault(a.qmp_registers.get(k.lower(), k.lower()), int(v, 16))
    return {k: named[k] for k in a.registers if k in named}


def hmp_bytes(qmp: QMP, cpu: int, addr: int, n: int, order: Literal["little", "big"] = "little") -> bytes | None:
    """n bytes of guest virtual memory through HMP 'x' on that CPU; None if
    unmapped. Output lines look like 'ffa0000000493c28: 0x... 0x...': words
    in the order QEMU's monitor prints them (order: the row's
    monitor_byteorder), turned back into the guest's bytes."""
    out = qmp.hmp(f"x /{(n + 7) // 8}gx {addr:#x}", cpu=cpu, timeout=10)
    data = bytearray()
    for line in out.splitlines():
        _, sep, rest = line.partition(":")
        if sep:
            for v in re.findall(r"0x([0-9a-f]+)", rest):
                data += int(v, 16).to_bytes(8, order)
    return bytes(data[:n]) if data else None


def sample_with_qmp(qmp: QMP, out_dir: Path, syms: Kallsyms | None, index: int, a: Arch,
                    stack_bytes: int = 8192, layout: dict | None = None) -> dict:
    t0 = time.monotonic()
    cpus = []
    walker = unwind.for_arch(a)
    states = {c["cpu-index"]: c for c in qmp.cmd("query-cpus-fast")}
    for n in sorted(states):
        regs = hmp_registers(qmp.hmp("info registers", cpu=n), a)
        pc, sp = regs.get(a.pc, 0), regs.get(a.sp, 0)
        user = a.in_user_mode(regs)
        # a CPU below the kernel's addresses (the firmware, at boot), or one whose
        # pc the monitor's text did not give, has no kernel stack to walk
        kernel = not user and a.pc in regs and pc >= a.kernel_from
        read = functools.partial(hmp_bytes, qmp, n, order=a.monitor_byteorder)  # this CPU's view of memory
        regions = []
        if kernel and sp:
            regions = [r for r in walker.regions(read, regs, a, stack_bytes - (sp & 7), syms) if r[1]]
        code = {}
        if syms is not None:
            for at in walker.candidates(regions, syms):
                b = read(at - 8, 8)
                if b:
                    code[at] = b[8 - walker.CODE_BEFORE:]
        words = {} if user else kernel_waits.register_words(read, regs, a)
        frames = ([f.to_json() for f in walker.frames(regs, a, regions, code, syms)] if syms and kernel else
                  [{"addr": f"{pc:#x}", "text": f"{pc:#x}" if a.pc in regs else "?", "function": "", "reliable": True,
                    "slot": None}])
        cpus.append({"cpu": n, "thread": n + 1, "state": "unknown", "arch": a.name,
                     "regs": {k: f"{v:#x}" for k, v in regs.items()},
                     "regions": [{"base": f"{b:#x}", "bytes": d.hex()} for b, d in regions], "words": words,
                     "code": {f"{a:#x}": b.hex() for a, b in code.items()},
                     "frames": frames, "unwinder": a.unwinder if syms else "none"})
    waits = kernel_waits.read(lambda at, k: hmp_bytes(qmp, 0, at, k, a.monitor_byteorder), layout or {}, len(cpus))
    doc = {"host_time": time.time(), "dump_seconds": round(time.monotonic() - t0, 3), "cpus": cpus, "via": "qmp",
           "waits": waits}
    (out_dir / f"sample-{index}.json").write_text(json.dumps(doc))
    return doc


def _with_console(doc: dict, path: Path, console: Path | None) -> dict:
    """A sample with how much the guest had printed by then: a CPU in the
    console's write path while that grows is printing, not stuck
    (cpu_state.py). QEMU writes the log as the guest's UART sends."""
    if console is not None:
        with contextlib.suppress(OSError):
            doc["console_bytes"] = console.stat().st_size
            path.write_text(json.dumps(doc))
    return doc


MAIN_LOOP_TIMEOUT = 3.0  # QMP answers in milliseconds when QEMU's main loop runs
# a QMP that answers late is a busy QEMU (another guest, a kernel unpacking
# beside it on a 2-core host: 0.32 s of silence, then QMP timed out within
# 3 s, an ERROR): it is asked again, each bound 3 times the last and at least
# twice what the host held QEMU back by during it, up to this in all; only a
# QEMU silent that long, or gone, is not answering
MAIN_LOOP_PATIENCE_S = 30.0


def main_loop_answers(qmp: QMP, host_delay: Callable[[float, float], float | None] | None = None,
                      qemu_gone: Callable[[], str | None] | None = None) -> tuple[str, float]:
    """Whether QEMU's main loop (QMP, and the gdbstub with it) answers:
    ("", the bound it answered within), or (why not, the time spent)."""
    bound, spent, tries = MAIN_LOOP_TIMEOUT, 0.0, 0
    while True:
        t = time.monotonic()
        tries += 1
        try:
            qmp.cmd("query-status", timeout=bound)
            return "", bound
        except QMPTimeout:
            spent += time.monotonic() - t
        except (QMPError, OSError) as e:
            return f"query-status: {e}", spent
        if qemu_gone is not None and (why := qemu_gone()):
            return f"query-status: {why}", spent
        held = host_delay(t, time.monotonic()) if host_delay is not None else None
        if spent >= MAIN_LOOP_PATIENCE_S:
            return (f"query-status: QMP timed out {tries} times in {spent:.0f}s (the host held QEMU back "
                    f"{(held or 0) / 1e3:.1f}s of the last)"), spent
        bound = min(max(bound * 3, 2 * (held or 0) / 1e3), MAIN_LOOP_PATIENCE_S - spent)


def sample(gdb_socket: Path, qmp: QMP, out_dir: Path, target: Target, count: int = 3, interval: float = 0.2,
           resume: bool = False, prepared: Prepared | None = None, console: Path | None = None,
           qemu_gone: Callable[[], str | None] | None = None,
           host_delay: Callable[[float, float], float | None] | None = None) -> Samples:
    """count samples of every vCPU, interval seconds of guest run apart.
    With resume the guest keeps running afterwards (a possible false alarm).
    A prepared GDB is used when it started; either way it is taken. console:
    the guest's console log, whose size each sample records. qemu_gone: what
    ended QEMU (killed, stopped from outside) or None, asked while GDB waits.
    host_delay: (t0, t1) -> ms the host held QEMU back then, to wait on a busy one."""
    out_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    result = Samples()
    # QMP and the gdbstub share QEMU's main loop: when one is dead, GDB would wait out its timeouts
    why, bound = main_loop_answers(qmp, host_delay, qemu_gone)
    if why:
        result.errors.append(f"qmp: {why} (QEMU's main loop, which also serves the gdbstub, is not answering: "
                             "GDB not tried)")
        if prepared is not None:
            prepared.close()
        result.seconds = round(time.monotonic() - t0, 2)
        return result
    try:
        result.dumps = sample_with_gdb(gdb_socket, out_dir, target, count, interval, resume, prepared, console,
                                       qemu_gone)
        result.method = "gdb"
    except DebugError as e:
        result.errors.append(f"gdb: {e}")
        syms = Kallsyms.load(target.symbols) if target.symbols and target.symbols.exists() else None
        lay = json.loads(target.layout.read_text()) if target.layout and target.layout.exists() else None
        try:
            qmp.cmd("stop", timeout=bound)  # a GDB that hung may have met a QEMU that did
            for i in range(count):
                if i:
                    qmp.cmd("cont")
                    time.sleep(interval)
                    qmp.cmd("stop")
                result.dumps.append(_with_console(sample_with_qmp(qmp, out_dir, syms, i, target.arch, layout=lay),
                                                  out_dir / f"sample-{i}.json", console))
            result.method = "qmp"
            if resume:
                qmp.cmd("cont")
        except (QMPError, OSError) as e2:
            if rundir.out_of_space(e2):  # the disk under the run is full: not QEMU's fault, the run's end
                raise
            result.errors.append(f"qmp: {e2}")
    result.resumed = resume
    result.seconds = round(time.monotonic() - t0, 2)
    return result
