# SPDX-License-Identifier: GPL-2.0
"""Numbers read from guest text (console, agent channel, /proc lines). The
guest is not trusted: what is not a number of sane length is no number, and
nothing here raises."""
from __future__ import annotations

import re

_DEC = re.compile(r"-?\d{1,20}")
_HEX = re.compile(r"(?:0[xX])?[0-9a-fA-F]{1,16}")


def num(text: str | None, default: int | None = None) -> int | None:
    """A decimal integer of at most 20 digits, else default."""
    return int(text) if text is not None and _DEC.fullmatch(text) else default


def hexnum(text: str | None, default: int | None = None) -> int | None:
    """A hex integer of at most 16 digits (0x optional), else default."""
    return int(text, 16) if text is not None and _HEX.fullmatch(text) else default


# what a kernel release (uname -r) can look like: 6.16.12+deb13-amd64, 6.8.0-45-generic, 6.16.12-200.fc42.x86_64
_RELEASE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+~-]{0,127}")


def release(text: str | None) -> str | None:
    """A kernel release from a package, an image or a spec, else None: it is
    joined into cache paths, so no '/', no '..', nothing that is not a name."""
    return text if text is not None and _RELEASE.fullmatch(text) and ".." not in text else None


def relative_path(text: str) -> str | None:
    """A path from a package or an image (an archive member, a modules.dep
    line), normalised, when it stays below where it is put: relative, no '..'
    component, no NUL; else None."""
    if not text or "\0" in text or text.startswith("/"):
        return None
    parts = [p for p in text.split("/") if p not in ("", ".")]
    if not parts or ".." in parts:
        return None
    return "/".join(parts)
