# SPDX-License-Identifier: GPL-2.0
"""The soak's gate (tests/soak.py): its promise is 1% ERRORs, and a cell the
matrix lost (no verdict) counts as one."""
import importlib.util
from pathlib import Path

SPEC = importlib.util.spec_from_file_location("soak", Path(__file__).resolve().parents[1] / "soak.py")
soak = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(soak)


def cells(n: int, verdict, status: str = "pass") -> list[dict]:
    return [{"id": "6.16.12 perf-refresh", "verdict": verdict, "status": status, "seconds": 2.0}] * n


def test_a_cell_with_no_verdict_is_an_error():
    f = soak.tally(cells(99, "VULNERABLE") + cells(1, None, "error"))
    assert f["errors"] == 1 and f["false_verdicts"] == 0 and f["errors_by_reason"] == {"no verdict": 1}


def test_errors_over_one_percent_fail_the_gate():
    assert soak.passes(soak.tally(cells(99, "VULNERABLE") + cells(1, "ERROR", "error")))
    assert not soak.passes(soak.tally(cells(83, "VULNERABLE") + cells(1, "ERROR", "error")))  # 1.19%
    assert not soak.passes(soak.tally(cells(83, "VULNERABLE") + cells(1, None, "error")))


def test_a_false_verdict_fails_the_gate_and_inconclusives_are_held_to_two_percent():
    assert not soak.passes(soak.tally(cells(99, "VULNERABLE") + cells(1, "NOT_REPRODUCED", "fail")))
    assert soak.passes(soak.tally(cells(98, "VULNERABLE") + cells(2, "INCONCLUSIVE", "fail")))
    assert not soak.passes(soak.tally(cells(97, "VULNERABLE") + cells(3, "INCONCLUSIVE", "fail")))


def test_a_round_that_lost_its_matrix_counts_every_cell_it_was_to_run():
    """156 good runs and one lost round of the four cells: 4 ERRORs of 160
    (2.5 %, failing), not 1 of 157 (0.64 %, passing)."""
    ids = soak.soaked_cells(["perf-refresh", "bpf-ringbuf"])
    assert len(ids) == 4 and "debian:7.3.4/bpf-ringbuf" in ids
    f = soak.tally(cells(156, "VULNERABLE") + soak.lost_round(ids, "matrix exited -9 without matrix.json"))
    assert f["runs"] == 160 and f["errors"] == 4 and not soak.passes(f)
