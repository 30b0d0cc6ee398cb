# SPDX-License-Identifier: GPL-2.0
"""A matrix file (ci/README.md): its cells, each a kernel, a reproducer and
the verdict expected of it, and a cell's status: its verdict judged against
that expectation."""
from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from pathlib import Path

from harness.analysis import bug_record
from harness.analysis.record import RunRecord
from harness.analysis.verdict import VerdictKind

# "record": the verdict the bug's published record predicts (harness/analysis/bug_record.py)
EXPECTATIONS = ("vulnerable", "not_reproduced", "crashed", "inconclusive", "failed", "any", "record")
# "missing": a cell of the matrix that no merged shard ran; "not-run": one
# its run never reached (interrupted: a CI job's timeout); "disagrees": a
# verdict other than the one the record predicts. A cell that did not run
# is no pass: the run, and a merge of its shards, fail on it.
FAILING = ("regression", "unexpected-pass", "mismatch", "error", "missing", "not-run", "disagrees")
STATUS_TEXT = {"pass": "pass", "disagrees": "DISAGREES WITH THE RECORD", "regression": "REGRESSION",
               "unexpected-pass": "UNEXPECTED PASS",
               "mismatch": "MISMATCH", "error": "ERROR", "missing": "MISSING", "xfail": "xfail", "xpass": "XPASS",
               "skip": "skip",
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


ABOUT = ("fixed_in", "fix")  # a [[reproducer]]'s words on its bug, carried into the reports


class MatrixError(ValueError):
    pass


@dataclass
class Cell:
    kernel: str
    reproducer: str
    expect: str = "any"
    xfail: str | None = None
    skip: str | None = None
    cpus: int | None = None
    args: list[str] = field(default_factory=list)
    duration: float | None = None
    count: int | None = None
    hang_after: float | None = None  # --hang-after for this row's cells
    spec: str = ""  # what verify runs: a user's reproducer's path; the name for a built-in

    @property
    def id(self) -> str:
        return f"{self.kernel}/{self.reproducer}"


@dataclass
class Matrix:
    path: Path
    kernels: list[str]
    reproducers: list[str]
    cells: list[Cell]
    # what the file says of a reproducer's bug beyond its cells: fixed_in (the
    # first version of each release line without the hang), fix (the change)
    about: dict[str, dict] = field(default_factory=dict)


def parse(doc: dict, path: Path, known: set[str], specs: dict[str, str]) -> Matrix:
    """A matrix file's document (read from path); known: the built-in
    reproducers; specs: each reproducer of the user's own by name, as
    verify takes it (its path, checked by the caller)."""
    repros = doc.get("reproducer", [])
    kernels = doc.get("kernel", [])
    if not repros or not kernels:
        raise MatrixError(f"{path}: needs at least one [[kernel]] and one [[reproducer]]")
    default = doc.get("defaults", {}).get("expect", "any")
    cells = []
    for k in kernels:
        if "spec" not in k:
            raise MatrixError(f"{path}: a [[kernel]] has no spec")
        for table in ("expect", "xfail", "skip"):
            for name in k.get(table, {}):
                if name not in {r["name"] for r in repros}:
                    raise MatrixError(f"{path}: {k['spec']}: {table} names {name!r}, not a [[reproducer]] here")
        for r in repros:
            if r.get("name") not in known and r.get("name") not in specs:
                raise MatrixError(f"{path}: unknown reproducer {r.get('name')!r}; known: {', '.join(sorted(known))} "
                                  "(a reproducer of your own needs path = its .toml, directory, C file or program)")
            want = k.get("expect", {}).get(r["name"], default)
            if want not in EXPECTATIONS:
                raise MatrixError(f"{path}: {k['spec']} x {r['name']}: expect must be one of {', '.join(EXPECTATIONS)}")
            cells.append(Cell(kernel=k["spec"], reproducer=r["name"], expect=want,
                              xfail=k.get("xfail", {}).get(r["name"]), skip=k.get("skip", {}).get(r["name"]),
                              cpus=r.get("cpus"), args=list(r.get("args", [])), duration=r.get("duration"),
                              count=r.get("count"), hang_after=r.get("hang_after"),
                              spec=specs.get(r["name"], r["name"])))
    about = {r["name"]: {k: r[k] for k in ABOUT if k in r} for r in repros if any(k in r for k in ABOUT)}
    for name, a in about.items():
        if not isinstance(a.get("fixed_in", []), list) or not isinstance(a.get("fix", ""), str):
            raise MatrixError(f"{path}: reproducer {name!r}: fixed_in is a list of kernel specs, fix a string")
    return Matrix(path, [k["spec"] for k in kernels], [r["name"] for r in repros], cells, about)


def parse_shard(text: str) -> tuple[int, int]:
    try:
        i, n = (int(x) for x in text.split("/"))
    except ValueError:
        raise MatrixError(f"--shard {text!r}: expected I/N, e.g. 1/2") from None
    if not 1 <= i <= n:
        raise MatrixError(f"--shard {text!r}: I must be between 1 and N")
    return i, n


def select(cells: list[Cell], shard: tuple[int, int] | None = None, only: list[str] | None = None,
           exclude: list[str] | None = None) -> list[Cell]:
    def hit(cell: Cell, patterns: list[str]) -> bool:
        return any(fnmatch.fnmatch(name, p) for p in patterns for name in (cell.id, cell.kernel, cell.reproducer))
    out = [c for c in cells if (not only or hit(c, only)) and not (exclude and hit(c, exclude))]
    if shard:
        i, n = shard
        out = [c for k, c in enumerate(out) if k % n == i - 1]
    return out


def expected(cell: Cell, prediction: dict | None) -> str:
    """The cell's expectation: the matrix file's, or the record's prediction."""
    if cell.expect != "record":
        return cell.expect
    # an unknown prediction expects anything but ERROR
    return bug_record.EXPECTED_VERDICT.get((prediction or {}).get("status", ""), "any").lower()


def judge_cell(cell: Cell, verdict: str | None, prediction: dict | None = None) -> str:
    status = judge(expected(cell, prediction), verdict, cell.xfail, cell.skip)
    if cell.expect == "record" and status in ("regression", "unexpected-pass", "mismatch"):
        return "disagrees"
    return status


@dataclass
class CellResult:
    """A cell's run: its record, or none (skipped, not run), judged against
    the cell's expectation."""
    cell: Cell
    status: str
    record: RunRecord | None = None
    run_dir: Path | None = None
    seconds: float = 0.0
    kernel_wait_s: float = 0.0

    @property
    def verdict(self) -> VerdictKind | None:
        return self.record.verdict.verdict if self.record else None
