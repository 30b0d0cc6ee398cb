# SPDX-License-Identifier: GPL-2.0
"""make test's two e2e streams: every e2e file runs in exactly one, and the
second stream's exit codes are read from what its shell said."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import run_suite  # noqa: E402


def test_every_e2e_file_runs_in_one_stream_and_the_big_matrices_stay_in_the_first():
    first, second = run_suite.streams()
    files = sorted(str(p) for p in run_suite.E2E.glob("test_*.py"))
    assert sorted(first + second) == files and not set(first) & set(second)
    assert {Path(f).name for f in first} >= {"test_matrix.py", "test_syzbot_reproducers.py"}
    assert second


def test_a_code_the_second_stream_never_said_is_a_failure():
    assert run_suite._said_codes("...\nunit=0\n..\ne2e-beside=5\n") == {"unit": 0, "e2e-beside": 5}
    assert run_suite._said_codes("...\nunit=0\n(killed)") == {"unit": 0, "e2e-beside": 1}
