#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0
"""syzbot's hang reproducers on distro kernels, as kstall runs them: a
benchmark of hours, resumable and shardable, never part of `make test`.

The sample, in this order (--limit N takes its first N):
  1. every reproducer whose header says status:fixed (the fix is upstream:
     where the kernel package's changelog lists it, any VULNERABLE with
     syzbot's own title must be explained);
  2. the reproducers issue 47 names (--named);
  3. every status:open one, in file-name order (--first REGEX: those whose
     title matches it first).
Each runs once on every --kernel (default debian:6.1.170; repeatable) for
--duration seconds. One that hung on a kernel runs --tries in all there
(2 of 3 is "reproduces"), and once on each --then kernel (default
debian:7.3.4), --tries in all where it hangs there too.

Each kernel's debug info is fetched first (`kstall symbols K --debuginfo`,
--no-debuginfo: not): syzbot names a hang after the functions a build
inlined, which only the debug info shows (harness/debug/inlines.py).

Every cell is one `kstall verify KERNEL FILE --duration D --json` whose
summary is kept in STATE/cells/ as it ends: an interrupted benchmark
(Ctrl-C, a session's end) resumes where it stopped, and --shard I/N splits
the bugs between machines. --table prints the table from STATE without
running anything; --into DOC merges it into DOC's rows block, keeping the
rows of bugs the state has no cell of (syzbot_rows.py). Each pass ends by writing the matrix reports a CI reads
(STATE/report/: summary.md, report.html, matrix.json, kcidb.json, ...),
one row per bug and one column per kernel, each cell told by its try that
reproduced syzbot's title, else one that hung, else its first, with how
many of its tries hung, and the record's prediction beside it.

  tests/bench/syzbot_repros.py [DIR] [--kernel K]... [--then K]... [--limit N] [--duration S]
                               [--memory MB] [--shard I/N] [--state DIR] [--table [--brief]]
"""
from __future__ import annotations

import argparse
import calendar
import functools
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from harness.analysis import bug_record  # noqa: E402
from harness.analysis.expect import CellResult  # noqa: E402
from harness.analysis.record import RunRecord  # noqa: E402
from harness.base import paths, syzkaller  # noqa: E402
from harness.drivers import explain, matrix as matrix_file  # noqa: E402
from harness.reports import formats, matrix_doc, views  # noqa: E402
from images.kernels import schemes  # noqa: E402
import syzbot_rows  # noqa: E402  (beside this file)

DEFAULT_DIR = REPO.parent / "shared" / "syzbot-repros" / "linux"
NAMED = ("0ff14ee0c4b9da917e9874e250a5f95f92fcb221", "25de48fb3bb299b593c3ea03b3f1bdb065459e24",
         "f37492de59263a4007bbf76ff9c6147f5ac5050e")


def sample(repros: Path, first: str = "") -> list[tuple[Path, syzkaller.Header]]:
    found = []
    for p in sorted(repros.glob("*.c")):
        h = syzkaller.read_header(p)
        if h is not None and not h.arch:
            found.append((p, h))
    fixed = [x for x in found if x[1].status == "fixed"]
    named = [x for x in found if x[0].stem in NAMED and x not in fixed]
    opened = [x for x in found if x[1].status == "open" and x not in named]
    if first:  # open bugs whose title matches first, then the rest, each in file-name order
        opened.sort(key=lambda x: not re.search(first, x[1].title))
    return fixed + named + opened


def slug(kernel: str) -> str:
    return re.sub(r"[^\w.]+", "-", kernel)


class State:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.cells = root / "cells"
        self.cells.mkdir(parents=True, exist_ok=True)

    def path(self, bug: str, kernel: str, n: int) -> Path:
        return self.cells / f"{bug}__{slug(kernel)}__{n}.json"

    def get(self, bug: str, kernel: str, n: int) -> dict | None:
        p = self.path(bug, kernel, n)
        return json.loads(p.read_text()) if p.exists() else None

    def tries(self, bug: str, kernel: str) -> list[dict]:
        return [json.loads(p.read_text()) for p in sorted(self.cells.glob(f"{bug}__{slug(kernel)}__*.json"))]


def run_cell(path: Path, header: syzkaller.Header, kernel: str, n: int, args: argparse.Namespace, state: State,
             child: list) -> dict:
    cmd = [sys.executable, str(REPO / "harness" / "kstall"), "verify", kernel, str(path), "--duration",
           f"{args.duration:g}", "--json", "--no-snapshot", "--results", str(state.root / "runs")]
    cmd += ["--memory", str(args.memory)] if args.memory else []
    t = time.monotonic()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    child[:] = [p]
    out, err = p.communicate()
    child[:] = []
    wall = round(time.monotonic() - t, 1)
    try:
        doc = json.loads(out)
    except json.JSONDecodeError:
        doc = {"verdict": "ERROR", "line": f"ERROR: kstall printed no record (exit {p.returncode}): "
                                           f"{err.strip().splitlines()[-1] if err.strip() else ''}"}
    ev = doc.get("evidence") or {}
    reach = ev.get("reach") or {}
    health = ev.get("health") or {}
    cell = {"bug": header.bug_id, "status": header.status, "title": header.title, "kernel": kernel, "try": n,
            "duration": args.duration, "memory_mb": (doc.get("vm") or {}).get("memory_mb"),
            "verdict": doc.get("verdict"), "line": doc.get("line", ""),
            "reason": doc.get("reason", ""), "title_found": doc.get("title", ""),
            "matched": ((doc.get("reproducer") or {}).get("syzbot") or {}).get("matched"),
            "needs": reach.get("needs", []), "reached": reach.get("reached", []),
            "pseudo_calls": reach.get("pseudo_calls", []),
            "starved": health.get("why", "") if health.get("mostly") else "",
            "health_events": health.get("events", []), "oom_kills": (health.get("agent") or {}).get("oom_kills"),
            "prediction": (doc.get("prediction") or {}).get("status"),
            "console_titles": [t["title"] for t in ev.get("console_titles", [])],
            "waits": (doc.get("waits") or {}).get("findings") or (doc.get("waits") or {}).get("error"),
            "wall_s": wall, "to_outcome_s": (doc.get("timings") or {}).get("to_outcome_s"),
            "results_dir": doc.get("results_dir"), "exit": p.returncode}
    if p.returncode in (-signal.SIGINT, 130) or "interrupted" in cell["reason"]:
        raise KeyboardInterrupt
    paths.write_atomic(state.path(header.bug_id, kernel, n), json.dumps(cell, indent=1) + "\n")
    return cell


def hung(cell: dict) -> bool:
    return cell.get("verdict") in ("VULNERABLE", "CRASHED")


def telling(tries: list[dict]) -> dict:
    """The try a bug's cell is told by, as its column says it: the first
    that reproduced syzbot's title, else the first that hung, else the first."""
    return next((t for t in tries if t.get("matched")), None) or next((t for t in tries if hung(t)), tries[0])


def root(tries: list[dict]) -> str:
    """The root of a hung task's chain (who holds what it waits for, task_waits.py), from the first try with one."""
    waits = next((t["waits"] for t in tries if t.get("waits")), None)
    if not waits:
        return ""
    return f"; {waits if isinstance(waits, str) else waits[0]}"


def cell_text(tries: list[dict], waits: bool = True) -> str:
    """One kernel's column for a bug: what its tries gave (waits: with the
    root of a hung task's chain)."""
    if not tries:
        return ""
    first = tries[0]
    n = len(tries)
    chain = root if waits else (lambda _: "")
    repro = [t for t in tries if t.get("matched")]
    if repro:
        how = repro[0]["matched"]["how"]
        return f"reproduced ({how}) {len(repro)}/{n}{chain(repro)}"
    if any(hung(t) for t in tries):
        t = next(t for t in tries if hung(t))
        hangs = [x for x in tries if hung(x)]
        return f"different: {t['title_found'] or t['line']} {len(hangs)}/{n}{chain(hangs)}"
    if first["verdict"] == "NOT_REPRODUCED":
        reached = ", ".join(first.get("reached", [])[:4]) + ("..." if len(first.get("reached", [])) > 4 else "")
        if not reached:
            pseudo = ", ".join(first.get("pseudo_calls", [])[:4])
            reached = f"not counted, pseudo-calls: {pseudo}" if pseudo else "not counted"
        weaker = f"; weaker: {first['health_events'][0]}" if first.get("health_events") else ""
        return f"not reproduced ({first['duration']:g} s; reached: {reached}{weaker})"
    if first.get("starved"):
        return f"starved ({first['starved']}: {(first.get('health_events') or [''])[0]})"
    if first.get("needs"):
        return views.need_text(first["needs"][0])
    return first["line"][:90]


def table(items: list[tuple[Path, syzkaller.Header]], kernels: list[str], state: State, brief: bool = False) -> str:
    """One row per bug that ran; brief: as repro/README.md keeps them (no
    link or status, no wait chains, "-" where a kernel did not run it)."""
    head = "| bug | syzbot's title | " if brief else "| bug | status | syzbot's title | "
    rows = [head + " | ".join(kernels) + " |", "| --- " * (len(kernels) + 2 + (not brief)) + "|"]
    done = 0
    for p, h in items:
        cols = [cell_text(state.tries(h.bug_id, k), waits=not brief) for k in kernels]
        if not any(cols):
            continue
        done += 1
        if brief:
            rows.append(f"| {h.bug_id[:12]} | {h.title} | " + " | ".join(c or "-" for c in cols) + " |")
        else:
            rows.append(f"| [{h.bug_id[:12]}]({h.link}) | {h.status} | {h.title} | " + " | ".join(cols) + " |")
    return "\n".join(rows) + f"\n\n{done} bugs run\n"


def outcome(cell: dict) -> str:
    """A cell summary as the matrix reports count it (harness/reports/views.py SYZBOT_OUTCOMES)."""
    return views.syzbot_outcome({"verdict": cell.get("verdict"), "needs": cell.get("needs"),
                                 "syzbot": {"matched": cell.get("matched")},
                                 "health": {"mostly": bool(cell.get("starved"))}})


def figures(items: list[tuple[Path, syzkaller.Header]], kernels: list[str], state: State) -> str:
    """Per kernel: each bug by outcome (the try it is told by), the time to each verdict
    (median), the benchmark's total; then every try, and the fixed bugs."""
    lines = []
    for k in kernels:
        told = [telling(tries) for _, h in items if (tries := state.tries(h.bug_id, k))]
        if not told:
            continue
        every = [c for _, h in items for c in state.tries(h.bug_id, k)]
        n = dict.fromkeys(views.SYZBOT_OUTCOMES, 0)
        for c in told:
            n[outcome(c)] += 1
        times = {}
        for c in every:
            times.setdefault(c["verdict"] or "?", []).append(c["to_outcome_s"] if c["verdict"] == "VULNERABLE"
                                                            and c.get("to_outcome_s") else c["wall_s"])
        lines.append(f"{k}: {len(told)} bugs: {views.syzbot_counts_text(n)}; {len(every)} cells in "
                     f"{sum(c['wall_s'] for c in every) / 3600:.2f} h; median time to " +
                     ", ".join(f"{v} {statistics.median(t):.0f} s ({len(t)})" for v, t in sorted(times.items())))
        fixed = [c for c in told if c["status"] == "fixed"]
        if fixed:
            listed = [c for c in fixed if c.get("prediction") == "fixed"]
            lines.append(f"  status:fixed: {len(fixed)} run; the changelog lists the fix of {len(listed)}; "
                         f"reproduced with syzbot's title: {sum(outcome(c) == 'reproduced' for c in fixed)} "
                         f"({sum(outcome(c) == 'reproduced' for c in listed)} of those the changelog lists)")
    return "\n".join(lines) or "no cells yet"


def report(directory: Path, items: list[tuple[Path, syzkaller.Header]], kernels: list[str], state: State,
           duration: float) -> Path:
    """The matrix reports a CI reads (harness/reports/), from the try each
    cell is told by (telling): one row per bug, one column per kernel, with
    how many of its tries hung."""
    m = matrix_file.load(directory, kernels=kernels, duration=duration)
    cells = {(c.kernel, Path(c.spec).resolve()): c for c in m.cells}
    results, tried, started = [], {}, time.time()
    for p, h in items:
        for k in kernels:
            tries = state.tries(h.bug_id, k)
            run = Path(telling(tries).get("results_dir") or "/nonexistent") if tries else None
            cell = cells.get((k, p.resolve()))
            if run is None or cell is None or not (run / "run.json").is_file():
                continue
            rec = RunRecord.from_json(json.loads((run / "run.json").read_text()))
            rec.prediction = prediction(k, p, h)  # today's rules on the bug's record, as verify would say it
            started = min(started, calendar.timegm(time.strptime(rec.started, "%Y-%m-%dT%H:%M:%SZ")))
            results.append(CellResult(cell, "pass", rec, run, telling(tries)["wall_s"]))
            if len(tries) > 1:
                tried[cell.id] = f"{sum(hung(t) for t in tries)}/{len(tries)}"
    out = state.root / "report"
    doc = matrix_doc.matrix_doc(m, results, out, "syzbot-bench", None, started, 1, os.cpu_count() or 1)
    doc["reproducers"] = [r for r in doc["reproducers"] if any(c["reproducer"] == r for c in doc["cells"])]
    for c in doc["cells"]:
        if c["id"] in tried:
            c["tries"] = tried[c["id"]]
    formats.write_all(out, doc)
    return out


@functools.lru_cache(maxsize=None)
def _kernel(spec: str):
    return schemes.resolve(spec)


def prediction(kernel: str, path: Path, header: syzkaller.Header) -> dict | None:
    """What the bug's record predicts for the kernel (`kstall explain`), no boot."""
    record = syzkaller.record_beside(path)
    rec = bug_record.of({}, header.bug_id, record) if record else None
    return explain.predict(_kernel(kernel), rec).to_json() if rec else None


def fetch_debuginfo(kernel: str) -> None:
    """The kernel's vmlinux with DWARF into kstall's cache (once: a cached one is kept)."""
    cmd = [sys.executable, str(REPO / "harness" / "kstall"), "symbols", kernel, "--debuginfo"]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
        said = (p.stdout.strip() or p.stderr.strip()).splitlines()[-1:] or [f"exit {p.returncode}"]
    except subprocess.TimeoutExpired:
        said = ["timed out after 1800 s"]
    print(f"debug info of {kernel}: {said[0]}", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir", nargs="?", type=Path, default=DEFAULT_DIR, help="reproducers in syzkaller-repros' layout")
    ap.add_argument("--kernel", action="append", help="kernels every bug runs on (default debian:6.1.170)")
    ap.add_argument("--then", action="append", help="kernels a bug that hung runs on too (default debian:7.3.4)")
    ap.add_argument("--duration", type=float, default=120)
    ap.add_argument("--memory", type=int, help="guest memory in MB (default: syzkaller's environment's)")
    ap.add_argument("--tries", type=int, default=3, help="tries on each kernel where a bug hung")
    ap.add_argument("--limit", type=int, help="the sample's first N bugs only")
    ap.add_argument("--only", action="append", help="bugs whose id starts with this (repeatable)")
    ap.add_argument("--first", default="", metavar="REGEX",
                    help="open bugs whose title matches go first (the rest follow, in file-name order)")
    ap.add_argument("--shard", default="1/1", help="I/N: this machine's share of the bugs")
    ap.add_argument("--state", type=Path, default=paths.cache_dir() / "bench" / "syzbot")
    ap.add_argument("--table", action="store_true", help="print the table from the state, run nothing")
    ap.add_argument("--brief", action="store_true", help="with --table: the rows as repro/README.md keeps them")
    ap.add_argument("--no-debuginfo", action="store_true", help="do not fetch the kernels' debug info")
    ap.add_argument("--into", type=Path, metavar="DOC",
                    help="rather than print the table, merge the rows into DOC's rows block (syzbot_rows.py)")
    ap.add_argument("--block", default="", metavar="NAME",
                    help="with --into: the rows block named NAME (`<!-- rows NAME -->`), where DOC keeps several")
    ap.add_argument("--pass", dest="pass_name", default=time.strftime("%Y-%m-%d", time.gmtime()),
                    help="with --into: the name of this pass's line of figures (default today)")
    args = ap.parse_args()
    first_kernels = args.kernel or ["debian:6.1.170"]
    then = [k for k in (args.then or ["debian:7.3.4"]) if k not in first_kernels]
    items = sample(args.dir, args.first)
    if args.only:
        items = [x for x in items if x[1].bug_id.startswith(tuple(args.only))]
    if args.limit:
        items = items[:args.limit]
    i, n = map(int, args.shard.split("/"))
    mine = [x for k, x in enumerate(items) if k % n == i - 1]
    state = State(args.state)
    kernels = [*first_kernels, *then]
    # a shell starts a background job with SIGINT ignored: say it ends the benchmark, as SIGTERM does
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    if not args.table:
        child: list = []
        try:
            for kern in ([] if args.no_debuginfo else kernels):
                fetch_debuginfo(kern)
            t0 = time.monotonic()

            def cell(p: Path, h: syzkaller.Header, k: str, t: int) -> dict:
                return state.get(h.bug_id, k, t) or run_cell(p, h, k, t, args, state, child)

            for k, (p, h) in enumerate(mine, 1):
                cells = [cell(p, h, kern, 1) for kern in first_kernels]
                hung_on = [c["kernel"] for c in cells if hung(c)]
                cells += [cell(p, h, kern, t) for kern in hung_on for t in range(2, args.tries + 1)]
                for kern in then if hung_on else []:
                    cells.append(cell(p, h, kern, 1))
                    if hung(cells[-1]):
                        cells += [cell(p, h, kern, t) for t in range(2, args.tries + 1)]
                print(f"[{k}/{len(mine)} {(time.monotonic() - t0) / 60:.0f} min] {h.bug_id[:12]} {h.status}: "
                      + "; ".join(f"{c['kernel']}#{c['try']} {c['line'][:100]}" for c in cells), flush=True)
        except KeyboardInterrupt:
            for p in child:
                p.send_signal(signal.SIGINT)
                try:
                    p.wait(60)
                except subprocess.TimeoutExpired:
                    p.kill()
            print("interrupted: run it again to resume", file=sys.stderr)
            return 130
    if args.into:
        every = sample(args.dir)  # every bug the state has a cell of, not only --only's
        figs = [x.strip() for x in figures(every, kernels, state).split("\n") if not x.startswith(" ")]
        args.into.write_text(syzbot_rows.merge(args.into.read_text(), table(every, kernels, state, brief=True),
                                               [f"- pass {args.pass_name}:", *(f"  - {x}" for x in figs)],
                                               args.block))
        print(f"rows merged into {args.into}")
        return 0
    print(table(items, kernels, state, brief=args.brief))
    print(figures(items, kernels, state))
    print(f"reports: {report(args.dir, items, kernels, state, args.duration)}")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
