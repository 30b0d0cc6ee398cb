# SPDX-License-Identifier: GPL-2.0
"""`kstall matrix` and `report`: a kernel x reproducer matrix run for CI,
its reports written and shards merged (harness/drivers/matrix.py)."""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from harness.base import procs, rundir
from harness.commands.shared import ACCELS, EXIT_USAGE, arch_choices, echo_stderr
from harness.reports import formats


def cmd_matrix(a: argparse.Namespace) -> int:
    from harness.reports import matrix_doc, text
    from harness.analysis import expect
    from harness.drivers import matrix
    from harness.drivers.options import DEFAULT_PMISS, GuestOptions, Options, RunOptions
    try:
        m = matrix.load(a.file, getattr(a, "arch", None), a.kernel, a.duration)
        shard = expect.parse_shard(a.shard) if a.shard else None
        cells = expect.select(m.cells, shard, a.only, a.exclude)
    except expect.MatrixError as e:
        echo_stderr(f"error: {e}")
        return EXIT_USAGE
    if not cells:
        echo_stderr("error: no cell is selected (check --only/--exclude/--shard)")
        return EXIT_USAGE
    jobs = a.jobs or matrix.default_jobs()
    label = "matrix" + (f"-shard-{a.shard.replace('/', 'of')}" if a.shard else "")
    out = rundir.RunDir(label, a.results)
    base = Options(guest=GuestOptions(accel=a.accel, memory_mb=a.memory, snapshot=not a.no_snapshot),
                   run=RunOptions(attempts=a.attempts, pmiss_target=DEFAULT_PMISS if a.pmiss is None else a.pmiss,
                                  pmiss_given=a.pmiss is not None, hang_after=a.hang_after))
    runner = matrix.Runner(cells, out, jobs, a.cores, echo_stderr, base, verbose=a.verbose)
    echo_stderr(f"{len(cells)} cells over {len({c.kernel for c in cells})} kernels from {a.file}"
                f"{f', shard {a.shard}' if a.shard else ''}; {jobs} jobs on {runner.budget.cores} cores "
                "(guests boot ahead and run in turn)")
    started = time.time()
    res = runner.run()
    doc = matrix_doc.matrix_doc(m, res, out.work, out.id, a.shard, started, jobs, runner.budget.cores,
                                interrupted=runner.interrupted is not None,
                                selected=[c.id for c in expect.select(m.cells, None, a.only, a.exclude)])
    with procs.signals_deferred():  # the reports are written whole, then a Ctrl-C acts
        formats.write_all(out.work, doc)
        path = out.finalize()
    if a.json:
        print(json.dumps(doc, indent=2))
    else:
        print(text.matrix_table(doc))
        print(f"\nreports: {formats.listing(path)}")
    return 130 if runner.interrupted else doc["exit_code"]


def cmd_report(a: argparse.Namespace) -> int:
    from harness.reports import matrix_doc, text
    try:
        docs = [matrix_doc.load_doc(d) for d in a.dirs]
    except (FileNotFoundError, ValueError) as e:
        echo_stderr(f"error: {e}")
        return EXIT_USAGE
    doc = docs[0] if len(docs) == 1 and a.out is None else matrix_doc.merge(docs)
    if len(a.dirs) == 1 and a.out is None:
        target = a.dirs[0]
        formats.write_all(target, doc)
    else:
        out = rundir.RunDir("matrix-merged", a.out)
        try:
            for d in a.dirs:
                matrix_doc.copy_runs(d, out.work)
            doc["id"] = out.id
            formats.write_all(out.work, doc)
        except BaseException:
            out.abandon()
            raise
        target = out.finalize()
    print(text.matrix_table(doc))
    print(f"\nreports: {formats.listing(target)}")
    return doc["exit_code"]


def matrix_parsers(sub) -> None:
    mx = sub.add_parser("matrix", help="run a kernel x reproducer matrix (CI), write reports",
                        description="Runs every cell of a matrix file (format: ci/README.md) and writes "
                        f"{', '.join(formats.FORMATS)} into a new results directory. Exit status 1 when a "
                        "cell differs from its expectation (regression, unexpected pass, mismatch, error).",
                        epilog="examples: kstall matrix ci/matrix.toml --shard 1/2; "
                        "kstall matrix syzkaller-repros/linux --kernel debian:6.1.170 --kernel debian:7.3.4")
    mx.add_argument("file", type=Path, help="a matrix file, or a directory of syzkaller reproducers "
                    "(syzkaller-repros' linux/<bug-id>.c) to run on each --kernel")
    mx.add_argument("--kernel", action="append", metavar="SPEC",
                    help="with a directory: a kernel to run every reproducer on (repeatable)")
    mx.add_argument("--duration", type=float, metavar="S",
                    help="with a directory: each reproducer's time (default: syzkaller's environment's)")
    mx.add_argument("--jobs", type=int, help="cells in flight at once (default: host cores); guests still "
                    "share the cores, booting ahead and running in turn")
    mx.add_argument("--cores", type=int, help="host cores the guests may keep busy (default: all)")
    mx.add_argument("--shard", help="I/N: run every N-th cell starting at the I-th (CI job matrices)")
    mx.add_argument("--only", action="append", metavar="PATTERN",
                    help="cells whose kernel, reproducer or KERNEL/REPRO id matches (glob; repeatable)")
    mx.add_argument("--exclude", action="append", metavar="PATTERN", help="leave these cells out (repeatable)")
    mx.add_argument("--accel", choices=ACCELS, default="auto")
    mx.add_argument("--arch", choices=arch_choices(), help="the architecture of the rows that name none "
                    "(a row's `arch`, or [defaults] arch; default amd64)")
    mx.add_argument("--attempts", type=int, default=2)
    mx.add_argument("--memory", type=int, metavar="MB", help="guest memory (default: as verify's)")
    mx.add_argument("--pmiss", type=float, help="target P(miss) for NOT_REPRODUCED cells (as verify's --pmiss)")
    mx.add_argument("--hang-after", type=float, metavar="S", help="as verify's --hang-after, for every cell "
                    "(a reproducer row's hang_after wins)")
    mx.add_argument("--no-snapshot", action="store_true", help="boot every guest cold (no snapshots)")
    mx.add_argument("--results", type=Path, help="results root (default: results/ or $KSTALL_RESULTS)")
    mx.add_argument("--verbose", action="store_true", help="every cell's progress, not only its verdict")
    mx.add_argument("--json", action="store_true", help="print matrix.json instead of the table")
    mx.set_defaults(func=cmd_matrix, sweeps=True)

    rp = sub.add_parser("report", help="regenerate matrix reports; merge shards into one",
                        description="With one directory: rewrite its reports from its matrix.json. With several "
                        "(shards): merge them into a new results directory (or --out).")
    rp.add_argument("dirs", nargs="+", type=Path, help="matrix results directories")
    rp.add_argument("--out", type=Path, help="results root for the merged report")
    rp.set_defaults(func=cmd_report)
