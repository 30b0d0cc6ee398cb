# SPDX-License-Identifier: GPL-2.0
"""`kstall matrix`: kernels x reproducers, each cell a verify run, judged
against the expectation the matrix file states for it.

Kernels are fetched in the background, in cell order, while earlier cells
run. Cells run side by side only as far as the host's cores allow (a booting
guest holds one core, a running one its vCPUs; harness/guest/cores.py), so a guest
boots while another runs and starts the moment the cores are free. Sharding
(--shard I/N) takes every N-th cell: a CI system's job matrix spreads the
cells, kstall has no scheduler of its own.
"""
from __future__ import annotations

import concurrent.futures
import fnmatch
import os
import threading
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from harness.analysis import expect
from harness.base import procs, reproducers, rundir as results
from harness.drivers import verify
from harness.guest.cores import CoreBudget
from images.kernel import SpecError
from images.schemes import resolve

from harness.analysis.expect import EXPECTATIONS, FAILING


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

    @property
    def id(self) -> str:
        return f"{self.kernel}/{self.reproducer}"


@dataclass
class Matrix:
    path: Path
    kernels: list[str]
    reproducers: list[str]
    cells: list[Cell]


def load(path: Path) -> Matrix:
    try:
        with open(path, "rb") as f:
            doc = tomllib.load(f)
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise MatrixError(f"{path}: {e}") from None
    repros = doc.get("reproducer", [])
    kernels = doc.get("kernel", [])
    if not repros or not kernels:
        raise MatrixError(f"{path}: needs at least one [[kernel]] and one [[reproducer]]")
    known = set(reproducers.names())
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
            if r.get("name") not in known:
                raise MatrixError(f"{path}: unknown reproducer {r.get('name')!r}; known: {', '.join(sorted(known))}")
            want = k.get("expect", {}).get(r["name"], default)
            if want not in EXPECTATIONS:
                raise MatrixError(f"{path}: {k['spec']} x {r['name']}: expect must be one of {', '.join(EXPECTATIONS)}")
            cells.append(Cell(kernel=k["spec"], reproducer=r["name"], expect=want,
                              xfail=k.get("xfail", {}).get(r["name"]), skip=k.get("skip", {}).get(r["name"]),
                              cpus=r.get("cpus"), args=list(r.get("args", [])), duration=r.get("duration"),
                              count=r.get("count")))
    return Matrix(path, [k["spec"] for k in kernels], [r["name"] for r in repros], cells)


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


def judge(cell: Cell, verdict: str | None) -> str:
    return expect.judge(cell.expect, verdict, cell.xfail, cell.skip)


@dataclass
class CellResult:
    cell: Cell
    status: str
    verdict: str | None = None
    doc: dict = field(default_factory=dict)
    run_dir: Path | None = None
    seconds: float = 0.0
    kernel_wait_s: float = 0.0


class Runner:
    def __init__(self, cells: list[Cell], out: results.RunDir, jobs: int, cores: int | None,
                 echo: Callable[[str], None], base: verify.Options, verbose: bool = False) -> None:
        self.cells = cells
        self.verbose = verbose
        self.cancel = threading.Event()
        self.interrupted: BaseException | None = None
        self.out = out
        self.jobs = max(1, jobs)
        self.budget = CoreBudget(cores)
        self.echo = echo
        self.base = base
        self.lock = threading.Lock()
        self.done = 0
        self.results: dict[int, CellResult] = {}

    def _say(self, msg: str) -> None:
        with self.lock:
            self.echo(msg)

    def _prefetch(self) -> dict[str, concurrent.futures.Future]:
        """Kernels downloaded one after another in cell order, in the background."""
        pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="kstall-fetch",
                                                     initializer=procs.background_priority)
        self._fetch_pool = pool
        futures: dict[str, concurrent.futures.Future] = {}
        for c in self.cells:
            if not c.skip and c.kernel not in futures:
                futures[c.kernel] = pool.submit(resolve, c.kernel, True, self._say)
        return futures

    def _run_cell(self, idx: int, cell: Cell, kernels: dict[str, concurrent.futures.Future]) -> CellResult:
        if cell.skip:
            return CellResult(cell, "skip")
        t0 = time.monotonic()
        try:
            kernels[cell.kernel].result()
        except SpecError as e:
            return CellResult(cell, judge(cell, "ERROR"), "ERROR", {"line": f"ERROR: {e}", "reason": str(e)},
                              seconds=time.monotonic() - t0)
        waited = time.monotonic() - t0
        opts = verify.Options(**{**self.base.__dict__, "cpus": cell.cpus or self.base.cpus,
                                 "duration": cell.duration or self.base.duration,
                                 "count": cell.count or self.base.count, "repro_args": cell.args,
                                 "results_root": self.out.work / "runs", "budget": self.budget,
                                 "cancel": self.cancel})

        def echo(msg: str) -> None:
            if self.verbose:
                self._say(f"{cell.id}: {msg}")
        try:
            res = verify.verify(cell.kernel, cell.reproducer, opts, echo)
        except SpecError as e:
            return CellResult(cell, judge(cell, "ERROR"), "ERROR", {"line": f"ERROR: {e}", "reason": str(e)},
                              seconds=time.monotonic() - t0, kernel_wait_s=waited)
        return CellResult(cell, judge(cell, res.verdict.verdict), res.verdict.verdict, res.doc, res.run_dir,
                          time.monotonic() - t0, waited)

    def run(self) -> list[CellResult]:
        kernels = self._prefetch()
        todo = list(enumerate(self.cells))
        todo_lock = threading.Lock()

        def worker() -> None:
            while not self.cancel.is_set():
                with todo_lock:
                    if not todo:
                        return
                    idx, cell = todo.pop(0)
                try:
                    r = self._run_cell(idx, cell, kernels)
                except Exception as e:  # noqa: BLE001 - a cell must end with a verdict, not vanish
                    reason = f"internal error: {type(e).__name__}: {e}"
                    r = CellResult(cell, judge(cell, "ERROR"), "ERROR", {"line": f"ERROR: {reason}", "reason": reason})
                with self.lock:
                    self.results[idx] = r
                    self.done += 1
                    mark = "FAIL" if r.status in FAILING else "ok"
                    self.echo(f"[{self.done}/{len(self.cells)}] {mark:4} {r.status:<15} {cell.id}: "
                              f"{r.doc.get('line', r.verdict or r.cell.skip or '')} "
                              f"(expected {cell.expect}{', xfail' if cell.xfail else ''}; {r.seconds:.1f}s)")

        # threads (not processes) keep one place that reaps every guest; each
        # guest is started by the worker thread that waits for it
        threads = [threading.Thread(target=worker, name=f"kstall-cell-{i}", daemon=True)
                   for i in range(min(self.jobs, len(self.cells)) or 1)]
        for t in threads:
            t.start()
        try:
            for t in threads:
                while t.is_alive():
                    t.join(0.2)
        except (KeyboardInterrupt, procs.Interrupted) as e:
            # every running guest ends its run as "interrupted" and is reaped
            # by its own thread; wait for that (bounded), then report what ran
            self.interrupted = e
            self.cancel.set()
            for t in threads:
                t.join(60)
        finally:
            self._fetch_pool.shutdown(wait=False, cancel_futures=True)
        return [self.results.get(i, CellResult(c, judge(c, None))) for i, c in enumerate(self.cells)]


def default_jobs() -> int:
    return max(1, os.cpu_count() or 1)
