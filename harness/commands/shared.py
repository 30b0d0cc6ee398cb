# SPDX-License-Identifier: GPL-2.0
"""What every command of `kstall` shares: its messages on stderr, the exit
statuses a usage or kstall's own error gives, and the option groups several
commands take (the guest, the run, the hand-over, a kernel build), read
back into the drivers' options."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness.analysis.verdict import VerdictKind
from harness.base import reproducers

EXIT_USAGE = 2
EXIT_ERROR = VerdictKind.ERROR.exit_code
# --accel: tcg-single is a row of every architecture's [accel] table (arches.toml), as kvm and tcg are
ACCELS = ("auto", "kvm", "tcg", "tcg-single")


def echo_stderr(msg: str) -> None:
    if msg.startswith("\r") or msg == "\n":
        sys.stderr.write(msg)
    else:
        sys.stderr.write(f"kstall: {msg}\n")
    sys.stderr.flush()


def repro_help() -> str:
    return (f"a built-in ({', '.join(reproducers.names())}); your own C file (built static, cached), executable "
            "(a dynamic one goes in with its libraries), data file NAME.toml or its directory (with its "
            "signatures/ and calibration/); or run:'CMD ARGS', a command run in the guest over the host's root "
            "filesystem (read-only, writes to a tmpfs). A program that knows nothing of kstall is run again and "
            "again (--repeat/--duration), each completed run a pass. A syzkaller C reproducer (its header says "
            "so, or syz:FILE.c) runs as syzbot runs it, for its time, judged against syzbot's title; "
            "syzbot:ID fetches a bug's reproducer and record from syzbot's dashboard")

def arch_choices() -> list[str]:
    """--arch's names: kstall's (uname -m) and Debian's for each architecture."""
    from harness.base import arch
    return [n for name in arch.names() for n in dict.fromkeys((name, arch.get(name).debian))]


def arch_named(name: str | None) -> str | None:
    """--arch's value as kstall names it (arm64 -> aarch64)."""
    from harness.base import arch
    return arch.named(name).name if name else None


def add_vm_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("guest")
    g.add_argument("--arch", choices=arch_choices(), help="the kernel's architecture: debian:VERSION fetches "
                   "that architecture's package (debian:6.16.12 --arch arm64 is debian:6.16.12-arm64); other "
                   "kernels say their own, which must be this one (default: the kernel's; debian: amd64)")
    g.add_argument("--cpus", type=int, help="vCPUs (default: the reproducer's, 2 for perf-refresh)")
    g.add_argument("--memory", type=int, metavar="MB", help="guest memory (default 1024; a syzkaller "
                   "reproducer's: 2048, syzbot's smallest machine)")
    g.add_argument("--accel", choices=ACCELS, default="auto",
                   help="auto: KVM if a probe boot proves it works, else TCG (default); tcg-single: one host "
                   "thread runs every vCPU in turn, each for up to 100 ms, which holds a vCPU off inside a race's "
                   "window the way a busy host does (a clean run under plain TCG on a quiet host is weak evidence "
                   "for such a race)")
    g.add_argument("--vmlinux", type=Path, help="vmlinux with DWARF: GDB shows inlined frames")
    g.add_argument("--cmdline", default="", help="extra kernel command line")
    g.add_argument("--no-snapshot", action="store_true",
                   help="boot cold: neither restore nor save the kernel's guest at the agent's gate")
    r = p.add_argument_group("run")
    r.add_argument("--duration", type=float, help="upper bound on the reproducer's run, seconds (a program "
                   "run as it is: run it again and again until then)")
    r.add_argument("--count", "--repeat", type=int, help="stop after this many passes over the path; for "
                   "a program run as it is, how many times to run it, or fewer if --duration ends it first "
                   "(default: the reproducer's minimum, or more if --pmiss needs it; with --duration alone, "
                   "as many as the time allows)")
    r.add_argument("--pmiss", type=float, help="target P(miss) for NOT_REPRODUCED (default 1e-6 where the "
                   "reproducer is calibrated; given, a run whose P(miss) is unknown does not meet it)")
    r.add_argument("--attempts", type=int, default=2, help="attempts when an emulator fault spoils a run (default 2)")
    r.add_argument("--freeze-after", type=float, help="heartbeat silence that means a freeze (s); default: 0.3 s "
                   "plus what the host held the guest back by meanwhile, at most 0.8 s")
    r.add_argument("--stuck-after", type=float, help="progress-count silence that means stuck CPUs (s)")
    r.add_argument("--hang-after", type=float, metavar="S", help="a syzkaller program's kernel report (a hung "
                   "task, a soft lockup, an RCU stall) is a hang once what it reports was stuck S seconds (default: "
                   "syzbot's detector's time, scaled for the accelerator: 280 s for a hung task under TCG); "
                   "one that ends sooner is a slow wait")
    r.add_argument("--samples", type=int, default=3, help="GDB samples of every vCPU (default 3)")
    r.add_argument("--results", type=Path, help="results root (default: results/ or $KSTALL_RESULTS)")


def add_handover_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("the hang handed over")
    g.add_argument("--hold", type=float, nargs="?", const=600.0, metavar="SECONDS",
                   help="on a hang, keep the guest stopped after the verdict for `kstall attach RUN` "
                   "(default 600 s; Ctrl-C releases it)")
    g.add_argument("--vmcore", action="store_true", help="on a hang, write the guest's memory and every vCPU's "
                   "registers to RUN/vmcore (an ELF core: `kstall inspect RUN`)")


def add_build_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("build: kernels")
    g.add_argument("--config", action="append", type=Path, default=[], metavar="FRAGMENT",
                   help="kconfig fragment applied after kstall's own (images/kconfig/); repeatable")
    g.add_argument("--debuginfo", action="store_true", help="build with DWARF: GDB shows inlined frames")
    g.add_argument("--jobs", type=int, default=0, help="make -j (default: host cores + 1)")
    g.add_argument("--build-timeout", type=float, default=7200, metavar="S", help="bound on one build (s)")


def add_step_pmiss(p: argparse.ArgumentParser) -> None:
    p.add_argument("--step-pmiss", type=float, default=1e-3, help="P(miss) a clean step must reach (default 1e-3)")


def options_from(a: argparse.Namespace):
    from harness.drivers import options as o
    return o.Options(
        kernel=o.KernelOptions(build=build_options_from(a), boot_image=getattr(a, "boot_image", False),
                               trust_backing=getattr(a, "trust_backing_files", False), arch=arch_named(a.arch)),
        guest=o.GuestOptions(cpus=a.cpus, memory_mb=a.memory, accel=a.accel, cmdline_extra=a.cmdline,
                             snapshot=not a.no_snapshot),
        run=o.RunOptions(duration=a.duration, count=a.count,
                         pmiss_target=o.DEFAULT_PMISS if a.pmiss is None else a.pmiss, pmiss_given=a.pmiss is not None,
                         repro_args=list(a.repro_args or []), attempts=a.attempts, freeze_after=a.freeze_after,
                         stuck_after=a.stuck_after, hang_after=a.hang_after),
        debug=o.DebugOptions(samples=a.samples, vmlinux=a.vmlinux, hold=getattr(a, "hold", None),
                             vmcore=getattr(a, "vmcore", False)), results_root=a.results)


def build_options_from(a: argparse.Namespace):
    if not hasattr(a, "debuginfo"):
        return None
    from images.kernels.build import BuildOptions
    # --arch: a build: kernel cross-built for that architecture
    return BuildOptions(fragments=list(a.config), debuginfo=a.debuginfo, jobs=a.jobs, timeout=a.build_timeout,
                        arch=arch_named(getattr(a, "arch", None)) or "")
