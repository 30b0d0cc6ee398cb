# SPDX-License-Identifier: GPL-2.0
"""How a run ended, as the watch saw it (harness/guest/watch.py names the kinds)."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Outcome:
    kind: str
    detail: str
    at: float  # monotonic
