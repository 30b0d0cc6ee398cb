# SPDX-License-Identifier: GPL-2.0
"""KVM when a boot proves it works, TCG otherwise, and a message saying which.

/dev/kvm existing is not enough (on this project's machines it is a shim that
fails on ordinary kernels), so KVM is used only after a probe boot of the
same kernel reached the agent; the result is cached per kernel and host boot.
"""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Callable

from harness import paths
from harness.vm import VM, VMConfig, VMError, kvm_available
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
    cache = paths.cache_dir() / "kvm-probe.json"
    try:
        known = json.loads(cache.read_text())
    except (OSError, ValueError):
        known = {}
    key = f"{_boot_id()}:{kernel_sha}"
    if key not in known:
        echo("probing KVM with a test boot")
        log_dir = paths.cache_dir() / "kvm-probe"
        t0 = time.monotonic()
        works, detail = _probe(kernel, initrd, log_dir)
        known[key] = {"works": works, "detail": detail, "seconds": round(time.monotonic() - t0, 1)}
        cache.write_text(json.dumps(known, indent=1))
    if known[key]["works"]:
        return "kvm"
    if requested == "kvm":
        raise VMError(f"--accel kvm: the probe boot failed ({known[key]['detail']})")
    echo(f"KVM probe boot failed ({known[key]['detail']}): using TCG")
    return "tcg"
