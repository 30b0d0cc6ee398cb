# SPDX-License-Identifier: GPL-2.0
"""The `kstall` command line: parses, calls one driver (harness/drivers/),
prints what it returns (harness/reports/text.py) and maps it to an exit status."""
from __future__ import annotations

import argparse
import sys
import traceback
from pathlib import Path

from harness.base import leftovers, paths, procs
from harness.commands import bisect, handover, kernels, matrix, runs
from harness.commands.shared import EXIT_ERROR, echo_stderr

# the drivers pull in the VM side (QEMU, pexpect); they are imported where
# they are used, so that `kstall report` and `--help` run anywhere

# each command's parser, in the order `kstall --help` lists them; a command
# whose results directory it writes runs (set_defaults sweeps=True) first
# clears what killed kstall runs left there
COMMANDS = (runs.verify_parser, runs.explain_parser, kernels.kernel_parsers, matrix.matrix_parsers,
            bisect.bisect_parsers, bisect.bisect_step_parser, runs.threads_parser, runs.calibrate_parser,
            handover.analyze_parser, handover.attach_parser, handover.inspect_parser, kernels.doctor_parser)


class _Version(argparse.Action):
    """--version, asking git only when it is given: a checkout's version is
    three git calls, 30 ms that every command paid for building its parser."""

    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS, **_) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS,
                         help="show program's version number and exit")

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        from harness.base.version import version
        print(f"kstall {version()}")
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="kstall", description="Reproduce kernel deadlocks and stalls in QEMU guests, "
                                "read every vCPU with GDB, classify the hang, give a verdict.")
    p.add_argument("--version", action=_Version)
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in COMMANDS:
        add(sub)
    return p


def _parse_intermixed(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """Options may come between positionals (`bisect git TREE --old A --new B
    REPRO`): the sub-command's own parser parses intermixed arguments, which
    argparse can not do from the top when there are sub-commands."""
    picked: dict[str, str] = {}
    leaf, rest = parser, argv
    while True:
        sub = next((x for x in leaf._actions if isinstance(x, argparse._SubParsersAction)), None)
        if sub is None or not rest or rest[0] not in sub.choices:
            break
        picked[sub.dest] = rest[0]
        leaf, rest = sub.choices[rest[0]], rest[1:]
    if leaf is parser or any(isinstance(x, argparse._SubParsersAction) for x in leaf._actions):
        return parser.parse_args(argv)  # no command, or an incomplete one: argparse says what is missing
    a = leaf.parse_intermixed_args(rest)
    for k, v in picked.items():
        setattr(a, k, v)
    return a


def parse_args(argv: list[str]) -> argparse.Namespace:
    """Everything after "--" goes to the reproducer, wherever the options are
    (argparse alone rejects `verify K R --cpus 4 -- --threads 3`)."""
    extra: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, extra = argv[:i], argv[i + 1:]
    a = _parse_intermixed(build_parser(), argv)
    if extra:
        if not hasattr(a, "repro_args"):
            build_parser().error(f"{a.command} takes no reproducer arguments after --")
        a.repro_args = list(a.repro_args or []) + extra
    return a


def sweep_leftovers(a: argparse.Namespace) -> None:
    root = Path(getattr(a, "results", None) or paths.results_dir())
    gone, kept = leftovers.sweep(root)
    if gone:
        echo_stderr(f"removed {len(gone)} leftover(s) of killed kstall runs: "
                    + ", ".join(p.name for p in gone[:5]) + (" ..." if len(gone) > 5 else ""))
    for p in kept:
        echo_stderr(f"kept the killed bisection {p}: resume it with --resume {p}")


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["__complete"]:  # the shell's completion (harness/completion/kstall), not a command
        from harness.drivers import complete
        print("\n".join(complete.candidates(args[1] if len(args) > 1 else "", build_parser())))
        return 0
    procs.raise_on_termination()
    a = parse_args(args)
    # an error kstall did not foresee is never a verdict: ERROR (4), and for
    # git bisect run, whose 1-127 mean "bad", an abort (128)
    failed = EXIT_ERROR
    if a.func is bisect.cmd_bisect_step:
        from harness.drivers.bisect.git import EXIT_ABORT as failed
    try:
        if getattr(a, "sweeps", False):
            sweep_leftovers(a)
        return a.func(a)
    except KeyboardInterrupt:
        echo_stderr("interrupted")
        return 130
    except procs.Interrupted as e:
        echo_stderr(f"terminated ({e})")
        return 143
    except OSError as e:  # the host's fault (a full disk, a vanished directory), not a verdict
        echo_stderr(f"error: {e}")
        return failed
    except Exception as e:  # noqa: BLE001 - a kstall bug: say so, with where
        echo_stderr(f"internal error: {type(e).__name__}: {e}\n{traceback.format_exc()}")
        return failed
