# SPDX-License-Identifier: GPL-2.0
"""`kstall bisect debian`, `bisect git` and `bisect-step`: their parsers and
what each runs (harness/drivers/bisect/)."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness.base import reproducers, rundir
from harness.commands.shared import (EXIT_ERROR, EXIT_USAGE, add_build_options, add_handover_options,
                                     add_step_pmiss, add_vm_options, build_options_from, echo_stderr, options_from,
                                     repro_help)
from images.guest.programs import BuildError
from images.kernels.kernel import SpecError


def add_bisect_options(p: argparse.ArgumentParser, what: str) -> None:
    """The ends, the per-step P(miss) target and --resume, shared by every bisect kind."""
    p.add_argument("--old", help=f"older end: {what}")
    p.add_argument("--new", help=f"newer end: {what}")
    add_step_pmiss(p)
    p.add_argument("--resume", type=Path, metavar="DIR", help="continue the bisection recorded in DIR")


# the options `bisect git` hands on to each `bisect-step` (name, takes a value)
FORWARDED = (("cpus", True), ("memory", True), ("accel", True), ("cmdline", True), ("duration", True),
             ("attempts", True), ("freeze_after", True), ("stuck_after", True), ("hang_after", True), ("samples", True),
             ("vmlinux", True), ("config", True), ("debuginfo", False), ("jobs", True), ("build_timeout", True),
             ("step_pmiss", True), ("no_snapshot", False))


def forwarded_args(a: argparse.Namespace) -> list[str]:
    """The options of a `bisect git` that differ from bisect-step's defaults."""
    top = argparse.ArgumentParser(add_help=False)
    bisect_step_parser(top.add_subparsers(dest="command"))
    defaults = vars(top.parse_args(["bisect-step", a.reproducer or "x"]))
    out: list[str] = []
    for name, valued in FORWARDED:
        v = getattr(a, name, None)
        if v == defaults.get(name):
            continue
        flag = "--" + name.replace("_", "-")
        for item in (v if isinstance(v, list) else [v]):
            if valued:
                out += [flag, str(Path(item).resolve()) if isinstance(item, Path) else str(item)]
            elif item:
                out.append(flag)
    return out + (["--", *a.repro_args] if a.repro_args else [])


def cmd_bisect_debian(a: argparse.Namespace) -> int:
    from harness.drivers import case as cases
    from harness.drivers.bisect import debian as bisect_debian
    from harness.drivers.bisect.steps import StepPolicy
    resumed = None
    try:
        if a.resume:
            resumed = bisect_debian.Resumed.load(a.resume)
            a.old, a.new, a.reproducer = a.old or resumed.old, a.new or resumed.new, a.reproducer or resumed.reproducer
        if not (a.old and a.new and a.reproducer):
            echo_stderr("error: --old, --new and REPRODUCER are needed (or --resume DIR)")
            return EXIT_USAGE
        if a.arch:  # both ends in that architecture's flavour: 6.16.12 -> 6.16.12-arm64
            from images.kernels import debian
            from harness.base import arch
            a.old, a.new = (debian.with_arch(v, arch.named(a.arch).flavour) for v in (a.old, a.new))
        a.reproducer = reproducers.canonical_spec(a.reproducer)
        repro = cases.load(a.reproducer, echo_stderr)
        bisect_debian.candidates(a.old, a.new)
    except (LookupError, FileNotFoundError, BuildError) as e:
        echo_stderr(f"error: {e.args[0] if isinstance(e, KeyError) else e}")
        return EXIT_USAGE
    except SpecError as e:
        echo_stderr(f"error: {e}")
        return EXIT_ERROR
    policy = StepPolicy(a.reproducer, options_from(a), pmiss_target=a.step_pmiss, loaded=repro)
    if resumed:
        resumed.teach(policy)
    out = rundir.RunDir(f"bisect-debian-{a.old}-{a.new}-{repro.name}", a.results)
    opts_root = out.work / "runs"
    policy.opts.results_root = opts_root
    try:
        doc = bisect_debian.run(a.old, a.new, policy, out, echo_stderr, prefetch=not a.no_prefetch,
                                resumed=resumed.steps if resumed else None, argv=sys.argv, record=repro.record)
    finally:
        path = out.finalize()
        echo_stderr(f"bisection state and step runs: {path} (resume with --resume {path})")
    print(doc["summary"])
    for line in bisect_debian.record_lines(doc):
        print(f"  {line}")
    print(f"  {doc['verifies']} verifies over {len(doc['candidates'])} versions, {doc['wall_s']}s "
          f"({doc['seconds_per_step']}s per step); details: {path}/bisect.json")
    return 0 if doc["direction"] in ("regression", "fix") else EXIT_ERROR


def cmd_bisect_git(a: argparse.Namespace) -> int:
    from harness.drivers import case as cases
    from harness.drivers.bisect import git as bisect_git
    from harness.drivers.bisect.steps import StepPolicy
    resumed = None
    try:
        if a.resume:
            prev = resumed = bisect_git.load(a.resume)
            a.tree = a.tree or Path(prev["tree"])
            a.old, a.new, a.reproducer = a.old or prev["old"], a.new or prev["new"], a.reproducer or prev["reproducer"]
        if not (a.tree and a.old and a.new and a.reproducer):
            echo_stderr("error: TREE, --old, --new and REPRODUCER are needed (or --resume DIR)")
            return EXIT_USAGE
        a.reproducer = reproducers.canonical_spec(a.reproducer)
        repro = cases.load(a.reproducer, echo_stderr)
        bisect_git.check_tree(a.tree.resolve(), a.old, a.new)
        build = build_options_from(a)
        build.config_files()
    except (LookupError, FileNotFoundError, BuildError) as e:
        echo_stderr(f"error: {e.args[0] if isinstance(e, KeyError) else e}")
        return EXIT_USAGE
    except SpecError as e:
        echo_stderr(f"error: {e}")
        return EXIT_USAGE
    policy = StepPolicy(a.reproducer, options_from(a), pmiss_target=a.step_pmiss, loaded=repro)
    out = rundir.RunDir(f"bisect-git-{a.tree.resolve().name}-{a.old[:12]}-{a.new[:12]}-{repro.name}", a.results)
    policy.opts.results_root = out.work / "runs"
    try:
        doc = bisect_git.run(a.tree, a.old, a.new, a.reproducer, policy, build, out, echo_stderr,
                             forwarded_args(a), resumed=resumed, argv=sys.argv)
    except SpecError as e:
        echo_stderr(f"error: {e}")
        return EXIT_ERROR
    finally:
        path = out.finalize()
        echo_stderr(f"bisection state, logs and step runs: {path} (resume with --resume {path})")
    print(doc["summary"])
    builds = [s["build_s"] for s in doc["steps"] if s.get("build_s")]
    print(f"  {len(doc['steps'])} steps ({doc['verifies']} verified, {len(builds)} built, "
          f"{sum(builds):.0f}s building) over {doc['commits']} commits, {doc['wall_s']}s; details: {path}/bisect.json")
    return 0 if doc.get("culprit") else EXIT_ERROR


def cmd_bisect_step(a: argparse.Namespace) -> int:
    from harness.drivers import case as cases
    from harness.drivers.bisect import git as bisect_git
    try:
        a.reproducer = reproducers.canonical_spec(a.reproducer)
        cases.load(a.reproducer, echo_stderr)
        return bisect_git.bisect_step(a.tree.resolve(), a.reproducer, options_from(a), build_options_from(a),
                                      a.state.resolve() if a.state else None, a.old_state, a.step_pmiss,
                                      echo_stderr)
    except (reproducers.ReproducerError, BuildError) as e:
        echo_stderr(f"error: {e}")
        return bisect_git.EXIT_ABORT
    except SpecError as e:
        echo_stderr(f"error: {e}")
        return bisect_git.EXIT_ABORT


def bisect_parsers(sub) -> None:
    bs = sub.add_parser("bisect", help="find the version or commit that introduced or fixed a hang")
    bsub = bs.add_subparsers(dest="kind", required=True, metavar="KIND")
    bd = bsub.add_parser("debian", help="bisect over Debian kernel package versions (no build)",
                         description="Verifies both ends, works out whether the hang came (regression) or went "
                         "(fix), then binary-searches the Debian versions between, downloading the next candidates "
                         "in the background. A clean step is repeated until its P(miss) reaches --step-pmiss. "
                         "A step counts as reproducing only with the bad end's hang (its signature, or its "
                         "title when no signature names it); another hang or a crash is skipped, with the "
                         "reason. Exit 0 when it names a boundary, 4 otherwise.",
                         epilog="example: kstall bisect debian --old 6.12.107 --new 6.16.12 perf-refresh")
    bd.add_argument("reproducer", nargs="?", help=repro_help())
    bd.add_argument("repro_args", nargs="*", help="reproducer arguments (after --)")
    add_bisect_options(bd, "a Debian upstream version such as 6.12.107 or 6.16.12; a -rt suffix on both ends "
                           "(6.19.14-rt) bisects that flavour")
    bd.add_argument("--no-prefetch", action="store_true", help="download each kernel only when its step starts")
    add_vm_options(bd)
    bd.set_defaults(func=cmd_bisect_debian, sweeps=True)

    bg = bsub.add_parser("git", help="bisect a kernel git tree (builds every step)",
                         description="Builds and verifies both ends (build:TREE@REV, out of tree, in kstall's cache), "
                         "works out the direction (regression, or fix with the terms vulnerable/fixed), then runs "
                         "`git bisect start --no-checkout` and `git bisect run kstall bisect-step`. The work tree "
                         "is never modified and `git bisect reset` always runs. A commit that does not build is "
                         "skipped. Exit 0 when it names the commit, 4 otherwise.",
                         epilog="example: kstall bisect git ~/linux --old v6.17 --new HEAD perf-refresh")
    bg.add_argument("tree", nargs="?", type=Path, help="kernel git tree")
    bg.add_argument("reproducer", nargs="?", help=repro_help())
    bg.add_argument("repro_args", nargs="*", help="reproducer arguments (after --)")
    add_bisect_options(bg, "a commit (any rev git understands)")
    add_build_options(bg)
    add_vm_options(bg)
    bg.set_defaults(func=cmd_bisect_git, sweeps=True)



def bisect_step_parser(sub) -> None:
    st = sub.add_parser("bisect-step", help="one step of `git bisect run`: build, verify, exit 0/1/125",
                        description="Builds the commit under test (BISECT_HEAD, else HEAD) out of tree and verifies "
                        "it. Exit 0 when it is in the old state, 1 in the new state, 125 when it can not be judged "
                        "(build failure, ERROR, INCONCLUSIVE, a different crash), 128 to abort the bisection "
                        "(too many ERRORs). Old = does not reproduce, unless --old-state reproduces (a fix hunt).",
                        epilog="example: git bisect run harness/kstall bisect-step perf-refresh --tree .")
    st.add_argument("reproducer", help=repro_help())
    st.add_argument("repro_args", nargs="*", help="reproducer arguments (after --)")
    st.add_argument("--tree", type=Path, default=Path("."), help="kernel git tree (default: the current directory)")
    st.add_argument("--old-state", choices=("clean", "reproduces"), default="clean",
                    help="what git's old/good term means (default clean: hunting a regression)")
    st.add_argument("--state", type=Path, help="state file shared with `kstall bisect git`")
    add_step_pmiss(st)
    add_build_options(st)
    add_vm_options(st)
    add_handover_options(st)
    st.set_defaults(func=cmd_bisect_step, sweeps=True)
