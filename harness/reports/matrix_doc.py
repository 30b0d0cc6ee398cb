# SPDX-License-Identifier: GPL-2.0
"""matrix.json: the matrix run as one document, built from its cells' run
records. Every other report is rendered from this document alone (each cell
carries its classified CPUs, backtraces and console excerpt), so shards run
on different CI runners merge by merging their documents."""
from __future__ import annotations

import json
import os
import shutil
import time
from collections import Counter
from pathlib import Path

from harness.analysis.expect import FAILING, Cell, CellResult, Matrix, expected
from harness.analysis.record import RunRecord
from harness.base import syzkaller
from harness.reports import views

SCHEMA = "kstall.matrix/1"


def _console_excerpt(run_dir: Path | None, rec: RunRecord | None, lines: int = 40) -> list[str]:
    reports = rec.evidence.console_reports if rec else []
    if reports:
        out: list[str] = []
        for r in reports[:3]:
            out += r.get("excerpt", [])
        return out[:lines]
    if run_dir and (run_dir / "console.log").exists():
        return (run_dir / "console.log").read_text(errors="replace").splitlines()[-lines:]
    return []


def _threads_text(run_dir: Path | None) -> str:
    """A process hang's thread table (threads.txt), where a kernel hang has
    per-CPU backtraces."""
    p = run_dir / "threads.txt" if run_dir else None
    return p.read_text() if p is not None and p.is_file() else ""


def expected_text(cell: Cell, prediction: dict | None) -> str:
    """'not_reproduced', or 'vulnerable (the record: affected)' for expect = "record"."""
    if cell.expect != "record":
        return cell.expect
    return f"{expected(cell, prediction)} (the record: {(prediction or {}).get('status', 'unknown')})"


def cell_doc(r: CellResult, root: Path) -> dict:
    rec = r.record
    ev = rec.evidence if rec else None
    return {
        "id": r.cell.id, "kernel": r.cell.kernel, "reproducer": r.cell.reproducer,
        "expect": expected_text(r.cell, rec.prediction if rec else None), "xfail": r.cell.xfail, "skip": r.cell.skip,
        "prediction": rec.prediction if rec else None,
        "status": r.status, "failing": r.status in FAILING,
        "verdict": r.verdict, "line": rec.line if rec else None,
        "reason": (rec.verdict.reason if rec else None) or r.cell.skip,
        "signature": rec.verdict.signature if rec else None, "title": rec.verdict.title if rec else None,
        "confidence": rec.verdict.confidence if rec else None,
        "kernel_canonical": rec.kernel.get("canonical") if rec else None,
        "kernel_sha256": rec.kernel.get("sha256") if rec else None,
        "arch": rec.kernel.get("arch") if rec else None,
        "kernel_origin": rec.kernel.get("origin") if rec else None,
        "started": rec.started if rec else None, "vm": rec.vm if rec else None,
        "count": ev.count if ev else None, "count_name": ev.count_name if ev else None,
        "p_miss": ev.p_miss if ev else None,
        "stalls": ev.to_json()["stalls"] if ev else None, "latency": ev.latency if ev else None,
        "cpus": rec.cpus if rec else [],
        "backtraces": views.cpu_backtraces(rec.cpus if rec else []) or _threads_text(r.run_dir),
        "process": rec.process if rec else None,
        "console_excerpt": _console_excerpt(r.run_dir, rec),
        "console_titles": ev.console_titles if ev else [],
        "waits": ((rec.waits or {}).get("findings") or []) if rec else [],  # who holds what sleeping tasks wait for
        # a syzkaller reproducer's bug (title, link, how its hang matched) and what it lacked
        "syzbot": rec.reproducer.get("syzbot") if rec else None,
        "needs": ((ev.reach or {}).get("needs") or []) if ev else [],
        # whether the kernel let the program run (harness/analysis/starvation.py), without the agent's figures
        "health": {k: v for k, v in (ev.health or {}).items() if k != "agent"} or None if ev else None,
        "duration_s": (rec.timings or {}).get("repro_s") if rec else None,
        "timings": rec.timings if rec else {},
        "seconds": round(r.seconds, 2), "kernel_wait_s": round(r.kernel_wait_s, 2),
        "run_dir": os.path.relpath(r.run_dir, root) if r.run_dir else None,
    }


def bugs(m: Matrix) -> dict[str, dict]:
    """Each syzkaller reproducer of the matrix: its bug (title, link) from its header, run or not."""
    out = {}
    for c in m.cells:
        if c.reproducer not in out and c.spec.endswith(".c") and (h := syzkaller.read_header(Path(c.spec))):
            out[c.reproducer] = h.to_json()
    return out


def totals(cells: list[dict]) -> dict:
    return dict(Counter(c["status"] for c in cells))


def exit_code(cells: list[dict]) -> int:
    return 1 if any(c["status"] in FAILING for c in cells) else 0


def matrix_doc(m: Matrix, results: list[CellResult], root: Path, run_id: str, shard: str | None,
               started: float, jobs: int, cores: int, interrupted: bool = False,
               selected: list[str] | None = None) -> dict:
    """selected: the ids of every cell of the run across its shards (what a
    merge must find), by default those of results."""
    cells = [cell_doc(r, root) for r in results]
    return {"schema": SCHEMA, "id": run_id, "matrix": str(m.path), "shards": [shard] if shard else [],
            "bugs": bugs(m), "about": m.about,
            "selected": selected if selected is not None else [c["id"] for c in cells],
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
            "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "wall_s": round(time.time() - started, 1), "interrupted": interrupted,
            "host": {"cores": cores, "jobs": jobs}, "kernels": m.kernels, "reproducers": m.reproducers,
            "cells": cells, "totals": totals(cells), "failing": [c["id"] for c in cells if c["failing"]],
            "exit_code": exit_code(cells)}


def merge(docs: list[dict]) -> dict:
    """One document from shards of the same matrix (cells keyed by id). A
    cell of the run that no shard holds (a shard lost, not merged) is a
    failing cell, "missing", named."""
    if not docs:
        raise ValueError("nothing to merge")
    kernels: list[str] = []
    repros: list[str] = []
    cells: dict[str, dict] = {}
    for d in docs:
        kernels += [k for k in d["kernels"] if k not in kernels]
        repros += [r for r in d["reproducers"] if r not in repros]
        for c in d["cells"]:
            cells[c["id"]] = c
    # documents from before "selected" ran every kernel x reproducer
    selected = list(dict.fromkeys(i for d in docs for i in d.get("selected", [f"{k}/{r}" for k in d["kernels"]
                                                                                     for r in d["reproducers"]])))
    shards = sorted({s for d in docs for s in d.get("shards", [])})
    for cell_id in selected:
        if cell_id not in cells:
            cells[cell_id] = _missing(cell_id, shards)
    order = {(k, r): i for i, (k, r) in enumerate((k, r) for k in kernels for r in repros)}
    merged = sorted(cells.values(), key=lambda c: order.get((c["kernel"], c["reproducer"]), 1 << 30))
    first = docs[0]
    return {**first, "id": first["id"] + (f"+{len(docs) - 1}" if len(docs) > 1 else ""), "shards": shards,
            "selected": selected,
            "started": min(d["started"] for d in docs), "finished": max(d["finished"] for d in docs),
            "wall_s": max(d["wall_s"] for d in docs), "interrupted": any(d.get("interrupted") for d in docs),
            "kernels": kernels, "reproducers": repros, "cells": merged, "totals": totals(merged),
            "bugs": {k: v for d in docs for k, v in d.get("bugs", {}).items()},
            "about": {k: v for d in docs for k, v in d.get("about", {}).items()},
            "failing": [c["id"] for c in merged if c["failing"]], "exit_code": exit_code(merged)}


def _missing(cell_id: str, shards: list[str]) -> dict:
    kernel, _, reproducer = cell_id.rpartition("/")
    doc = cell_doc(CellResult(Cell(kernel, reproducer), "missing"), Path("."))
    merged = f" (merged shards: {', '.join(shards)})" if shards else ""
    return doc | {"reason": f"no merged shard ran this cell{merged}: a shard is missing"}


def load_doc(directory: Path) -> dict:
    p = directory / "matrix.json"
    if not p.is_file():
        raise FileNotFoundError(f"{directory}: no matrix.json (not a matrix results directory)")
    return json.loads(p.read_text())


def copy_runs(src: Path, dest: Path) -> None:
    """A merged report keeps its cells' run directories next to it."""
    runs = src / "runs"
    if runs.is_dir():
        for r in runs.iterdir():
            target = dest / "runs" / r.name
            if not target.exists():
                shutil.copytree(r, target)
