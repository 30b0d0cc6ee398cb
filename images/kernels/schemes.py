# SPDX-License-Identifier: GPL-2.0
"""Kernel specs: what a user names ('debian:6.16.12', 'file:bzImage') turned
into a bootable Kernel by its scheme's module. This table is the one place
that lists the schemes; a new scheme is a module beside images/kernels/debian.py and
a line here (its syntax and help follow it into errors and --help).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from harness.base import arch as arches
from images.kernels import build, deb, debian, filekernel, image, rpm
from images.kernels.kernel import Kernel, Progress, SpecError


@dataclass(frozen=True)
class Request:
    """How a spec is resolved: fetch (download, read or build it when it is
    not cached), progress lines, the build: options, and for an image:
    kernel booted with its own userspace (--boot-image), what makes the
    image's boot layer (images/guest/boot_image.py) in the same launch."""
    fetch: bool = True
    progress: Progress | None = None
    build: build.BuildOptions | None = None
    boot_layer: image.LayerMaker | None = None
    trust_backing: bool = False  # image: the backing files it names may be anywhere


def _build(spec: str, text: str, r: Request) -> Kernel:
    if not r.fetch:
        raise SpecError(f"{spec} is built on demand, not fetched")
    return build.build(text, r.build or build.BuildOptions(), r.progress)


@dataclass(frozen=True)
class Scheme:
    syntax: str   # debian:VERSION
    help: str
    resolve: Callable[[str, str, Request], Kernel]  # (spec, text after the colon, request)
    # the package's changelog (images/kernels/changelog.py), fetched if the scheme can
    changelog: Callable[[Kernel, Progress | None], Path | None] = lambda k, progress: k.changelog

    @property
    def name(self) -> str:
        return self.syntax.partition(":")[0]


SCHEMES = {s.name: s for s in (
    Scheme("debian:VERSION", "a Debian kernel, fetched from Debian's suites (debian:6.16.12, debian:6.1.192)",
           lambda spec, text, r: debian.resolve(spec, text, r.fetch, r.progress), debian.changelog_of),
    Scheme("deb:PATH[,PATH...]", "Debian or Ubuntu kernel package files",
           lambda spec, text, r: deb.resolve(spec, text)),
    Scheme("rpm:PATH[,PATH...]", "Fedora/RHEL kernel package files",
           lambda spec, text, r: rpm.resolve(spec, text), rpm.changelog_of),
    Scheme("image:PATH[#RELEASE]", "the kernel a qcow2 or raw disk image boots",
           lambda spec, text, r: image.resolve(spec, text, r.fetch, r.progress, r.boot_layer, r.trust_backing)),
    Scheme("file:PATH", "a bzImage, or an installed /boot/vmlinuz-RELEASE with its modules",
           lambda spec, text, r: filekernel.resolve(spec, text)),
    Scheme("build:TREE[@REV]", "built from a kernel git tree, out of tree", _build),
)}


def syntax() -> str:
    """'debian:VERSION, deb:PATH[,PATH...], ... or build:TREE[@REV]'"""
    forms = [s.syntax for s in SCHEMES.values()]
    return ", ".join(forms[:-1]) + " or " + forms[-1]


def help_text() -> str:
    """The schemes for --help: each with what it names."""
    return "; ".join(f"{s.syntax}: {s.help}" for s in SCHEMES.values())


def for_arch(spec: str, arch: str | None) -> str:
    """spec as it names arch's kernel (--arch): a debian: version gets the
    architecture's flavour; a file or package says its own architecture."""
    name, sep, text = spec.partition(":")
    if arch is None or name != "debian" or not text:
        return spec
    return f"debian:{debian.with_arch(text, arches.get(arch).flavour)}"


def resolve(spec: str, fetch: bool = True, progress: Progress | None = None, build_options=None,
            boot_layer: image.LayerMaker | None = None, trust_backing: bool = False,
            arch: str | None = None) -> Kernel:
    """A bootable Kernel for spec; downloaded, read or built when fetch (and
    cached after). build_options: images.kernels.build.BuildOptions for build: specs.
    arch: the architecture the kernel must be (--arch); None: whatever it is."""
    spec = for_arch(spec, arch)
    kernel = _resolve(spec, fetch, progress, build_options, boot_layer, trust_backing)
    if arch and kernel.arch != arch:
        raise SpecError(f"{spec} is a kernel for {kernel.arch}, not {arch} (--arch)")
    return kernel


def _resolve(spec: str, fetch: bool, progress: Progress | None, build_options,
             boot_layer: image.LayerMaker | None, trust_backing: bool) -> Kernel:
    name, sep, text = spec.partition(":")
    if not sep or not text:
        raise SpecError(f"kernel spec {spec!r} has no scheme: use {syntax()}")
    scheme = SCHEMES.get(name)
    if scheme is None:
        raise SpecError(f"unknown kernel scheme {name!r} in {spec!r}: use {syntax()}")
    return scheme.resolve(spec, text, Request(fetch, progress, build_options, boot_layer, trust_backing))


def changelog(kernel: Kernel, progress: Progress | None = None) -> Path | None:
    """The changelog of the package a kernel came from, when it has one."""
    scheme = SCHEMES.get(kernel.canonical.partition(":")[0])
    found = scheme.changelog(kernel, progress) if scheme else kernel.changelog
    return found if found and found.exists() else None
