# SPDX-License-Identifier: GPL-2.0
"""`kstall matrix`: kernels x reproducers, each cell a verify run, judged
against the expectation the matrix file states for it (the file and the
judgement: harness/analysis/expect.py).

Kernels are fetched in the background, in cell order, while earlier cells
run. Cells run side by side only as far as the host's cores allow (a booting
guest holds one core, a running one its vCPUs; harness/guest/cores.py), so a guest
boots while another runs and starts the moment the cores are free. Sharding
(--shard I/N) takes every N-th cell: a CI system's job matrix spreads the
cells, kstall has no scheduler of its own.
"""
from __future__ import annotations

import dataclasses
import os
import threading
import time
import tomllib
from pathlib import Path
from typing import Callable

from harness.analysis import expect, record
from harness.analysis.expect import FAILING, Cell, CellResult, MatrixError, judge_cell
from harness.analysis.verdict import VerdictKind
from harness.base import arch, background, procs, reproducers, rundir as results, syzkaller
from harness.drivers import case as cases, verify
from harness.drivers.options import Options
from harness.guest.cores import CoreBudget
from images.kernels.kernel import SpecError
from images.kernels import schemes
from images.kernels.schemes import resolve


def syzkaller_dir(row: dict, base: Path) -> list[dict]:
    """A [[reproducer]] with dir = a directory of syzkaller reproducers
    (syzkaller-repros' layout: linux/<bug-id>.c), as one reproducer per bug
    (named syz-<id>), each with the row's settings; `status` keeps those
    whose header says one of its states, `bugs` those whose id starts so."""
    d = (base / row["dir"]).expanduser().resolve()
    if not d.is_dir():
        raise MatrixError(f"reproducer dir {row['dir']}: no such directory {d}")
    wanted, bugs = row.get("status"), row.get("bugs")
    out = []
    for f in sorted(d.glob("*.c")) or sorted(d.glob("*/*.c")):
        h = syzkaller.read_header(f)
        if h is None or (wanted and h.status not in wanted) or (bugs and not h.bug_id.startswith(tuple(bugs))):
            continue
        out.append({k: v for k, v in row.items() if k not in ("dir", "status", "bugs", "name")} |
                   {"name": reproducers.guest_name("syz-" + (h.bug_id[:12] or f.stem)), "path": str(f)})
    if not out:
        raise MatrixError(f"reproducer dir {d}: no syzkaller reproducer (a .c file with syzkaller's header) "
                          "is selected there")
    return out


def directory_doc(d: Path, kernels: list[str], duration: float | None) -> dict:
    """`kstall matrix DIR --kernel K...`: a directory of syzkaller reproducers x kernels, as a matrix file."""
    if not kernels:
        raise MatrixError(f"{d} is a directory: name the kernels to run it on (--kernel SPEC, repeatable)")
    row = {"dir": str(d.resolve())} | ({"duration": duration} if duration else {})
    return {"reproducer": [row], "kernel": [{"spec": k} for k in kernels]}


def load(path: Path, arch_name: str | None = None, kernels: list[str] | None = None,
         duration: float | None = None) -> expect.Matrix:
    """A matrix file (or a directory of syzkaller reproducers and kernels),
    its reproducers of the user's own checked (MatrixError). arch_name
    (--arch): the architecture of the rows that name none."""
    try:
        if path.is_dir():
            doc = directory_doc(path, kernels or [], duration)
        else:
            with open(path, "rb") as f:
                doc = tomllib.load(f)
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise MatrixError(f"{path}: {e}") from None
    base = path if path.is_dir() else path.parent
    doc["reproducer"] = [x for r in doc.get("reproducer", [])
                         for x in (syzkaller_dir(r, base) if r.get("dir") else [r])]
    default_arch = arch_name or doc.get("defaults", {}).get("arch")
    for k in doc.get("kernel", []):  # a row's architecture (or the file's) names its kernel: debian:V-arm64
        a = k.get("arch", default_arch)
        if a and "spec" in k:
            try:
                k["spec"] = schemes.for_arch(k["spec"], arch.named(a).name)
            except KeyError as e:
                raise MatrixError(f"{path}: {k['spec']}: {e.args[0]}") from None
    specs = {}
    for r in doc.get("reproducer", []):  # syzbot = "ID": the bug's reproducer, fetched when its cell runs
        if r.get("syzbot"):
            r.setdefault("name", reproducers.guest_name("syz-" + str(r["syzbot"])[:12]))
            specs[r["name"]] = syzkaller.FETCH + str(r["syzbot"])
    for r in doc.get("reproducer", []):  # a user's reproducer: path = its .toml, directory, C file or executable
        if r.get("path"):
            spec = str((base / r["path"]).resolve())
            try:
                specs[r.get("name")] = reproducers.canonical_spec(spec)
                reproducers.resolve(spec)
            except reproducers.ReproducerError as e:
                raise MatrixError(f"{path}: reproducer {r.get('name')!r}: {e}") from None
    return expect.parse(doc, path, set(reproducers.names()), specs)


class Runner:
    def __init__(self, cells: list[Cell], out: results.RunDir, jobs: int, cores: int | None,
                 echo: Callable[[str], None], base: Options, verbose: bool = False) -> None:
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
        self.loaded: dict[str, cases.Loaded] = {}  # each reproducer read once, for all its cells
        self.load_lock = threading.Lock()  # not self.lock: loading may echo
        self.done = 0
        self.results: dict[int, CellResult] = {}

    def _say(self, msg: str) -> None:
        with self.lock:
            self.echo(msg)

    def _prefetch(self, fetcher: background.Serial) -> dict[str, background.Pending]:
        """Kernels downloaded one after another in cell order, in the background."""
        fetches: dict[str, background.Pending] = {}
        for c in self.cells:
            if not c.skip and c.kernel not in fetches:
                fetches[c.kernel] = fetcher.submit(resolve, c.kernel, True, self._say)
        return fetches

    def _fetched(self, fetch: background.Pending) -> bool:
        """Wait for a cell's kernel; False: the run was stopped meanwhile."""
        while not self.cancel.is_set():
            try:
                fetch.result(0.2)
                return True
            except TimeoutError:
                continue
        return False

    def _load(self, spec: str, echo: Callable[[str], None]) -> cases.Loaded:
        with self.load_lock:
            if spec not in self.loaded:
                self.loaded[spec] = cases.load(spec, echo)
            return self.loaded[spec]

    def _run_cell(self, idx: int, cell: Cell, kernels: dict[str, background.Pending]) -> CellResult:
        if cell.skip:
            return CellResult(cell, "skip")
        t0 = time.monotonic()
        try:
            if not self._fetched(kernels[cell.kernel]):
                return CellResult(cell, judge_cell(cell, None))  # not run
        except SpecError as e:
            return _error(cell, str(e), time.monotonic() - t0)
        waited = time.monotonic() - t0
        b = self.base
        opts = dataclasses.replace(
            b, guest=dataclasses.replace(b.guest, cpus=cell.cpus or b.guest.cpus),
            run=dataclasses.replace(b.run, duration=cell.duration or b.run.duration, count=cell.count or b.run.count,
                                    hang_after=cell.hang_after or b.run.hang_after, repro_args=cell.args),
            hooks=dataclasses.replace(b.hooks, budget=self.budget, cancel=self.cancel),
            results_root=self.out.work / "runs")

        def echo(msg: str) -> None:
            if self.verbose:
                self._say(f"{cell.id}: {msg}")
        try:
            res = verify.verify(cell.kernel, self._load(cell.spec or cell.reproducer, echo), opts, echo)
        except SpecError as e:
            return _error(cell, str(e), time.monotonic() - t0, waited)
        return CellResult(cell, judge_cell(cell, res.verdict.verdict, res.record.prediction), res.record, res.run_dir,
                          time.monotonic() - t0, waited)

    def run(self) -> list[CellResult]:
        fetcher = background.Serial("fetch", procs.background_priority)
        kernels = self._prefetch(fetcher)
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
                    r = _error(cell, f"internal error: {type(e).__name__}: {e}")
                with self.lock:
                    self.results[idx] = r
                    self.done += 1
                    mark = "FAIL" if r.status in FAILING else "ok"
                    self.echo(f"[{self.done}/{len(self.cells)}] {mark:4} {r.status:<15} {cell.id}: "
                              f"{r.record.line if r.record else r.cell.skip or ''} "
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
                    procs.check_terminated()
                    t.join(0.2)
        except (KeyboardInterrupt, procs.Interrupted) as e:
            # every running guest ends its run as "interrupted" and is reaped
            # by its own thread; wait for that (bounded), then report what ran
            self.interrupted = e
            self.cancel.set()
            for t in threads:
                t.join(60)
        finally:
            fetcher.close()
        return [self.results.get(i, CellResult(c, judge_cell(c, None))) for i, c in enumerate(self.cells)]


def _error(cell: Cell, reason: str, seconds: float = 0.0, waited: float = 0.0) -> CellResult:
    """A cell that ended before its run did (its kernel could not be had, kstall failed)."""
    return CellResult(cell, judge_cell(cell, VerdictKind.ERROR), record.failed(reason), seconds=seconds,
                      kernel_wait_s=waited)


def default_jobs() -> int:
    return max(1, os.cpu_count() or 1)
