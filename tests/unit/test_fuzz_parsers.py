# SPDX-License-Identifier: GPL-2.0
"""Every host parser of guest data against hostile input: random bytes, real
recorded lines mutated, numbers too long for int(), endless lines, a 100 MB
stream. None may raise, memory and time stay bounded, and none writes a file
(an audit hook sees every open, mkdir, rename and removal while they run).

The seed is fixed: a failure reproduces. FUZZ_INPUTS (default 10000) is the
number of inputs per parser."""
from __future__ import annotations

import os
import random
import sys
import time
import tracemalloc
from pathlib import Path
from types import SimpleNamespace

import pytest
from recorded import FIXTURES, clang_btf

from harness.analysis import console, kernel_layout, kernel_waits, latency, reach, starvation, threads
from harness.analysis.kallsyms import Kallsyms
from harness.analysis.ktap import KV, Ktap
from harness.base import reproducers, untrusted
from harness.guest.streams import BlobReader, LineReader
from harness.guest.watch import Limits, Watch
from images.kernels import guestfs_child, modules
from images.kernels.kernel import SpecError

N = int(os.environ.get("FUZZ_INPUTS", "10000"))
SEED = 20261123
# each parser's whole run, in this process's CPU time (a parser gone quadratic, not a
# busy host: make test runs the unit tests at a low priority beside the guests)
TIME_BOUND_S = 60
MEMORY_BOUND = 64 << 20  # peak Python allocation while 100 MB go through a reader

REAL = [l for f in [*(FIXTURES / "consoles").glob("*.log"), *(FIXTURES / "agent-logs").glob("*.log"),
                    FIXTURES / "signal-malloc-7.3.4-glibc" / "agent.log"]
        for l in f.read_text(errors="replace").splitlines()[:400]]
TOKENS = ["KSTALL thread ", "KSTALL hello ", "HB ", "# progress count=", "# result count=", "# stats path=nmi cpu=",
          "# hist path=nmi cpu=", "# first-stall count=", "ok ", "not ok ", "# SKIP ", "# # ", "tid=", "syscall=",
          "kstack=", "RIP: 0010:", "Call Trace:", "</TASK>", " ? ", "+0x1f/0x40", "[<ffffffff81000000>] ",
          "[    1.000000] ", "INFO: task ", " blocked for more than ", "BUG: soft lockup - CPU#", "rcu: INFO: ",
          "csd: Detected non-responsive CSD lock (#", "{func}", "%s", "\x00", "\x1b[0m", "\ufffd", "9" * 5000,
          "-" + "1" * 4400, "f" * 300, "=" * 50, ",", "KSTALL hist sys_exit { id: sys_", "} hitcount: ",
          "KSTALL modprobe status=", " name=", "KSTALL health ", "secs=", "starved_s=", "killed=9:", "oom_kills=",
          # what a hostile package or image names: paths that climb, absolute ones, releases that are paths
          "../", "..", "/", "./", "/etc/shadow", "lib/modules/", "kernel/", ".ko:", ".ko.xz", "vmlinuz-",
          "menuentry '", "' {\n", "\n}\n", "submenu '", "linux /boot/vmlinuz-../../../etc ", "set default=",
          "saved_entry=", "title ", "options ", "version ", "\n"]


def lines(rng: random.Random) -> list[str]:
    """N inputs: real lines, mutated real lines, token soup, random bytes."""
    out = []
    for i in range(N):
        kind = i % 4
        if kind == 0:
            out.append(rng.choice(REAL))
        elif kind == 1:
            s = list(rng.choice(REAL))
            for _ in range(rng.randint(1, 6)):
                pos = rng.randint(0, len(s))
                s[pos:pos + rng.randint(0, 5)] = rng.choice(TOKENS)
            out.append("".join(s))
        elif kind == 2:
            out.append("".join(rng.choice(TOKENS) for _ in range(rng.randint(1, 12))))
        else:
            out.append(rng.randbytes(rng.randint(0, 300)).decode(errors="replace"))
    return out


WRITES: list | None = None  # what the code under test wrote; None: not watching
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC


def _audit(event: str, args: tuple) -> None:
    if WRITES is None:
        return
    if event == "open" and ((isinstance(args[1], str) and any(c in args[1] for c in "wax+"))
                            or (args[1] is None and isinstance(args[2], int) and args[2] & _WRITE_FLAGS)):
        WRITES.append((event, args[0]))
    elif event in ("os.mkdir", "os.rename", "os.remove", "os.rmdir", "os.symlink", "os.link", "os.truncate"):
        WRITES.append((event, args[0]))


sys.addaudithook(_audit)


@pytest.fixture(autouse=True)
def no_file_written():
    global WRITES
    WRITES = []
    try:
        yield
        assert WRITES == [], f"a parser of guest data wrote files: {WRITES[:5]}"
    finally:
        WRITES = None


def watch() -> Watch:
    return Watch(SimpleNamespace(console=None, agent=None, syms=None, started_at=0.0,
                                 cfg=SimpleNamespace(cpus=2)), Limits(stalls=1), patterns=None)


def run_bounded(fn, inputs) -> None:
    t0 = time.process_time()
    for x in inputs:
        fn(x)
    assert time.process_time() - t0 < TIME_BOUND_S


PARSERS = {
    "console.match_line": lambda pats: (lambda l: console.match_line(l, pats)),
    "console.scan": lambda pats: (lambda l: [r.to_json() for r in console.scan(l + "\n" + l, pats)]),
    "console.report_function": lambda pats: (lambda l: console.report_function(
        ["x", *l.split("\x00")] * 3, "rip", pats.skip)),
    "watch.Ktap": lambda pats: Ktap().feed,
    "watch.agent_line": lambda pats: (lambda w: lambda l: w.agent.feed(l, 1.0))(watch()),
    "watch.console_line": lambda pats: (lambda w: lambda l: (w.console.feed(l, 1.0), w.summary()))(watch()),
    "latency.parse": lambda pats: (lambda l: latency.parse([l, l.replace("hist", "stats")],
                                                           reproducers.load("bpf-ringbuf").stall,
                                                           {"nmi_max_ns": l[:20]})),
    "threads.from_agent_line": lambda pats: (lambda l: threads.from_agent_line("KSTALL thread " + l)),
    # the agent's account of a syzkaller program: a count of 5,000 digits once raised ValueError in int()
    "reach.parse": lambda pats: (lambda l: reach.parse([
        l, f"KSTALL hist sys_exit {{ id: sys_x [ {l[-9:]}], ret: {l[:40]} }} hitcount: {l}",
        "KSTALL modprobe status=" + l])),
    "starvation.judge": lambda pats: (lambda l: starvation.judge(dict(KV.findall("KSTALL health " + l)))),
    "threads.parse_syscall": lambda pats: threads.parse_syscall,
    "threads.parse_kstack": lambda pats: threads.parse_kstack,
    "symbols.Kallsyms": lambda pats: (lambda l: Kallsyms.parse(l + "\n" + l).lookup(0xffffffff81000000)),
    "watch.LineReader": lambda pats: (lambda r: lambda l: r.feed(l.encode(errors="replace")))(LineReader(None, 4096)),
    "watch.BlobReader": lambda pats: (lambda r: lambda l: r.feed(l.encode(errors="replace")))(BlobReader(None)),
    "untrusted.relative_path": lambda pats: _stays_inside,
    "untrusted.release": lambda pats: _is_a_name,
    "modules.parse_dep": lambda pats: _dep_stays_inside,
    "guestfs_child.grub_default": lambda pats: (lambda l: guestfs_child.grub_default(
        l.replace("\\n", "\n"), {"saved_entry": l[:40]})),
    "guestfs_child.read_env+bls_entries": lambda pats: (lambda l: (guestfs_child.read_env(_image(l), ("/e",)),
                                                                   guestfs_child.bls_entries(_image(l)))),
}


def _stays_inside(text: str) -> None:
    """A member name or modules.dep path: None, or relative with no '..'."""
    p = untrusted.relative_path(text)
    assert p is None or (not p.startswith("/") and ".." not in p.split("/") and "\0" not in p), (text, p)


def _is_a_name(text: str) -> None:
    r = untrusted.release(text)
    assert r is None or ("/" not in r and ".." not in r and r not in (".", "")), (text, r)


def _dep_stays_inside(text: str) -> None:
    try:
        deps = modules.parse_dep(text.replace("\\n", "\n"), Path("modules.dep"))
    except SpecError as e:
        assert "names a file outside the module tree" in str(e)
        return
    for path, needs in deps.values():
        for p in (path, *needs):
            _stays_inside(p)
            assert untrusted.relative_path(p) == p


def _image(text: str) -> SimpleNamespace:
    """A disk image whose every file holds text (grubenv, BLS entries)."""
    return SimpleNamespace(is_file=lambda p: True, is_dir=lambda p: True, cat=lambda p: text,
                           ls=lambda p: ["a.conf", text[:30] + ".conf"])


@pytest.mark.parametrize("name", list(PARSERS))
def test_parser_survives_hostile_input(name):
    pats = console.load_patterns()
    fn = PARSERS[name](pats)
    run_bounded(fn, lines(random.Random(f"{SEED}-{name}")))


@pytest.mark.parametrize("reader", ["line", "blob", "watch"])
def test_100_mb_endless_stream_stays_bounded(reader):
    """100 MB in 64 KiB chunks, without a newline or with one every 10 MB;
    peak memory stays under MEMORY_BOUND and the time under TIME_BOUND_S."""
    chunk = bytes(random.Random(SEED).randbytes(1 << 16)).replace(b"\n", b"x")
    w = watch()
    r = LineReader(None, 4096) if reader != "blob" else BlobReader(None)
    tracemalloc.start()
    t0 = time.process_time()
    try:
        for i in range(1600):  # 1600 x 64 KiB = 100 MiB
            data = chunk if i % 160 else b"\n" + chunk
            if reader == "watch":
                for line in r.feed(data):
                    w.agent.feed(line, 1.0)
                    w.console.feed(line, 1.0)
            else:
                r.feed(data)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    print(f"{reader}: peak {peak / (1 << 20):.1f} MiB for 100 MiB in")
    assert peak < MEMORY_BOUND, f"peak {peak >> 20} MiB"
    assert time.process_time() - t0 < TIME_BOUND_S


@pytest.fixture(scope="module")
def real_btf(tmp_path_factory) -> bytes:
    global WRITES
    saved, WRITES = WRITES, None  # compiling the blob writes; what is tested below must not
    try:
        return clang_btf(tmp_path_factory.mktemp("btf"))
    finally:
        WRITES = saved


def test_btf_and_the_kernel_layout_survive_a_hostile_blob(real_btf):
    """The guest sends its BTF: a real blob mutated (bytes overwritten, cut,
    header lengths and type ids changed) gives a layout with parts missing,
    never an exception, and in bounded time."""
    rng = random.Random(f"{SEED}-btf")
    symbols = ("ffffffff8283bfc0 D __per_cpu_offset\nffffffff83c6db00 d cfd_data\n"
               "ffffffff83c6dbc0 D rqspinlock_held_locks\n")

    def mutated(_: int) -> bytes:
        b = bytearray(real_btf)
        for _ in range(rng.randint(1, 8)):
            how = rng.randrange(4)
            if how == 0:
                pos = rng.randrange(len(b))
                b[pos:pos + 4] = rng.randbytes(4)
            elif how == 1:
                del b[rng.randrange(len(b)):]
            elif how == 2:  # a header length or offset
                pos = rng.choice([8, 12, 16, 20])
                b[pos:pos + 4] = rng.choice([0, 1, 0xFFFFFFFF, len(b), rng.getrandbits(32)]).to_bytes(4, "little")
            else:  # a type reference pointing anywhere, itself included
                pos = rng.randrange(24, max(25, len(b) - 4))
                b[pos:pos + 4] = rng.randrange(0, 64).to_bytes(4, "little")
            if not b:
                break
        return bytes(b)

    def one(i: int) -> None:
        lay = kernel_layout.layout(mutated(i), symbols)
        assert isinstance(lay, dict) and "missing" in lay
        if "csd" in lay:  # a layout that came through is walked without surprises too
            kernel_waits.read(lambda a, n: rng.randbytes(n) if rng.random() < 0.9 else None, lay, 4)
    run_bounded(one, range(N // 5))


def test_the_kernels_records_read_from_hostile_memory_stay_bounded():
    """Memory a hostile guest fills: counts, masks and pointers of any value."""
    rng = random.Random(f"{SEED}-waits")
    lay = {"per_cpu_offset": 0xFFFFFFFF8283BFC0, "csd": {"variable": 0x1000, "csd": 0, "mask": 8,
           "mask_pointer": True, "flags": 8, "locked": 1},
           "rqspinlock": {"variable": 0x2000, "count": 0, "locks": 8, "max": 31}}

    def one(_: int) -> None:
        out = kernel_waits.read(lambda a, n: rng.randbytes(n) if rng.random() < 0.95 else None, lay, 64)
        waits = kernel_waits.Waits.from_samples([{"waits": out}, {"waits": rng.choice([out, {}, [], "x"])}])
        for n in range(64):
            if (lock := waits.spun_lock(n, 0)) is not None:
                waits.holders(lock, n, 0, set())
        assert all(len(v) <= 31 for v in out.get("rqspinlock", {}).values())
    run_bounded(one, range(N // 20))


def test_a_guest_that_sends_millions_of_blob_headers_costs_no_memory():
    """A root program may open the symbols port whenever the agent is not
    sending on it: 7 MiB of 'A 0' headers kept 2,000,000 refused names
    (116 MiB of host memory). The first few are named, the rest counted."""
    r = BlobReader(None)
    chunk = b"A 0\n" * 20_000
    for _ in range(10):
        r.feed(chunk)
    assert r.refused_count == 200_000 and len(r.refused) == BlobReader.MAX_REFUSED
    assert not r.buf and not r.blobs
