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
