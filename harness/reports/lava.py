# SPDX-License-Identifier: GPL-2.0
"""lava-cases.txt: one line per cell, `NAME RESULT SECONDS`, which the LAVA
test definition (ci/lava/kstall-matrix.yaml) hands to LAVA's
`lava-test-case NAME --result RESULT --measurement SECONDS --units seconds`."""
from __future__ import annotations

import re

from harness.analysis.expect import FAILING

# LAVA splits a test-case signal at whitespace and makes a directory of the
# name: kernel specs' ':' and the id's '/' become '_'
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
# a skipped cell is LAVA's skip; an unreached or missing one (an interrupted run, a lost shard) fails
_SKIPPED = ("skip",)


def case_name(cell_id: str) -> str:
    return _UNSAFE.sub("_", cell_id).strip("_")[:100] or "cell"


def result(status: str) -> str:
    return "fail" if status in FAILING else "skip" if status in _SKIPPED else "pass"


def render(doc: dict) -> str:
    return "".join(f"{case_name(c['id'])} {result(c['status'])} {float(c.get('seconds') or 0):.1f}\n"
                   for c in doc["cells"])
