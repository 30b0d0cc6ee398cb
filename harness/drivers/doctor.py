# SPDX-License-Identifier: GPL-2.0
"""`kstall doctor`: what this host can do, and why.

One line per thing a run may need: QEMU and a debugger per guest
architecture (the host's own is needed, another's only for its guests),
KVM and the decision kstall recorded about it this host boot, the guest
programs, libguestfs (image: kernels), the kernel debuggers (kstall
inspect), the cache's size and the free disk under it, whether Debian's
suites answer, and who is running. Whatever a verify needs and lacks is a
failure that names its fix; the exit status is 1 when there is one.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import tomllib
from dataclasses import asdict, dataclass
from pathlib import Path

from harness.base import arch as arches
from harness.base import kvm_decisions, paths
from harness.guest import machine
from harness.guest.vm import kvm_available

OK, WARN, FAIL, INFO = "ok", "warn", "FAIL", "info"
MIN_FREE_GB = 4  # a Debian kernel, its snapshot (guest RAM) and a run's files, with room to spare
NET_TIMEOUT_S = 5.0


@dataclass
class Finding:
    what: str
    status: str
    detail: str
    fix: str = ""
    package: str = ""  # the Debian package that mends it (the fix then says so)

    def __post_init__(self) -> None:
        if self.package and not self.fix:
            self.fix = f"apt install {self.package}"


def _version(binary: str) -> str:
    try:
        p = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return (p.stdout.splitlines() or [""])[0].strip()


def _tools(needed: set[str]) -> list[Finding]:
    out = []
    for name in arches.names():
        a = arches.get(name)
        short = FAIL if name in needed else WARN
        why = "" if name in needed else f" (only {a.debian} guests need it)"
        qemu = shutil.which(machine.qemu(name))
        out.append(Finding(f"QEMU for {name}", OK if qemu else short, f"{qemu}: {_version(qemu)}" if qemu else
                           f"{machine.qemu(name)} not found{why}", package="" if qemu else a.qemu_package))
        gdb = shutil.which(a.gdb)
        out.append(Finding(f"debugger for {name}", OK if gdb else short, f"{gdb}: {_version(gdb)}" if gdb else
                           f"{a.gdb} not found{why}", package="" if gdb else a.gdb))
        guest = paths.guest_dir(name)
        built = guest.is_dir() and any(guest.iterdir())
        out.append(Finding(f"guest programs for {name}", OK if built else INFO,
                           str(guest) if built else "not built yet: kstall builds them before its first run",
                           "" if built else f"make guest GUEST_ARCH={name}"))
    for tool, package, use in (("virt-ls", "libguestfs-tools", "image: kernels"),
                               ("crash", "crash", "kstall inspect --with crash"),
                               ("drgn", "python3-drgn", "kstall inspect --with drgn")):
        found = shutil.which(tool)
        out.append(Finding(tool, OK if found else WARN, found or f"not installed: {use} needs it",
                           package="" if found else package))
    return out


def _kvm() -> Finding:
    ok, why = kvm_available()
    if not ok:
        return Finding("KVM", INFO, f"{why}: guests run under TCG (slower, every result still holds)")
    with kvm_decisions.decisions() as known:
        host = known.get(kvm_decisions.HOST)
    if host is None:
        return Finding("KVM", INFO, "/dev/kvm opens; the first verify this host boot proves whether it runs a guest")
    return Finding("KVM", OK if host["works"] else INFO,
                   f"{'runs guests' if host['works'] else 'does not run guests'} on this host boot "
                   f"({host['detail']}, probed in {host['seconds']}s)")


def _du(path: Path) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            try:
                total += os.lstat(os.path.join(root, f)).st_blocks * 512
            except OSError:
                pass
    return total


def _disk() -> Finding:
    cache = paths.cache_dir()
    free = shutil.disk_usage(cache).free
    detail = f"{cache}: {_du(cache) / 1e9:.1f} GB used, {free / 1e9:.1f} GB free"
    if free < MIN_FREE_GB * 1e9:
        return Finding("cache", FAIL, detail, f"free disk under {cache} (at least {MIN_FREE_GB} GB), or set "
                       "KSTALL_CACHE to a larger disk")
    return Finding("cache", OK, detail)


def _debian(offline: bool) -> Finding:
    from images.kernels import debian
    urls = [w for line in debian.Archive().sources_text().splitlines() if line.startswith("deb ")
            for w in line.split() if w.startswith(("http://", "https://"))]
    if offline or not urls:
        return Finding("Debian's suites", INFO, "not checked (--offline)" if offline else "no suites listed")
    import urllib.request  # here: most commands never touch the network
    url = f"{urls[0].rstrip('/')}/dists/bookworm/InRelease"
    t0 = time.monotonic()
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=NET_TIMEOUT_S):
            pass
    except OSError as e:
        cached = any((paths.cache_dir() / "kernels").glob("*/*/kernel.json"))
        return Finding("Debian's suites", WARN if cached else FAIL, f"{url}: {getattr(e, 'reason', e)}"
                       + ("; the kernels already cached still run" if cached else ""),
                       "check the network, or set http_proxy")
    return Finding("Debian's suites", OK, f"{url} answered in {time.monotonic() - t0:.1f}s")


def _who() -> Finding:
    if os.geteuid() == 0:
        return Finding("user", INFO, "root")
    return Finding("user", INFO, f"uid {os.geteuid()}: everything but the tests that mount or need root")


def matrix_arches(path: Path) -> set[str]:
    """The guest architectures a matrix file's kernels are for (MatrixError
    for a file that is no matrix): a row's `arch` (or the file's [defaults]
    arch) whatever its scheme; without one, a debian: kernel names its own,
    and a package, image, file or build is taken to be the host's."""
    from harness.drivers import matrix
    from images.kernels import debian
    m = matrix.load(path)  # checks the file, and gives debian: rows their architecture
    doc = tomllib.loads(path.read_text())
    default = doc.get("defaults", {}).get("arch")
    out = set()
    for row, spec in zip(doc.get("kernel", []), m.kernels):
        given = row.get("arch", default)
        if given:
            out.add(arches.named(given).name)
        elif spec.startswith("debian:"):
            out.add(arches.by_debian(debian.arch_of(spec.partition(":")[2])).name)
        else:
            out.add(arches.host().name)
    return out


def matrix_builds_c(path: Path) -> bool:
    """Whether a matrix runs a C file of a user's, which kstall builds for each guest's architecture."""
    from harness.drivers import matrix
    return any(c.spec.endswith(".c") or c.spec.startswith("syz") for c in matrix.load(path).cells)


def examine(offline: bool = False, needed: frozenset[str] | set[str] = frozenset(),
            builds_c: bool = False) -> list[Finding]:
    """needed: the guest architectures whose QEMU and debugger a run needs,
    besides the host's own (a matrix's, say); builds_c: the run builds a
    user's C file for each of them, with their cross compiler and C library."""
    compilers = [_compiler(n) for n in sorted(needed) if builds_c and n != arches.host().name]
    return [*_tools({arches.host().name, *needed}), *compilers, _kvm(), _disk(), _debian(offline), _who()]


def _compiler(name: str) -> Finding:
    """The cross compiler and C library that build a user's C file for a guest of another architecture."""
    a = arches.get(name)
    cc = shutil.which(a.compiler())
    libc = Path("/usr") / a.table["triplet"] / "include" / "stdio.h"
    missing = [p for p, ok in ((a.table["cross_package"], cc), (a.table["cross_libc_package"], libc.is_file()))
               if not ok]
    return Finding(f"C compiler for {name}", FAIL if missing else OK,
                   f"{cc}, {libc.parent}" if not missing else f"a C file for {a.debian} guests needs "
                   f"{', '.join(missing)}", package=" ".join(missing))


def missing_packages(findings: list[Finding]) -> list[str]:
    """The Debian packages that would mend what a run needs and lacks."""
    return sorted({p for f in findings if f.status == FAIL and f.package for p in f.package.split()})


def report(findings: list[Finding], as_json: bool) -> tuple[str, int]:
    code = 1 if any(f.status == FAIL for f in findings) else 0
    if as_json:
        return json.dumps([asdict(f) for f in findings], indent=1), code
    lines = [f"{f.status:<5} {f.what:<26} {f.detail}" + (f"\n      fix: {f.fix}" if f.fix and f.status != INFO
                                                         else "") for f in findings]
    lines.append("kstall can run here" if code == 0 else "kstall cannot run here yet: see FAIL above")
    return "\n".join(lines), code
