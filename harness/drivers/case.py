# SPDX-License-Identifier: GPL-2.0
"""One resolved case: a kernel spec, a reproducer spec and the options turned,
in one step, into what every later stage reads (and never parses again):

    reproducer spec ─► Loaded: its data file, signatures (its own and kstall's),
                       bug record, calibration file, program built
    kernel spec     ─► Kernel (with its architecture), the preflight check,
                       the initramfs, the accelerator (a --boot-image disk)
    options         ─► Key: what the run's P(miss) depends on, and the
                       calibration that holds for it (or why none does)
"""
from __future__ import annotations

import dataclasses
import functools
import os
import re
import subprocess
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from harness.analysis import bug_record, classify, pmiss, reach
from harness.analysis.bug_record import BugRecord
from harness.analysis.classify import Signature
from harness.analysis.pmiss import Key
from harness.base import arch as arches
from harness.base import guest_env, paths, reproducers, syzkaller
from harness.base.reproducers import Reproducer
from harness.drivers import preflight
from harness.drivers.options import DEFAULT_MEMORY_MB, Options
from harness.guest import accel
from images.guest import boot_image, environment, firmware, initramfs, programs, sysroot
from images.guest.disks import Disk
from images.kernels import cached, module_tree
from images.kernels.build import BuildOptions
from images.kernels.kernel import Kernel, SpecError
from images.kernels.schemes import resolve as resolve_kernel

Echo = Callable[[str], None]
# make -q of the guest binaries reads a few dozen files' times: a bound for a stuck one
GUEST_CHECK_BOUND_S = 60.0


@dataclass(frozen=True)
class Loaded:
    """A reproducer with every file its data file points to read once."""
    spec: Reproducer
    signatures: tuple[Signature, ...]  # its own first, then kstall's
    # its name when some signatures are its own ("" when none are: any hang it makes is its finding)
    own_bug: str
    record: BugRecord | None           # [record]: the kernel bug's published record
    calibrations: tuple[pmiss.Calibration, ...]  # its calibration files, whatever runs each holds for

    @property
    def name(self) -> str:
        return self.spec.name

    def calibration_for(self, key: Key) -> tuple[pmiss.Calibration | None, str]:
        """The calibration that holds for a run with key, and why P(miss) may still be unknown."""
        return pmiss.holding(self.calibrations, key)


def _guest_make(arch: str, echo: Echo) -> list[str] | None:
    """The make that builds arch's guest binaries; None where this kstall
    does not build them (its caller assembled them, or its package has them)."""
    if os.environ.get("KSTALL_GUEST_DIR") or paths.INSTALLED:
        return None
    return ["make", "-C", str(paths.REPO), "guest", f"GUEST_ARCH={arch}", *arches.make_vars(arch).split(),
            *sysroot.make_args(arch, echo)]


def _current(make: list[str]) -> bool:
    return subprocess.run([*make, "-q"], capture_output=True, timeout=GUEST_CHECK_BOUND_S).returncode == 0


def ensure_guest(echo: Echo, arch: str = arches.DEFAULT) -> Path:
    """arch's guest binaries, built if they are missing or stale (make -q:
    a few ms), once: a fresh clone's matrix starts its cells side by side,
    and two makes writing one binary broke both."""
    guest = paths.guest_dir(arch)
    make = _guest_make(arch, echo)
    if make is None:
        if paths.INSTALLED and not (guest / "init").is_file():
            raise SpecError(f"no {arch} guest programs in {guest}: this kstall package was built without them")
        return guest
    if _current(make):
        return guest
    with cached.locked(guest):
        if _current(make):  # another kstall built them while this one waited
            return guest
        echo(f"building {arch} guest binaries (make guest GUEST_ARCH={arch})")
        q = subprocess.run(make, capture_output=True, text=True)
    if q.returncode != 0:
        raise SpecError(f"`make guest GUEST_ARCH={arch}` failed:\n{q.stdout[-2000:]}{q.stderr[-2000:]}")
    return guest


def load(spec: str | Reproducer, echo: Echo) -> Loaded:
    """The reproducer a spec names, every part of it read and its program
    built: ReproducerError or programs.BuildError (usage errors) before
    anything boots."""
    repro = reproducers.resolve(spec) if isinstance(spec, str) else spec
    try:
        sigs, own_bug = classify.signatures_for(repro)
        record = bug_record.of(repro.record, repro.name, repro.syzbot.get("record"))
    except ValueError as e:
        raise reproducers.ReproducerError(f"reproducer {repro.name}: {e}") from None
    if repro.source:
        ensure_guest(echo)  # kselftest.h, which a user's C file may include
        t = time.monotonic()
        repro = dataclasses.replace(repro, program=str(build(repro)))
        if time.monotonic() - t > 0.1:  # not cached
            echo(f"{Path(repro.source).name}: built {repro.program} ({time.monotonic() - t:.2f}s)")
    calibrations = tuple(c for d in repro.calibration_dirs for c in pmiss.load_files(repro.name, d))
    return Loaded(repro, tuple(sigs), own_bug, record, calibrations)


def build(repro: Reproducer, arch: str = arches.DEFAULT) -> Path:
    """A user's C file built for arch, with its guest environment's flags if
    it has one, by its ABI's compiler if it is another than the guest's (386)."""
    flags = guest_env.get(repro.env).cflags if repro.env else None
    compat = arches.get(arch).table.get("compat", {})
    if repro.abi and compat.get("name") == repro.abi:
        return programs.build_c(Path(repro.source), arch, (*(flags or programs.cflags()), *compat["cflags"]),
                                compiler=(compat["cc"], " ".join(compat["packages"])))
    return programs.build_c(Path(repro.source), arch, flags)


def check_syzkaller_arch(repro: Reproducer, kernel: Kernel) -> None:
    """A syzkaller reproducer whose header names an architecture runs on that
    architecture's kernels only (a 386 one on x86_64's, which run it)."""
    want = (repro.syzbot or {}).get("arch")
    row = arches.by_syzkaller(want) if want else None
    if row is not None and row.name != kernel.arch:
        raise reproducers.ReproducerError(f"{repro.name} is syzkaller's reproducer for {want}, and {kernel.canonical} "
                                          f"is {arches.get(kernel.arch).debian}'s: run it on {row.debian}'s kernels "
                                          f"(--arch {row.debian})")


def guest_files(repro: Reproducer, arch: str) -> dict[str, bytes]:
    """What a user's program adds to arch's initramfs (nothing for a built-in,
    or a host command, which runs from the host's root)."""
    if repro.builtin or repro.command:
        return {}
    program = repro.program or str(build(repro, arch))
    return programs.guest_files(Path(program), repro.binary, arch)


@dataclass(frozen=True)
class Case:
    kernel: Kernel
    repro: Loaded
    check: preflight.Check      # what the kernel has of what the reproducer needs
    initrd: Path
    accel: str                  # "none" when nothing will boot (the preflight found options missing)
    key: Key
    calibration: pmiss.Calibration | None  # the one that holds for key
    pmiss_unknown: str = ""     # why none does
    disk: boot_image.BootDisk | None = None  # --boot-image: the image's own disk
    disks: tuple[Disk, ...] = ()                # a guest environment's (images/guest/environment.py)
    memory_mb: int = DEFAULT_MEMORY_MB          # the user's --memory, else its guest environment's
    firmware: tuple[firmware.Carried, ...] = ()  # device firmware the guest carries (images/guest/firmware.py)

    @property
    def cpus(self) -> int:
        return self.key.cpus


def memory_for(repro: Reproducer, opts: Options) -> int:
    """The guest's memory: the user's, else the reproducer's environment's
    (syzkaller's: syzbot's smallest machine), else kstall's default."""
    env = guest_env.get(repro.env).memory_mb if repro.env else 0
    return opts.guest.memory_mb or env or DEFAULT_MEMORY_MB


def key_for(repro: Loaded, opts: Options, accel_kind: str, arch: str) -> Key:
    """The P(miss) key of a run: what it runs the reproducer with."""
    spec = repro.spec
    return Key(tuple(spec.arguments(opts.run.repro_args)), opts.guest.cpus or spec.default_cpus, accel_kind, arch,
               spec.nmi_rate)


def resolve(kernel_spec: str, repro: Loaded, opts: Options, echo: Echo) -> Case:
    """The case verify runs: the kernel fetched (or built), checked against
    what the reproducer needs, its initramfs and accelerator."""
    asked = opts.kernel.arch or arches.DEFAULT
    # before the kernel: a first --boot-image installs them into the image's layer
    guest = ensure_guest(echo, asked)
    build_opts = dataclasses.replace(opts.kernel.build or BuildOptions(), needs=repro.spec.needs)
    kernel = resolve_kernel(kernel_spec, progress=echo, build_options=build_opts,
                            boot_layer=functools.partial(boot_image.make_layer, arch=opts.kernel.arch or arches.DEFAULT)
                            if opts.kernel.boot_image else None,
                            trust_backing=opts.kernel.trust_backing, arch=opts.kernel.arch)
    if kernel.arch != asked:  # a package or image of another architecture than asked for
        guest = ensure_guest(echo, kernel.arch)
    if repro.spec.command and kernel.arch != arches.host().name:
        raise programs.BuildError(f"run:{repro.spec.command} runs the host's own programs over its root filesystem, "
                                  f"which are {arches.host().name}'s; an {kernel.arch} guest cannot run them: give "
                                  f"kstall a {kernel.arch} program instead (a C file, which it cross-builds, or a "
                                  "static executable)")
    check_syzkaller_arch(repro.spec, kernel)
    if repro.spec.source and kernel.arch != arches.DEFAULT:  # load() built the C file for the default architecture
        program = str(build(repro.spec, kernel.arch))
        repro = dataclasses.replace(repro, spec=dataclasses.replace(repro.spec, program=program))
    check = preflight.check(kernel, repro.spec, echo)
    env = environment.Prepared()
    if repro.spec.env and not check.blocked:
        echo(f"{repro.name}: preparing {repro.spec.env}'s guest environment on {kernel.canonical}")
        env = environment.prepare(guest_env.get(repro.spec.env), kernel, syzkaller.device_paths(repro.spec), echo,
                                  check.test_module_files)
        env = environment.with_preload(env, preloads(repro.spec, kernel, check.test_module_files, echo))
    # a --boot-image guest boots the image's own initramfs: it carries none
    fw_files, carried = firmware_for(repro.spec, echo) \
        if repro.spec.env and not check.blocked and not opts.kernel.boot_image else ({}, [])
    both = [*check.modules, *env.modules]
    mods = [m for i, m in enumerate(both) if m.stem not in {x.stem for x in both[:i]}]  # each once, first place
    if mods and not check.blocked:  # nothing boots: no module loads either
        echo(f"modules to load first: {', '.join(m.stem for m in mods)}")
    initrd = initramfs.build(guest, modules=mods, extra=guest_files(repro.spec, kernel.arch) | env.files | fw_files)
    accel_kind = "none" if check.blocked else accel.choose(opts.guest.accel, kernel, initrd, echo)
    disk = None
    if opts.kernel.boot_image and not check.blocked:
        disk = boot_image.prepare(kernel, echo)  # the image loads its own modules
        initrd = disk.initrd
    key = key_for(repro, opts, accel_kind, kernel.arch)
    cal, unknown = repro.calibration_for(key)
    return Case(kernel, repro, check, initrd, accel_kind, key, cal, unknown, disk, env.disks,
                memory_for(repro.spec, opts), tuple(carried))


def preloads(repro: reproducers.Reproducer, kernel: Kernel, test_modules: tuple[Path, ...], echo: Echo) -> list[str]:
    """The modules a syzkaller program's devices and filesystems are in, to
    load before it starts: syzbot's kernels build them in, and under TCG a
    program's first call that needs one waits for its modprobe while its
    other threads go on without it (a mount with the fd of an open of
    /dev/fuse that had not yet returned: "fuse: Bad value for 'fd'")."""
    table = module_tree.aliases(kernel, test_modules)
    if table is None or not repro.source:
        return []
    aliases = reach.Aliases(table.read_text(errors="replace"))
    try:
        source = Path(repro.source).read_text(errors="replace")
    except OSError:
        return []
    names = [f"devname:{p.removeprefix('/dev/')}" for p in syzkaller.device_paths(repro) if "#" not in p]
    names += [f"fs-{s}" for s in sorted(reach.program_strings(source)) if re.fullmatch(r"[\w.-]{1,32}", s)]
    out = list(dict.fromkeys(m for n in names for m in aliases.answers(n)))
    if out:
        echo(f"{repro.name}: loaded before it starts, as a kernel with them built in has them: {', '.join(out)}")
    return out


def firmware_for(repro: reproducers.Reproducer, echo: Echo) -> tuple[dict[str, bytes], list[firmware.Carried]]:
    """The firmware a syzkaller program's emulated device loads at probe, as
    syzbot's images carry it. One that cannot be had is said, and the run
    goes on without it: its console then says the driver stopped for it
    (harness/analysis/usb_console.py), an INCONCLUSIVE, never a clean run."""
    try:
        rows = firmware.wanted(Path(repro.source).read_text(errors="replace")) if repro.source else []
    except OSError:
        return {}, []
    if not rows:
        return {}, []
    try:
        files, carried = firmware.files(rows, echo)
    except (SpecError, OSError, subprocess.SubprocessError, tarfile.TarError, KeyError) as e:
        echo(f"{repro.name}: no firmware for {', '.join(r.driver for r in rows)} ({e}): it runs without it")
        return {}, []
    echo(f"{repro.name}: the guest carries " + "; ".join(c.text() for c in carried))
    return files, carried


def with_accel(c: Case, accel_kind: str) -> Case:
    """The same case under another accelerator, with the calibration that
    holds under it, if one does (a hang's rate is the accelerator's too)."""
    key = dataclasses.replace(c.key, accel=accel_kind)
    cal, unknown = c.repro.calibration_for(key)
    return dataclasses.replace(c, accel=accel_kind, key=key, calibration=cal, pmiss_unknown=unknown)
