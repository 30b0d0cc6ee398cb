# SPDX-License-Identifier: GPL-2.0
"""`kstall analyze`, `attach` and `inspect`: a recorded hang read again, a
held guest and a vmcore handed to the developer's own debugger."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from harness.commands.shared import EXIT_USAGE, echo_stderr


def analyze_parser(sub) -> None:
    an = sub.add_parser("analyze", help="read recorded hangs again with today's signatures (no boot)",
                        description="Classifies each run's kept vCPU samples with today's signature and CPU-state "
                        "files and compares them, CPU by CPU, with what the run recorded. Exit status 0 when "
                        "every run reads the same, 1 when one reads differently, 2 usage.",
                        epilog="example: kstall analyze results/*-perf-refresh-*")
    an.add_argument("runs", nargs="+", type=Path, help="run directories (with run.json and sample-*.json)")
    an.add_argument("--json", action="store_true", help="print the readings as JSON")
    an.set_defaults(func=cmd_analyze)


def cmd_analyze(a: argparse.Namespace) -> int:
    from harness.drivers import analyze
    try:
        readings = [analyze.read(r) for r in a.runs]
    except analyze.AnalyzeError as e:
        echo_stderr(f"error: {e}")
        return EXIT_USAGE
    print(json.dumps([r.to_json() for r in readings], indent=1) if a.json else "\n".join(r.text() for r in readings))
    return 0 if all(r.agrees for r in readings) else 1


def attach_parser(sub) -> None:
    at = sub.add_parser("attach", help="gdb on a guest verify --hold keeps stopped, with the kernel's symbols",
                        description="Starts gdb (gdb-multiarch for arm64) on the held guest's gdbstub, with the "
                        "kernel's vmlinux when kstall has its debug info (kstall symbols KERNEL --debuginfo), "
                        "else a symbol file made from the captured kallsyms, and kstall's gdb commands "
                        "(kstall-bt [all]: a vCPU's stack as kstall walked it). One debugger at a time.",
                        epilog="example: kstall attach results/<run> --ex 'kstall-bt all' --ex 'p (long)jiffies' "
                        "--batch")
    at.add_argument("run", type=Path, help="the run directory verify --hold printed")
    at.add_argument("--ex", action="append", default=[], metavar="CMD", help="a gdb command run once attached "
                    "(repeatable)")
    at.add_argument("--batch", action="store_true", help="run the --ex commands and exit (gdb -batch)")
    at.set_defaults(func=cmd_attach)


def cmd_attach(a: argparse.Namespace) -> int:
    from harness.drivers import attach
    return attach.attach(a.run, a.ex, a.batch, echo_stderr)


def inspect_parser(sub) -> None:
    ins = sub.add_parser("inspect", help="open a run's vmcore in crash, drgn or gdb with the right vmlinux",
                         description="Prints what kstall knows of the hang (every CPU's stack, state and waits), "
                         "then opens RUN/vmcore (verify --vmcore) in the debugger with the kernel's vmlinux "
                         "(kstall symbols KERNEL --debuginfo fetches it; gdb falls back to the captured symbols). "
                         "Not on a terminal, or with --print, it prints the debugger's command instead.",
                         epilog="example: kstall inspect results/<run> --with crash --ex 'bt -a'")
    ins.add_argument("run", type=Path, help="a run directory with a vmcore")
    ins.add_argument("--with", dest="tool", choices=("gdb", "crash", "drgn"), default="gdb",
                     help="the debugger (default gdb: it reads the core for every kernel, DWARF or not)")
    ins.add_argument("--ex", action="append", default=[], metavar="CMD",
                     help="a command to run in batch (crash and gdb: their commands; drgn: Python); repeatable")
    ins.add_argument("--print", dest="print_only", action="store_true", help="print the command, do not run it")
    ins.set_defaults(func=cmd_inspect)


def cmd_inspect(a: argparse.Namespace) -> int:
    from harness.drivers import inspect
    return inspect.inspect(a.run, a.tool, a.ex, a.print_only, echo_stderr)
