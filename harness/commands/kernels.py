# SPDX-License-Identifier: GPL-2.0
"""`kstall kernels`, `symbols` and `doctor`: the kernels kstall can fetch
and has, their symbols and debug info, and what this host can do."""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from harness.commands.shared import (ACCELS, EXIT_ERROR, EXIT_USAGE, arch_choices, arch_named, echo_stderr)
from images.kernels import schemes
from images.kernels.kernel import SpecError


def cmd_kernels(a: argparse.Namespace) -> int:
    from images.kernels import debian
    try:
        from harness.base import arch
        row = arch.get(arch_named(a.arch) or arch.DEFAULT)
        rows = debian.available(progress=echo_stderr, arch=row.debian)
    except SpecError as e:
        echo_stderr(f"error: {e}")
        return EXIT_ERROR
    if not a.available:
        rows = [(k, c) for k, c in rows if c]
    # the flavour named as the architecture's, and its variants (cloud-amd64, rt-arm64, powerpc64le-64k)
    plain = row.flavour
    rows = [(k, c) for k, c in rows if k.flavour == plain or (a.all_flavours and plain in k.flavour.split("-"))]
    if a.json:
        print(json.dumps([{"spec": k.short_spec, "canonical": k.canonical, "package": k.package,
                           "image_package": k.image_package, "version": k.version, "suite": k.suite,
                           "cached": c} for k, c in rows], indent=1))
        return 0
    print(f"{'spec':<28} {'package':<40} {'debian version':<20} {'suite':<18} cached")
    for k, c in rows:
        print(f"{k.short_spec:<28} {k.package:<40} {k.version:<20} {k.suite:<18} {'yes' if c else ''}")
    if not rows:
        print(f"no {plain} kernels in Debian's suites" if a.available else
              "no kernels cached yet; `kstall kernels --available` lists what debian: can fetch")
    return 0


def cmd_symbols(a: argparse.Namespace) -> int:
    from harness.drivers import symbols
    from images.kernels import debuginfo, symcache
    try:
        kernel = schemes.resolve(a.kernel, progress=echo_stderr)
        if a.debuginfo:
            f = debuginfo.fetch(kernel, None if a.debuginfo is True else Path(a.debuginfo), echo_stderr)
            print(f"{f.vmlinux} (build ID {f.build_id}" + (", cached)" if f.cached else
                  f"; {f.read_mb:.0f} MB of {f.package} read in {f.seconds:.1f}s)"))
            return 0
    except SpecError as e:
        echo_stderr(f"error: {e}")
        return EXIT_ERROR
    path = symcache.cached(kernel.key)
    if path and not a.refresh:
        print(f"{path} (cached, {sum(1 for _ in open(path))} text symbols)")
        return 0
    if path:
        path.unlink()
    t0 = time.monotonic()
    try:
        info = symbols.capture(kernel, echo_stderr, a.accel)
    except Exception as e:  # noqa: BLE001 - report any capture failure plainly
        echo_stderr(f"error: symbol capture failed: {e}")
        return EXIT_ERROR
    print(f"{info['path']} ({info['lines']} text symbols, {info['bytes'] / 1e6:.1f} MB; {info['data_lines']} "
          f"variables; BTF {info['btf_bytes'] / 1e6:.1f} MB; capture {info['capture_s']:.2f}s after the guest came up, "
          f"whole boot {time.monotonic() - t0:.1f}s)")
    return 0


def kernel_parsers(sub) -> None:
    k = sub.add_parser("kernels", help="list cached kernels, or what debian: can fetch")
    k.add_argument("--available", action="store_true", help="every kernel in the Debian suites")
    k.add_argument("--all-flavours", action="store_true", help="include cloud and rt flavours")
    k.add_argument("--arch", choices=arch_choices(), help="the kernels of this architecture (default amd64)")
    k.add_argument("--json", action="store_true")
    k.set_defaults(func=cmd_kernels)

    s = sub.add_parser("symbols", help="capture (or show) a kernel's symbols (text, variables) and BTF from a guest")
    s.add_argument("kernel")
    s.add_argument("--refresh", action="store_true", help="capture again even if cached")
    s.add_argument("--accel", choices=ACCELS, default="auto")
    s.add_argument("--debuginfo", nargs="?", const=True, metavar="FILE",
                   help="fetch the kernel's vmlinux with DWARF instead (for attach and inspect; never needed for "
                   "a verdict): from Debian's -dbg package, streamed, keeping only the vmlinux; or from FILE (a "
                   "vmlinux, a -dbg .deb, a debuginfo .rpm). Checked against the kernel's build ID, cached by it")
    s.set_defaults(func=cmd_symbols, sweeps=True)


def doctor_parser(sub) -> None:
    d = sub.add_parser("doctor", help="what this host can do for kstall, and the fix for what it lacks",
                       description="Checks QEMU and a debugger per guest architecture, KVM (and what kstall "
                       "recorded of it this host boot), the guest programs, libguestfs, crash and drgn, the "
                       "cache and its free disk, Debian's suites and the user. Exit status 1 when something a "
                       "verify needs is missing (each such line says its fix).")
    d.add_argument("--offline", action="store_true", help="do not ask Debian's mirror")
    d.add_argument("--json", action="store_true")
    d.add_argument("--matrix", metavar="FILE", type=Path,
                   help="the guest architectures of this matrix file's kernels are needed too")
    d.add_argument("--packages", action="store_true",
                   help="print only the Debian packages that would mend what is needed and missing (one line, "
                   "empty when none; exit 0), for `apt-get install $(kstall doctor --matrix FILE --packages)`")
    d.set_defaults(func=cmd_doctor)


def cmd_doctor(a: argparse.Namespace) -> int:
    from harness.analysis.expect import MatrixError
    from harness.drivers import doctor
    try:
        needed = doctor.matrix_arches(a.matrix) if a.matrix else set()
        builds_c = doctor.matrix_builds_c(a.matrix) if a.matrix else False
    except MatrixError as e:
        echo_stderr(f"error: {e}")
        return EXIT_USAGE
    findings = doctor.examine(a.offline or a.packages, needed, builds_c)
    if a.packages:
        print(" ".join(doctor.missing_packages(findings)))
        return 0
    text, code = doctor.report(findings, a.json)
    print(text)
    return code
