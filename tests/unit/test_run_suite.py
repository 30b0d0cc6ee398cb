# SPDX-License-Identifier: GPL-2.0
"""make test's two e2e parts: every file in exactly one, of about equal time."""
from __future__ import annotations

import sys
import tomllib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import run_suite  # noqa: E402

E2E = Path(__file__).resolve().parents[1] / "e2e"


def test_every_e2e_file_is_in_one_part_and_the_parts_weigh_about_the_same():
    seconds = tomllib.loads((E2E / "seconds.toml").read_text())
    files = sorted(E2E.glob("test_*.py"))
    parts = run_suite.halves(files, seconds)
    assert len(parts) == 2 and sorted(f for p in parts for f in p) == files
    totals = [sum(seconds.get(f.name, 0) for f in p) for p in parts]
    assert abs(totals[0] - totals[1]) <= max(seconds.values()) / 10, totals
    assert set(seconds) <= {f.name for f in files}, "seconds.toml names a file that is gone"


def test_a_file_not_measured_weighs_the_median_and_one_file_is_one_part():
    a, b, c = Path("a.py"), Path("b.py"), Path("new.py")
    assert run_suite.halves([a, b, c], {"a.py": 10, "b.py": 2}) == [[a], [b, c]]
    assert run_suite.halves([a], {"a.py": 10}) == [[a]]
