# SPDX-License-Identifier: GPL-2.0
"""A user's program for the guest, as the files it needs in the initramfs.

A C file is built on the host as the built-ins are (static, the kernel's
kselftest.h and repro/ on the include path, -Wall), once per source, headers
and compiler, into <cache>/programs; a compile error is a BuildError that
shows the compiler's message. An executable goes in as it is when static; a
dynamic one goes in with every shared library ldd names and its loader, at
the paths it asks for them, so it runs in kstall's bare initramfs.
"""
from __future__ import annotations

import hashlib
import re
import subprocess
from pathlib import Path

from harness.base import arch as arches
from harness.base import paths
from images.kernels import cached
from images.kernels.kernel import SpecError

CFLAGS_FILE = paths.data_file("repro", "cflags.mk")


def cflags() -> list[str]:
    """GUEST_CFLAGS_ALL from repro/cflags.mk: the flags the built-ins are built with too."""
    for line in CFLAGS_FILE.read_text().splitlines():
        name, sep, value = line.partition(":=")
        if sep and name.strip() == "GUEST_CFLAGS_ALL":
            return value.split()
    raise BuildError(f"{CFLAGS_FILE} has no GUEST_CFLAGS_ALL")


BUILD_TIMEOUT = 300


class BuildError(SpecError):
    """The user's C file does not build, or their program cannot run in the guest: a usage error."""


def include_dirs() -> list[Path]:
    """What the built-ins build with: the kernel's kselftest.h (make guest) and repro/repro.h."""
    return [paths.build_dir() / "kselftest", paths.data_file("repro")]


def _compiler_identity(cc: str) -> str:
    try:
        return subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return cc


def build_c(source: Path, arch: str = arches.DEFAULT, flags: tuple[str, ...] | None = None,
            compiler: tuple[str, str] | None = None) -> Path:
    """The static binary of source for arch, built once per source, headers,
    compiler and flags (a guest environment's own, or the built-ins');
    compiler: another than arch's (a 32-bit ABI's), and the packages that have it."""
    cc = compiler[0] if compiler else arches.get(arch).compiler()
    if not source.is_file():
        raise BuildError(f"no such C file {source}")
    include = include_dirs()
    h = hashlib.sha256(source.read_bytes())
    for header in sorted(f for d in include for f in d.glob("*.h")):
        h.update(header.read_bytes())
    h.update(_compiler_identity(cc).encode())
    use = list(flags) if flags is not None else cflags()
    h.update(" ".join(use).encode())
    d = paths.cache_dir() / "programs" / f"{source.stem[:40]}-{h.hexdigest()[:16]}"
    out = d / source.stem

    def make() -> None:
        try:
            p = subprocess.run([cc, *use, *(f"-I{d}" for d in include), "-o", str(out), str(source)],
                               capture_output=True, text=True, timeout=BUILD_TIMEOUT)
        except FileNotFoundError:
            a = arches.get(arch)
            package = compiler[1] if compiler else "gcc" if cc == "gcc" else a.table.get("cross_package", cc)
            raise BuildError(f"{cc} not found: " + (f"apt install {package}" if paths.INSTALLED else
                                                     "run `make deps`")) from None
        except subprocess.TimeoutExpired:
            raise BuildError(f"building {source} took longer than {BUILD_TIMEOUT}s") from None
        if p.returncode != 0:
            raise BuildError(f"{source} does not build ({cc} {' '.join(use)}):\n"
                             f"{(p.stderr or p.stdout).strip()[-3000:]}")
        (d / "built").touch()
    cached.make_once(d, make, done="built")
    return out


_LDD_LINE = re.compile(r"^\s*(?:\S+ => )?(/\S+) \(0x[0-9a-f]+\)$")


def libraries(program: Path) -> list[Path]:
    """The shared libraries and the loader a dynamic executable needs (ldd); [] for a static one."""
    try:
        p = subprocess.run(["ldd", str(program)], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise SpecError(f"ldd {program}: {e}") from None
    if p.returncode != 0:  # "not a dynamic executable": static
        return []
    missing = [l.split()[0] for l in p.stdout.splitlines() if "=> not found" in l]
    if missing:
        raise SpecError(f"{program} needs libraries this host does not have: {', '.join(missing)}")
    return [Path(m.group(1)) for l in p.stdout.splitlines() if (m := _LDD_LINE.match(l))]


def _dynamic(elf: bytes) -> bool:
    """Whether a 64-bit little-endian ELF asks for a loader (a PT_INTERP program header)."""
    if elf[:4] != b"\x7fELF" or elf[4] != 2 or len(elf) < 64:
        return False
    phoff, size, count = (int.from_bytes(elf[0x20:0x28], "little"), int.from_bytes(elf[0x36:0x38], "little"),
                          int.from_bytes(elf[0x38:0x3A], "little"))
    return any(int.from_bytes(elf[at:at + 4], "little") == 3 for at in range(phoff, phoff + size * count, size))


def guest_files(program: Path, name: str, arch: str = arches.DEFAULT) -> dict[str, bytes]:
    """initramfs path -> contents: the program as bin/NAME, and for a dynamic
    one its libraries and loader where it looks for them. A program of
    another architecture than arch's guest is a usage error."""
    if not program.is_file():
        raise SpecError(f"no such program {program}")
    data = program.read_bytes()
    its = arches.of_elf(data[:64])
    if its is not None and its != arch:
        raise BuildError(f"{program} is a {its} executable, and the kernel's guest is {arch}: "
                        f"build it for {arch} (or give kstall its C file, which it builds for the guest)")
    files = {f"bin/{name}": data}
    native = arches.get(arch).compiler() == "gcc"
    if not native and _dynamic(data):
        raise BuildError(f"{program} is a dynamic {arch} executable: kstall gathers a program's libraries with "
                        f"this host's ldd, which cannot read {arch}'s; link it -static")
    for lib in libraries(program) if native else []:
        files[str(lib).lstrip("/")] = lib.resolve().read_bytes()
    return files


def host_tool(path: Path, arch: str) -> dict[str, bytes]:
    """A host program at its own path in a guest of the host's architecture,
    with its libraries and loader ({} for another architecture's guest, or
    a host without it)."""
    if arches.get(arch).compiler() != "gcc" or not path.is_file():
        return {}
    files = {str(path).lstrip("/"): path.read_bytes()}
    for lib in libraries(path):
        files[str(lib).lstrip("/")] = lib.resolve().read_bytes()
    return files
