# SPDX-License-Identifier: GPL-2.0
"""KVM when a guest proves it runs, TCG otherwise, and a message saying which.

/dev/kvm opening proves nothing: on this project's machines it is a shim
whose VMs start and then either abort at the first vCPU reset or spin at
100% without running a single guest instruction. So the first kernel kstall
boots on a host boot is booted under KVM to its agent's hello, bounded by
what a working KVM needs (KSTALL_KVM_PROBE_S, 3 s; a Debian kernel reaches
its agent in under a second there), not by TCG's boot time. That decides for
the whole host boot: where no guest ran, every later run uses TCG without
probing again; where one did, each further kernel is confirmed once the same
way. The decisions are kept per host boot (harness/base/kvm_decisions.py),
under a lock, so guests started side by side probe once.
"""
from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Callable

from harness.analysis.outcome import OutcomeKind
from harness.base import arch, paths
from harness.base.kvm_decisions import HOST, decisions
from harness.guest import machine
from harness.guest.vm import VM, VMConfig, VMError, kvm_available
from harness.guest.watch import Limits, Watch
from images.kernels.kernel import Kernel

PROBE_BOUND_S = float(os.environ.get("KSTALL_KVM_PROBE_S", "3"))


def probe(cfg: VMConfig, bound: float = PROBE_BOUND_S) -> tuple[bool, str, float]:
    """Boot cfg (accel kvm) to its agent's hello within bound seconds:
    (whether it got there, why not, seconds taken)."""
    t0 = time.monotonic()
    try:
        with VM(cfg) as vm:
            vm.start()
            out = Watch(vm, Limits(boot_timeout=bound, run_timeout=bound)).watch()
    except VMError as e:
        return False, str(e), time.monotonic() - t0
    seconds = time.monotonic() - t0
    if out.kind == OutcomeKind.DONE:
        return True, f"a guest reached its agent under KVM in {seconds:.1f}s", seconds
    if out.kind == OutcomeKind.BOOT_FAILURE and out.detail.startswith("no guest agent"):
        return False, f"a guest started under KVM but did not reach its agent within {bound:g}s", seconds
    return False, f"{out.kind}: {out.detail}", seconds


def probe_config(kernel: Kernel, initrd: Path, log_dir: Path) -> VMConfig:
    """The probe guest: the run's kernel on the run's machine, one vCPU, no reproducer."""
    m = machine.for_kernel(kernel)
    return VMConfig(kernel=m.boot_file(kernel), initrd=initrd, log_dir=log_dir, cpus=1, accel="kvm", machine=m.name,
                    arch=m.arch, cmdline=m.kernel_cmdline("kstall.repro=none"))


# the accelerators a user names that need no probe to be given (KVM's must work first)
BY_NAME = ("tcg", "tcg-single")


def likely(requested: str) -> str:
    """The accelerator a run of a kernel of the host's architecture will
    most likely get, before its kernel is known: for sizing a run, never for
    judging one (its record says what it ran under)."""
    if requested == "kvm" or requested in BY_NAME:
        return requested
    if not kvm_available()[0]:
        return "tcg"
    with decisions() as known:
        host = known.get(HOST)
    return "tcg" if host is not None and not host["works"] else "kvm"


def choose(requested: str, kernel: Kernel, initrd: Path, echo: Callable[[str], None]) -> str:
    if requested in BY_NAME:
        return requested
    if kernel.arch != arch.host().name:  # KVM runs guests of the host's own architecture only
        if requested == "kvm":
            raise VMError(f"--accel kvm: a {kernel.arch} kernel on an {arch.host().name} host runs under TCG only")
        return "tcg"
    ok, why = kvm_available()
    if not ok:
        if requested == "kvm":
            raise VMError(f"--accel kvm: {why}")
        echo(f"KVM unavailable ({why}): using TCG")
        return "tcg"
    with decisions() as known:
        host = known.get(HOST)
        if host is None or (host["works"] and kernel.key.name not in known):
            what = "whether KVM runs guests on this host" if host is None else "KVM with this kernel"
            echo(f"probing {what} (a boot bounded by {PROBE_BOUND_S:g}s)")
            works, detail, seconds = probe(probe_config(kernel, initrd, paths.cache_dir() / "kvm-probe"))
            known[kernel.key.name] = {"works": works, "detail": detail, "seconds": round(seconds, 1)}
            if host is None:
                host = known[HOST] = known[kernel.key.name]
            if not works:
                echo(f"{detail}: using TCG")
        decided = known[HOST] if not host["works"] else known[kernel.key.name]
    if decided["works"]:
        return "kvm"
    if requested == "kvm":
        raise VMError(f"--accel kvm: KVM did not run a guest here ({decided['detail']})")
    return "tcg"
