# SPDX-License-Identifier: GPL-2.0
"""KVM when a boot proves it works, TCG otherwise, and a message saying which.

/dev/kvm existing is not enough (on this project's machines it is a shim that
fails on ordinary kernels), so KVM is used only after a probe boot of the
same kernel reached the agent; the result is cached per kernel and host boot.
"""
from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Callable

from harness import paths, procs
from harness.vm import QEMU, VM, VMConfig, VMError, kvm_available
from harness.watch import Limits, Watch


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return "unknown"


def _probe(kernel: Path, initrd: Path, log_dir: Path) -> tuple[bool, str]:
    cfg = VMConfig(kernel=kernel, initrd=initrd, log_dir=log_dir, cpus=1, accel="kvm",
                   cmdline="console=ttyS0 nokaslr quiet panic=-1 kstall.repro=none")
    try:
        with VM(cfg) as vm:
            vm.start()
            out = Watch(vm, Limits(boot_timeout=60, run_timeout=30)).watch()
    except VMError as e:
        return False, str(e)
    return (out.kind == "done"), out.detail


def _known() -> dict:
    try:
        return json.loads((paths.cache_dir() / "kvm-probe.json").read_text())
    except (OSError, ValueError):
        return {}


def _remember(key: str, works: bool, detail: str, seconds: float) -> None:
    known = _known()
    known[key] = {"works": works, "detail": detail, "seconds": round(seconds, 1)}
    paths.cache_dir().mkdir(parents=True, exist_ok=True)
    (paths.cache_dir() / "kvm-probe.json").write_text(json.dumps(known, indent=1))


def qemu_starts_with_kvm() -> tuple[bool, str]:
    """Whether QEMU can even create a KVM vCPU here: for programs that start
    their own QEMU with KVM when /dev/kvm opens (libguestfs), where a kstall
    probe boot is not possible. The shim on this project's machines aborts
    QEMU at the first vCPU reset, before the guest runs, so a stopped VM that
    is still up after a second is enough. Cached per host boot."""
    ok, why = kvm_available()
    if not ok:
        return False, why
    key = f"{_boot_id()}:qemu-start"
    known = _known()
    if key not in known:
        t0 = time.monotonic()
        try:
            p = procs.run_bounded([QEMU, "-nodefaults", "-no-user-config", "-display", "none", "-S",
                                   "-monitor", "none", "-serial", "none", "-accel", "kvm", "-cpu", "max",
                                   "-machine", "q35"], timeout=1.5)
            works, detail = False, " | ".join(p.stderr.strip().splitlines()[-2:]) or f"exit {p.returncode}"
        except subprocess.TimeoutExpired:
            works, detail = True, "a stopped KVM VM started"
        except OSError as e:
            works, detail = False, str(e)
        _remember(key, works, detail, time.monotonic() - t0)
        known = _known()
    return known[key]["works"], known[key]["detail"]


def choose(requested: str, kernel_sha: str, kernel: Path, initrd: Path,
           echo: Callable[[str], None]) -> str:
    if requested == "tcg":
        return "tcg"
    ok, why = kvm_available()
    if not ok:
        if requested == "kvm":
            raise VMError(f"--accel kvm: {why}")
        echo(f"KVM unavailable ({why}): using TCG")
        return "tcg"
    key = f"{_boot_id()}:{kernel_sha}"
    known = _known()
    if key not in known:
        echo("probing KVM with a test boot")
        t0 = time.monotonic()
        works, detail = _probe(kernel, initrd, paths.cache_dir() / "kvm-probe")
        _remember(key, works, detail, time.monotonic() - t0)
        known = _known()
    if known[key]["works"]:
        return "kvm"
    if requested == "kvm":
        raise VMError(f"--accel kvm: the probe boot failed ({known[key]['detail']})")
    echo(f"KVM probe boot failed ({known[key]['detail']}): using TCG")
    return "tcg"
