# SPDX-License-Identifier: GPL-2.0
"""What one attempt's guest runs, and how it is watched: the kernel command
line (the same for every reproducer, so that one snapshot serves them all),
the GO line's parameters, the time box and the watch's limits."""
from __future__ import annotations

import math
import os
import shlex
from dataclasses import dataclass
from pathlib import Path

from harness.analysis import pmiss, starvation
from harness.base import guest_env, reproducers
from harness.drivers.case import Case
from harness.drivers.options import FREEZE_CEILING, FREEZE_FLOOR, Options
from harness.guest import hostfs, machine
from harness.guest.vm import VMConfig
from harness.guest.watch import Limits
from images.kernels.kernel import SpecError


def kernel_cmdline(m: machine.Machine, extra: str) -> str:
    """The same for every reproducer, so that one snapshot of a kernel serves
    them all: what to run comes with the GO at the agent's gate."""
    return m.kernel_cmdline("kstall.gate=1", extra)


def go_params(repro: reproducers.Reproducer, args: list[str], want_syms: bool) -> str:
    """The GO line's parameters (repro/agent/agent.h): what to run, and a fresh RNG
    seed, since every guest restored from one snapshot has the same one."""
    if any("," in a or " " in a for a in args):
        raise SpecError("reproducer arguments may not contain commas or spaces")
    return (f"repro={repro.binary} args={','.join(args)} syms={int(want_syms)} "
            f"seed={os.urandom(32).hex()}")


@dataclass
class Plan:
    """What one attempt's guest runs, and how it is watched."""
    target: int       # passes over the path the reproducer is asked for (0: as many as its time allows)
    duration: float   # its time limit
    cpus: int
    go: str           # the GO line's parameters
    vm: VMConfig
    limits: Limits

    def until(self, count_name: str) -> str:
        """'until 10000 REFRESH cycles or 30s', 'again and again for 3s'"""
        if self.target:
            return f"until {self.target} {count_name} or {self.duration:.0f}s"
        return f"again and again for {self.duration:g}s"


def make_plan(c: Case, opts: Options, out_dir: Path, want_syms: bool) -> Plan:
    repro, disk = c.repro.spec, c.disk
    target = opts.run.count or max(repro.min_count, pmiss.count_for(c.calibration, opts.run.pmiss_target))
    env = guest_env.get(repro.env) if repro.env else None
    duration = opts.run.duration or (env.seconds_for(c.accel) if env else repro.max_seconds)
    extra = " ".join(a for a in (disk.cmdline if disk else "", *c.check.cmdline, opts.guest.cmdline_extra) if a)
    cpus = c.cpus
    m = machine.for_kernel(c.kernel)
    cfg = VMConfig(kernel=m.boot_file(c.kernel), initrd=c.initrd, cmdline=kernel_cmdline(m, extra), log_dir=out_dir,
                   cpus=cpus, memory_mb=c.memory_mb, accel=c.accel, machine=m.name, arch=m.arch,
                   extra_args=disk.qemu_args() if disk else [], host_fs=bool(repro.command), disks=c.disks)
    # a program run for its time (a guest environment's) completes no count to watch: its
    # hangs are the kernel's detectors', a freeze, a task asleep
    stuck_after = math.inf if repro.timebox else opts.run.stuck_after or repro.stuck_after_s
    confirm = env.confirm_for(c.accel, opts.run.hang_after) if env else ()
    # after its time: the kernel's time to report a task asleep then, a candidate's to
    # become a hang (the kill is held meanwhile), and the tasks that do not die their time to
    dying = env.dying_for(c.accel) if env else 0
    after = env.detect_s + max((r.hang_s for r in confirm), default=0) + dying if env else 0
    limits = Limits(boot_timeout=opts.run.boot_timeout, freeze_after=opts.run.freeze_after or FREEZE_CEILING,
                    freeze_floor=None if opts.run.freeze_after else FREEZE_FLOOR,
                    stuck_after=stuck_after, run_timeout=duration + 60 + after,
                    stalls=repro.stall.min_stalls if repro.stall else 0,
                    stall_measure=repro.stall.measure if repro.stall else "",
                    report_ends=env.report_ends if env else (), confirm=confirm,
                    hold_for=duration + env.detect_s if env else math.inf)
    if repro.generic and (opts.run.duration or repro.timebox) and not opts.run.count:
        target = 0  # --duration alone: again and again until the time is up
    go = go_params(repro, [] if repro.command else repro_arguments(repro, opts, target, duration), want_syms)
    go += f" {starvation.rules().go_param()}"
    if repro.generic:  # the agent repeats it: until target runs or the time is up, whichever comes first
        go += f" repeat={target or UNTIL_THE_TIME_IS_UP} seconds={math.ceil(duration)}"
    if env:
        go += f" dying={math.ceil(dying)} detect={math.ceil(env.detect_s)}"
    if repro.sleep_after_s:
        go += f" sleep={math.ceil(repro.sleep_after_s)}"
    if repro.command:  # the user's arguments join the command, which travels hex-encoded
        command = " ".join([repro.command, *(shlex.quote(a) for a in opts.run.repro_args)])
        go += f" hostfs={hostfs.TAG} cmd={command.encode().hex()} cwd={repro.cwd.encode().hex()}"
    return Plan(target, duration, cpus, go, cfg, limits)


def repro_arguments(repro: reproducers.Reproducer, opts: Options, target: int, duration: float) -> list[str]:
    """The reproducer's command line: stop conditions (none for a program
    that knows nothing of kstall), its defaults, the stall threshold from its
    data file, then the user's arguments (which win)."""
    return [*([repro.count_arg, str(target)] if repro.count_arg else []),
            *([repro.duration_arg, f"{duration:g}"] if repro.duration_arg else []),
            *repro.arguments(opts.run.repro_args)]


# the agent's repeat= for "as many runs as the time allows"
UNTIL_THE_TIME_IS_UP = 1 << 62


def ended_by(repro: reproducers.Reproducer, plan: Plan, count: int) -> str:
    """For a program run again and again: which of its limits ended it."""
    if not repro.generic:
        return ""
    if plan.target and count >= plan.target:
        return f"its {plan.target} {repro.count_name} were done before its {plan.duration:g}s were up"
    return f"its {plan.duration:g}s were up" + (f" before its {plan.target} {repro.count_name}" if plan.target else "")
