# SPDX-License-Identifier: GPL-2.0
"""The stack walkers, by the name an architecture's table gives
(harness/base/arches.toml `unwinder`). Each reads a stack's raw bytes and
the code before each address the dumper copied; a new architecture whose
stacks are walked another way adds its module here."""
from __future__ import annotations

from types import ModuleType

from harness.analysis import framewalk, stackwalk
from harness.base.arch import Arch

# a walker module has: CODE_BEFORE, regions(), candidates(), frames()
UNWINDERS: dict[str, ModuleType] = {"call-sites": stackwalk, "frame-records": framewalk}


def for_arch(a: Arch) -> ModuleType:
    try:
        return UNWINDERS[a.unwinder]
    except KeyError:
        raise KeyError(f"{a.name}: no unwinder {a.unwinder!r} (kstall has {', '.join(UNWINDERS)})") from None
