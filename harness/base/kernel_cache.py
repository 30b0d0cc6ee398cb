# SPDX-License-Identifier: GPL-2.0
"""Everything kstall keeps per kernel, named in one place and keyed by the
kernel's sha256 and its architecture. Each artefact has its own directory
under the cache, where its module prunes it by its own rule; this module
says where a kernel's artefact lives and what its key is:

    symbols/<arch>-<sha>.kallsyms|.datasyms|.btf  the guest's symbols (images/kernels/symcache.py)
    symbols/<arch>-<sha>.layout.json              who waits for whom, laid out from its BTF
                                                  (harness/drivers/layouts.py)
    pvh/<arch>-<sha>.elf|.none                    the PVH boot file (images/guest/pvh.py)
    snapshots/<hash of key, machine, QEMU>.*      its guests saved at the gate (harness/guest/snapshot.py)
    kvm-probe.json, under <arch>-<sha>            whether KVM ran it (harness/guest/accel.py)
    debuginfo/<build-id>.vmlinux                  its vmlinux with DWARF (images/kernels/debuginfo.py)
    debuginfo/<arch>-<sha>.build-id               the build IDs its image holds
    modtrees/<arch>-<sha>.ext4|.aliases           its whole module tree as a disk, and its module
                                                  aliases (images/kernels/module_tree.py)
    testmods/<arch>-<sha>.d/                      test modules built for it from its own source, with
                                                  their logs and records (images/kernels/test_modules.py)
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from harness.base import paths

SYMBOLS, PVH, SNAPSHOTS, DEBUGINFO, MODTREES = "symbols", "pvh", "snapshots", "debuginfo", "modtrees"
TESTMODS = "testmods"


@dataclass(frozen=True)
class KernelKey:
    sha256: str
    arch: str

    @property
    def name(self) -> str:
        return f"{self.arch}-{self.sha256}"


def directory(kind: str) -> Path:
    """Where every kernel's artefacts of one kind live."""
    return paths.cache_dir() / kind


def path(kind: str, key: KernelKey, suffix: str) -> Path:
    """A kernel's artefact: <cache>/<kind>/<arch>-<sha>.<suffix>."""
    return directory(kind) / f"{key.name}.{suffix}"
