# SPDX-License-Identifier: GPL-2.0
"""`kstall symbols`: boot a kernel once just to capture its text symbols."""
from __future__ import annotations

import tempfile
import time
from pathlib import Path

from harness.analysis import retry
from harness.analysis.outcome import OutcomeKind
from harness.analysis.retry import Retry
from harness.base import leftovers
from harness.drivers import preflight
from harness.drivers.case import ensure_guest
from harness.guest import accel, machine
from harness.guest.vm import VM, VMConfig
from harness.guest.watch import Limits, Watch
from images.guest import initramfs
from images.kernels import symcache
from images.kernels.kernel import Kernel


def capture(kernel: Kernel, echo, accel_mode: str = "auto") -> dict:
    """The kernel's symbols, from one boot; an emulator fault (TCG's, seen on
    a busy host) gets one more boot, as a run's attempt does, on the
    accelerator a run's next attempt would take (retry.NEXT_ACCEL)."""
    initrd = initramfs.build(ensure_guest(echo, kernel.arch), modules=preflight.check(kernel, None).modules)
    kind = accel.choose(accel_mode, kernel, initrd, echo)
    try:
        return _capture(kernel, initrd, kind, echo)
    except EmulatorFault as e:
        kind = retry.accel_after(Retry.EMULATOR_FAULT, kind)
        echo(f"{e}: booting once more ({kind})")
        return _capture(kernel, initrd, kind, echo)


class EmulatorFault(RuntimeError):
    """A capture the emulator, not the kernel, cut short."""


def _capture(kernel: Kernel, initrd: Path, kind: str, echo) -> dict:
    m = machine.for_kernel(kernel)
    with tempfile.TemporaryDirectory(prefix="kstall-syms-") as logs:
        leftovers.mark(Path(logs))  # a killed kstall's is swept by the next
        cfg = VMConfig(kernel=m.boot_file(kernel), initrd=initrd, log_dir=Path(logs), cpus=1, accel=kind, arch=m.arch,
                       machine=m.name, cmdline=m.kernel_cmdline("kstall.repro=none", "kstall.syms=1"))
        with VM(cfg) as vm:
            echo(f"booting {kernel.canonical} to capture /proc/kallsyms")
            vm.start()
            w = Watch(vm, Limits(boot_timeout=120, run_timeout=60), want_syms=True)
            out = w.watch()
            # what QEMU wrote before it went is still in the socket: read to its end, not to QEMU's
            deadline = time.monotonic() + 10
            while not w.syms.complete(symcache.LAST_BLOB) and not w.syms.eof and time.monotonic() < deadline:
                w.syms.read()
                time.sleep(0.01)
    if not w.syms.complete(symcache.LAST_BLOB):
        error = EmulatorFault if out.kind == OutcomeKind.INFRA else RuntimeError
        raise error(f"no symbols arrived ({out.kind}: {out.detail})")
    path = symcache.store(kernel.key, w.syms.blobs)
    info = w.agent.syms_info
    return {"path": path, "lines": int(info.get("lines", 0)), "bytes": len(w.syms.blobs["KALLSYMS"]),
            "data_lines": int(info.get("data_lines", 0)), "btf_bytes": len(w.syms.blobs["BTF"]),
            "guest_ms": int(info.get("ms", 0)),
            "capture_s": w.syms.arrived[symcache.LAST_BLOB] - (w.agent.hello_at or 0)}
