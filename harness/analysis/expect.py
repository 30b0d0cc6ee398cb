# SPDX-License-Identifier: GPL-2.0
"""A matrix cell's status: its verdict judged against the expectation."""
from __future__ import annotations

EXPECTATIONS = ("vulnerable", "not_reproduced", "crashed", "inconclusive", "any")
FAILING = ("regression", "unexpected-pass", "mismatch", "error")
STATUS_TEXT = {"pass": "pass", "regression": "REGRESSION", "unexpected-pass": "UNEXPECTED PASS",
               "mismatch": "MISMATCH", "error": "ERROR", "xfail": "xfail", "xpass": "XPASS", "skip": "skip",
               "not-run": "not run"}


def judge(expect: str, verdict: str | None, xfail: str | None = None, skip: str | None = None) -> str:
    """pass | regression | unexpected-pass | mismatch | error | xfail | xpass | skip | not-run"""
    if skip:
        return "skip"
    if verdict is None:
        return "not-run"
    v = verdict.lower()
    if v == "error":
        status = "error"
    elif expect in ("any", v):
        status = "pass"
    elif expect == "not_reproduced" and v in ("vulnerable", "crashed"):
        status = "regression"
    elif expect in ("vulnerable", "crashed") and v == "not_reproduced":
        status = "unexpected-pass"
    else:
        status = "mismatch"
    if xfail:
        return "xpass" if status == "pass" else "xfail"
    return status
