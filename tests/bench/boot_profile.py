#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0
"""Where a cold TCG boot of a Debian kernel goes, up to the agent's hello
(medians; the kernel cached first).

    tests/bench/boot_profile.py [--kernel debian:7.3.4] [--runs N] [--variants NAME,...]

Each boot is timed on the host from QEMU's start, and split with the
guest's own clock (the agent's first heartbeat carries CLOCK_MONOTONIC):
- firmware: QEMU start to the guest clock's zero (SeaBIOS or qboot, loading
  the kernel and initramfs over fw_cfg, a bzImage's decompression);
- guest: the guest clock's zero to the agent's hello.
One boot with initcall_debug also splits the guest part at `Run /init` and
lists the slowest initcalls. Variants change only what kstall controls:
machine type, firmware, command line.
"""
import argparse
import re
import select
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from harness.drivers import preflight  # noqa: E402
from harness.base import paths, reproducers  # noqa: E402
from harness.drivers.plan import kernel_cmdline  # noqa: E402
from harness.guest import machine as machines  # noqa: E402
from harness.guest.vm import VM, VMConfig  # noqa: E402
from images.guest import initramfs  # noqa: E402
from images.kernels.schemes import resolve  # noqa: E402

QBOOT = "/usr/share/qemu/qboot.rom"
# name -> (machine, extra QEMU arguments, extra kernel command line, PVH boot)
VARIANTS = {
    "kstall (PVH)": (None, [], "", True),
    "bzImage": (None, [], "", False),
    "pc": ("pc", [], "", True),
    "qboot": (None, ["-bios", QBOOT], "", True),
    "pc acpi=off": ("pc", [], "acpi=off", True),  # pc's MP table still lists every CPU
}
STAMP = re.compile(r"^\[\s*(\d+\.\d+)\]")
INITCALL = re.compile(r"initcall (\S+?)(?:\+0x\w+/0x\w+)?(?: \[\S+\])? returned \S+ after (\d+) usecs")


def boot(kernel_file: Path, initrd: Path, machine: str, qemu_args: list[str], cmdline: str,
         timeout: float = 90.0) -> dict:
    """Boot to the agent's first heartbeat; the console lines with host times."""
    with tempfile.TemporaryDirectory() as logs:
        cfg = VMConfig(kernel=kernel_file, initrd=initrd, cmdline=cmdline, log_dir=Path(logs), cpus=2,
                       machine=machine, extra_args=qemu_args)
        lines: list[tuple[float, str]] = []
        with VM(cfg) as vm:
            vm.start()
            t0, bufs, hello = vm.started_at, {vm.console: b"", vm.agent: b""}, None
            deadline = t0 + timeout
            while time.monotonic() < deadline:
                ready, _, _ = select.select(list(bufs), [], [], 0.5)
                now = time.monotonic() - t0
                for s in ready:
                    data = s.recv(65536)
                    if not data:
                        raise RuntimeError(f"QEMU closed its socket: {vm.qemu_log_tail()}")
                    bufs[s] += data
                    *done, bufs[s] = bufs[s].split(b"\n")
                    for raw in done:
                        line = raw.decode(errors="replace").rstrip("\r")
                        if s is vm.console:
                            lines.append((now, line))
                        elif line.startswith("KSTALL hello"):
                            hello = now
                        elif line.startswith("HB ") and hello is not None:  # HB seq guest-ns progress
                            return timeline(lines, hello, now - int(line.split()[2]) / 1e9)
            raise RuntimeError(f"no hello in {timeout:.0f}s; console ends: {[l for _, l in lines[-3:]]}")


def timeline(lines: list[tuple[float, str]], hello: float, zero: float) -> dict:
    """zero: the host time of the guest clock's zero."""
    stamped = [(float(m.group(1)), l) for _, l in lines if (m := STAMP.match(l))]
    run_init = next((k for k, l in stamped if "Run /init" in l), None)
    calls = [(int(m.group(2)), m.group(1)) for _, l in stamped if (m := INITCALL.search(l))]
    return {"firmware": zero, "guest": hello - zero, "hello": hello, "run_init": run_init,
            "initcalls": sorted(calls, reverse=True)}


def med(runs: list[dict], key: str) -> str:
    xs = [r[key] for r in runs]
    return f"{statistics.median(xs):6.2f}s"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kernel", default="debian:7.3.4")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--variants", default=",".join(VARIANTS), help=f"of: {', '.join(VARIANTS)}")
    ap.add_argument("--cmdline", action="append", default=[], metavar="ARGS",
                    help="also time kstall's boot with these extra kernel arguments (repeatable)")
    ap.add_argument("--top", type=int, default=15, help="initcalls to list")
    a = ap.parse_args()
    kernel = resolve(a.kernel, progress=lambda m: print(m, file=sys.stderr))
    needs = preflight.check(kernel, reproducers.load("perf-refresh"))
    initrd = initramfs.build(paths.guest_dir(kernel.arch), modules=needs.modules)
    variants = {n: VARIANTS[n] for n in a.variants.split(",")} | {f"+{c}": (None, [], c, True) for c in a.cmdline}

    m = machines.for_kernel(kernel)
    profile = boot(m.boot_file(kernel), initrd, m.name, [], kernel_cmdline(m, "initcall_debug ignore_loglevel"))
    print(f"{a.kernel}, one boot with initcall_debug (the console prints all of it: slower than usual): "
          f"firmware {profile['firmware']:.2f}s, kernel to `Run /init` {profile['run_init']:.2f}s, "
          f"then to the agent's hello {profile['guest'] - profile['run_init']:.2f}s")
    total = sum(us for us, _ in profile["initcalls"]) / 1e6
    print(f"  {len(profile['initcalls'])} initcalls, {total:.2f}s in all; the slowest:")
    for us, name in profile["initcalls"][:a.top]:
        print(f"  {us / 1e3:9.1f} ms  {name}")

    runs: dict[str, list[dict]] = {n: [] for n in variants}
    for _ in range(a.runs):  # interleaved: every variant sees the same host
        for name, (machine, qemu_args, extra, pvh) in variants.items():
            runs[name].append(boot(m.boot_file(kernel) if pvh else kernel.vmlinuz, initrd, machine or m.name,
                                   qemu_args, kernel_cmdline(m, extra)))
    print(f"{a.kernel}, QEMU start to the agent's hello, median of {a.runs}:")
    print(f"  {'variant':<28} {'firmware':>8} {'guest':>8} {'hello':>8}")
    for name, rs in runs.items():
        print(f"  {name:<28} {med(rs, 'firmware')} {med(rs, 'guest')} {med(rs, 'hello')}")
    base = statistics.median(r["hello"] for r in runs[next(iter(runs))])
    for name, rs in list(runs.items())[1:]:
        print(f"  ratio {name} / {next(iter(runs))}: {statistics.median(r['hello'] for r in rs) / base:.2f}")


if __name__ == "__main__":
    main()
