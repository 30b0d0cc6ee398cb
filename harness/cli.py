# SPDX-License-Identifier: GPL-2.0
"""The `kstall` command line: parses, calls one driver (harness/drivers/),
prints what it returns (harness/reports/text.py) and maps it to an exit status."""
from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from pathlib import Path

from harness.analysis.verdict import VerdictKind
from harness.base import leftovers, paths, procs, reproducers, rundir
from harness.reports import formats
from images.kernels import schemes
from images.kernels.kernel import SpecError
from images.guest.programs import BuildError

# the drivers pull in the VM side (QEMU, pexpect); they are imported where
# they are used, so that `kstall report` and `--help` run anywhere

EXIT_USAGE = 2
EXIT_ERROR = VerdictKind.ERROR.exit_code
# --accel: tcg-single is a row of every architecture's [accel] table (arches.toml), as kvm and tcg are
ACCELS = ("auto", "kvm", "tcg", "tcg-single")


def echo_stderr(msg: str) -> None:
    if msg.startswith("\r") or msg == "\n":
        sys.stderr.write(msg)
    else:
        sys.stderr.write(f"kstall: {msg}\n")
    sys.stderr.flush()


# -- options shared by several commands ----------------------------------------

def repro_help() -> str:
    return (f"a built-in ({', '.join(reproducers.names())}); your own C file (built static, cached), executable "
            "(a dynamic one goes in with its libraries), data file NAME.toml or its directory (with its "
            "signatures/ and calibration/); or run:'CMD ARGS', a command run in the guest over the host's root "
            "filesystem (read-only, writes to a tmpfs). A program that knows nothing of kstall is run again and "
            "again (--repeat/--duration), each completed run a pass. A syzkaller C reproducer (its header says "
            "so, or syz:FILE.c) runs as syzbot runs it, for its time, judged against syzbot's title; "
            "syzbot:ID fetches a bug's reproducer and record from syzbot's dashboard")

def arch_choices() -> list[str]:
    """--arch's names: kstall's (uname -m) and Debian's for each architecture."""
    from harness.base import arch
    return [n for name in arch.names() for n in dict.fromkeys((name, arch.get(name).debian))]


def arch_named(name: str | None) -> str | None:
    """--arch's value as kstall names it (arm64 -> aarch64)."""
    from harness.base import arch
    return arch.named(name).name if name else None


def add_vm_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("guest")
    g.add_argument("--arch", choices=arch_choices(), help="the kernel's architecture: debian:VERSION fetches "
                   "that architecture's package (debian:6.16.12 --arch arm64 is debian:6.16.12-arm64); other "
                   "kernels say their own, which must be this one (default: the kernel's; debian: amd64)")
    g.add_argument("--cpus", type=int, help="vCPUs (default: the reproducer's, 2 for perf-refresh)")
    g.add_argument("--memory", type=int, metavar="MB", help="guest memory (default 1024; a syzkaller "
                   "reproducer's: 2048, syzbot's smallest machine)")
    g.add_argument("--accel", choices=ACCELS, default="auto",
                   help="auto: KVM if a probe boot proves it works, else TCG (default); tcg-single: one host "
                   "thread runs every vCPU in turn, each for up to 100 ms, which holds a vCPU off inside a race's "
                   "window the way a busy host does (a clean run under plain TCG on a quiet host is weak evidence "
                   "for such a race)")
    g.add_argument("--vmlinux", type=Path, help="vmlinux with DWARF: GDB shows inlined frames")
    g.add_argument("--cmdline", default="", help="extra kernel command line")
    g.add_argument("--no-snapshot", action="store_true",
                   help="boot cold: neither restore nor save the kernel's guest at the agent's gate")
    r = p.add_argument_group("run")
    r.add_argument("--duration", type=float, help="upper bound on the reproducer's run, seconds (a program "
                   "run as it is: run it again and again until then)")
    r.add_argument("--count", "--repeat", type=int, help="stop after this many passes over the path; for "
                   "a program run as it is, how many times to run it, or fewer if --duration ends it first "
                   "(default: the reproducer's minimum, or more if --pmiss needs it; with --duration alone, "
                   "as many as the time allows)")
    r.add_argument("--pmiss", type=float, help="target P(miss) for NOT_REPRODUCED (default 1e-6 where the "
                   "reproducer is calibrated; given, a run whose P(miss) is unknown does not meet it)")
    r.add_argument("--attempts", type=int, default=2, help="attempts when an emulator fault spoils a run (default 2)")
    r.add_argument("--freeze-after", type=float, help="heartbeat silence that means a freeze (s); default: 0.3 s "
                   "plus what the host held the guest back by meanwhile, at most 0.8 s")
    r.add_argument("--stuck-after", type=float, help="progress-count silence that means stuck CPUs (s)")
    r.add_argument("--hang-after", type=float, metavar="S", help="a syzkaller program's kernel report (a hung "
                   "task, a soft lockup, an RCU stall) is a hang once what it reports was stuck S seconds (default: "
                   "syzbot's detector's time, scaled for the accelerator: 280 s for a hung task under TCG); "
                   "one that ends sooner is a slow wait")
    r.add_argument("--samples", type=int, default=3, help="GDB samples of every vCPU (default 3)")
    r.add_argument("--results", type=Path, help="results root (default: results/ or $KSTALL_RESULTS)")


def add_handover_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("the hang handed over")
    g.add_argument("--hold", type=float, nargs="?", const=600.0, metavar="SECONDS",
                   help="on a hang, keep the guest stopped after the verdict for `kstall attach RUN` "
                   "(default 600 s; Ctrl-C releases it)")
    g.add_argument("--vmcore", action="store_true", help="on a hang, write the guest's memory and every vCPU's "
                   "registers to RUN/vmcore (an ELF core: `kstall inspect RUN`)")


def add_build_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("build: kernels")
    g.add_argument("--config", action="append", type=Path, default=[], metavar="FRAGMENT",
                   help="kconfig fragment applied after kstall's own (images/kconfig/); repeatable")
    g.add_argument("--debuginfo", action="store_true", help="build with DWARF: GDB shows inlined frames")
    g.add_argument("--jobs", type=int, default=0, help="make -j (default: host cores + 1)")
    g.add_argument("--build-timeout", type=float, default=7200, metavar="S", help="bound on one build (s)")


def add_step_pmiss(p: argparse.ArgumentParser) -> None:
    p.add_argument("--step-pmiss", type=float, default=1e-3, help="P(miss) a clean step must reach (default 1e-3)")


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
    defaults = vars(parse_args(["bisect-step", a.reproducer or "x"]))
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


def options_from(a: argparse.Namespace):
    from harness.drivers import options as o
    return o.Options(
        kernel=o.KernelOptions(build=build_options_from(a), boot_image=getattr(a, "boot_image", False),
                               trust_backing=getattr(a, "trust_backing_files", False), arch=arch_named(a.arch)),
        guest=o.GuestOptions(cpus=a.cpus, memory_mb=a.memory, accel=a.accel, cmdline_extra=a.cmdline,
                             snapshot=not a.no_snapshot),
        run=o.RunOptions(duration=a.duration, count=a.count,
                         pmiss_target=o.DEFAULT_PMISS if a.pmiss is None else a.pmiss, pmiss_given=a.pmiss is not None,
                         repro_args=list(a.repro_args or []), attempts=a.attempts, freeze_after=a.freeze_after,
                         stuck_after=a.stuck_after, hang_after=a.hang_after),
        debug=o.DebugOptions(samples=a.samples, vmlinux=a.vmlinux, hold=getattr(a, "hold", None),
                             vmcore=getattr(a, "vmcore", False)), results_root=a.results)


def build_options_from(a: argparse.Namespace):
    if not hasattr(a, "debuginfo"):
        return None
    from images.kernels.build import BuildOptions
    # --arch: a build: kernel cross-built for that architecture
    return BuildOptions(fragments=list(a.config), debuginfo=a.debuginfo, jobs=a.jobs, timeout=a.build_timeout,
                        arch=arch_named(getattr(a, "arch", None)) or "")


# -- the commands ----------------------------------------------------------------

def cmd_verify(a: argparse.Namespace) -> int:
    from harness.reports import text
    from harness.drivers import case as cases, verify
    from harness.guest.vm import VMError
    try:
        repro = cases.load(a.reproducer, echo_stderr)
    except (reproducers.ReproducerError, BuildError) as e:
        echo_stderr(f"error: {e}")
        return EXIT_USAGE
    try:
        res = verify.verify(a.kernel, repro, options_from(a), echo_stderr)
    except BuildError as e:  # the user's program, once the kernel said its architecture
        echo_stderr(f"error: {e}")
        return EXIT_USAGE
    except (SpecError, VMError) as e:  # bad input, or an accelerator that is not there
        if a.json:
            print(json.dumps({"verdict": VerdictKind.ERROR, "exit_code": EXIT_ERROR, "reason": str(e)}))
        echo_stderr(f"error: {e}")
        return EXIT_ERROR
    print(json.dumps(res.record.to_json(), indent=2, default=str) if a.json else text.run_text(res.record),
          flush=True)
    if res.held is not None:
        res.held.serve(echo_stderr)
    return res.verdict.exit_code


def cmd_explain(a: argparse.Namespace) -> int:
    from harness.reports import text
    from harness.analysis.bug_record import RecordError
    from harness.drivers import explain
    if bool(a.reproducer) == bool(a.cve):
        echo_stderr("error: give a reproducer, or --cve CVE-... with --vulns DIR")
        return EXIT_USAGE
    try:
        e = explain.explain(a.kernel, a.reproducer, a.cve, a.vulns, echo_stderr)
    except (reproducers.ReproducerError, RecordError) as err:
        echo_stderr(f"error: {err}")
        return EXIT_USAGE
    except SpecError as err:
        echo_stderr(f"error: {err}")
        return EXIT_ERROR
    if e.reproducer and e.record is None:
        echo_stderr(f"{e.reproducer} has no [record] in its data file: nothing to predict from")
    if a.json:
        print(json.dumps({"kernel": e.kernel.spec, "upstream": e.kernel.upstream, "reproducer": e.reproducer or None,
                          "prediction": e.prediction.to_json(), "before_boot": e.before_boot}, indent=2))
    else:
        print(text.explain_text(e.kernel, e.record, e.prediction, e.reproducer, e.before_boot))
    return 0


def cmd_kernels(a: argparse.Namespace) -> int:
    from images.kernels import debian
    try:
        from harness.base import arch
        row = arch.get(arch_named(a.arch) or arch.DEFAULT)
        rows = debian.available(progress=echo_stderr, arch=row.debian)
    except SpecError as e:
        echo_stderr(f"error: {e}")
        return EXIT_ERROR
    if not a.available:
        rows = [(k, c) for k, c in rows if c]
    # the flavour named as the architecture's, and its variants (cloud-amd64, rt-arm64, powerpc64le-64k)
    plain = row.flavour
    rows = [(k, c) for k, c in rows if k.flavour == plain or (a.all_flavours and plain in k.flavour.split("-"))]
    if a.json:
        print(json.dumps([{"spec": k.short_spec, "canonical": k.canonical, "package": k.package,
                           "image_package": k.image_package, "version": k.version, "suite": k.suite,
                           "cached": c} for k, c in rows], indent=1))
        return 0
    print(f"{'spec':<28} {'package':<40} {'debian version':<20} {'suite':<18} cached")
    for k, c in rows:
        print(f"{k.short_spec:<28} {k.package:<40} {k.version:<20} {k.suite:<18} {'yes' if c else ''}")
    if not rows:
        print(f"no {plain} kernels in Debian's suites" if a.available else
              "no kernels cached yet; `kstall kernels --available` lists what debian: can fetch")
    return 0


def cmd_symbols(a: argparse.Namespace) -> int:
    from harness.drivers import symbols
    from images.kernels import debuginfo, symcache
    try:
        kernel = schemes.resolve(a.kernel, progress=echo_stderr)
        if a.debuginfo:
            f = debuginfo.fetch(kernel, None if a.debuginfo is True else Path(a.debuginfo), echo_stderr)
            print(f"{f.vmlinux} (build ID {f.build_id}" + (", cached)" if f.cached else
                  f"; {f.read_mb:.0f} MB of {f.package} read in {f.seconds:.1f}s)"))
            return 0
    except SpecError as e:
        echo_stderr(f"error: {e}")
        return EXIT_ERROR
    path = symcache.cached(kernel.key)
    if path and not a.refresh:
        print(f"{path} (cached, {sum(1 for _ in open(path))} text symbols)")
        return 0
    if path:
        path.unlink()
    t0 = time.monotonic()
    try:
        info = symbols.capture(kernel, echo_stderr, a.accel)
    except Exception as e:  # noqa: BLE001 - report any capture failure plainly
        echo_stderr(f"error: symbol capture failed: {e}")
        return EXIT_ERROR
    print(f"{info['path']} ({info['lines']} text symbols, {info['bytes'] / 1e6:.1f} MB; {info['data_lines']} "
          f"variables; BTF {info['btf_bytes'] / 1e6:.1f} MB; capture {info['capture_s']:.2f}s after the guest came up, "
          f"whole boot {time.monotonic() - t0:.1f}s)")
    return 0


def cmd_threads(a: argparse.Namespace) -> int:
    """Thread table, futex groups and lock owner of a live process or a core."""
    from harness.debug.process import DumpError
    from harness.drivers import threads
    try:
        analysis, dump, exe = threads.examine(a.target, a.exe, a.keep_core, a.timeout)
    except threads.Usage as e:
        echo_stderr(f"error: {e}")
        return EXIT_USAGE
    except DumpError as e:
        echo_stderr(f"error: {e}")
        return EXIT_ERROR
    for err in dump.errors:
        echo_stderr(f"gdb: {err}")
    if a.json:
        print(json.dumps(analysis.to_json() | {"dump_errors": dump.errors, "exe": str(exe)}, indent=2))
    else:
        sys.stdout.write(analysis.table())
    return 1 if analysis.signature or analysis.cycles else 0


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


def cmd_calibrate(a: argparse.Namespace) -> int:
    from harness.drivers import calibrate
    return calibrate.run(a.kernel, a.reproducer, options_from(a), a.runs, a.write, echo_stderr)


# -- the parser: one function per command ----------------------------------------
# A command is its cmd_ function and its parser function marked @command,
# side by side here: `kstall --help` lists them in the order they are written,
# and a command whose results directory it writes runs (set_defaults
# sweeps=True) first clears what killed kstall runs left there. The drivers
# stay free of argparse: the benchmarks and tests call them with options.
_COMMANDS: list = []


def command(add):
    _COMMANDS.append(add)
    return add


@command
def _verify_parser(sub) -> None:
    v = sub.add_parser("verify", help="boot a kernel, run a reproducer, give a verdict",
                       description="Exit status: 0 NOT_REPRODUCED, 1 VULNERABLE or CRASHED, 3 INCONCLUSIVE, "
                       "4 ERROR, 5 FAILED (your program failed on its own, with no hang), 2 usage. Arguments "
                       "after -- go to the reproducer.",
                       epilog="examples: kstall verify debian:6.16.12 perf-refresh --cpus 4; "
                       "kstall verify debian:6.16.12 ./my-repro.c --repeat 20; "
                       "kstall verify debian:7.3.4 run:'perf record -a -- sleep 5'")
    v.add_argument("kernel", help=f"kernel spec: {schemes.help_text()}")
    v.add_argument("reproducer", help=repro_help())
    v.add_argument("repro_args", nargs="*", help="reproducer arguments (after --)")
    v.add_argument("--json", action="store_true", help="print run.json instead of the summary")
    v.add_argument("--boot-image", action="store_true",
                   help="image: kernels: boot the image's own initrd, init and userspace (a throwaway overlay; "
                   "the image is never written), the agent running as a systemd service")
    v.add_argument("--trust-backing-files", action="store_true",
                   help="image: kernels: let the image's qcow2 backing chain name files outside its directory "
                   "(refused otherwise: kstall would read them and hand them to QEMU)")
    add_build_options(v)
    add_vm_options(v)
    add_handover_options(v)
    v.set_defaults(func=cmd_verify, sweeps=True)


@command
def _explain_parser(sub) -> None:
    e = sub.add_parser("explain", help="the verdict a kernel's published record predicts (no boot)",
                       description="Predict affected / fixed / not introduced / unknown from the kernel CVE "
                       "team's record of the bug (a reproducer's [record], or --cve with --vulns) and the "
                       "kernel package's changelog, which lists the upstream stable commits it carries. Every "
                       "line the answer rests on is printed. verify prints the same prediction beside its "
                       "measured verdict. With a reproducer it also says what verify's check before booting finds: "
                       "a device or option the kernel's config leaves out answers the run with no boot.",
                       epilog="examples: kstall explain debian:6.16.12 perf-refresh; "
                       "kstall explain debian:6.1.192 --cve CVE-2024-42239 --vulns ~/vulns")
    e.add_argument("kernel", help=f"kernel spec: {schemes.help_text()}")
    e.add_argument("reproducer", nargs="?", help="a reproducer whose data file has a [record]")
    e.add_argument("--cve", help="any CVE, read from --vulns (no reproducer: a prediction only)")
    e.add_argument("--vulns", type=Path, help="a clone of the kernel's vulns repository (or a directory of its "
                   "CVE-*.dyad and CVE-*.mbox files)")
    e.add_argument("--json", action="store_true", help="print the prediction (and the check before booting) as JSON")
    e.set_defaults(func=cmd_explain)


@command
def _kernel_parsers(sub) -> None:
    k = sub.add_parser("kernels", help="list cached kernels, or what debian: can fetch")
    k.add_argument("--available", action="store_true", help="every kernel in the Debian suites")
    k.add_argument("--all-flavours", action="store_true", help="include cloud and rt flavours")
    k.add_argument("--arch", choices=arch_choices(), help="the kernels of this architecture (default amd64)")
    k.add_argument("--json", action="store_true")
    k.set_defaults(func=cmd_kernels)

    s = sub.add_parser("symbols", help="capture (or show) a kernel's symbols (text, variables) and BTF from a guest")
    s.add_argument("kernel")
    s.add_argument("--refresh", action="store_true", help="capture again even if cached")
    s.add_argument("--accel", choices=ACCELS, default="auto")
    s.add_argument("--debuginfo", nargs="?", const=True, metavar="FILE",
                   help="fetch the kernel's vmlinux with DWARF instead (for attach and inspect; never needed for "
                   "a verdict): from Debian's -dbg package, streamed, keeping only the vmlinux; or from FILE (a "
                   "vmlinux, a -dbg .deb, a debuginfo .rpm). Checked against the kernel's build ID, cached by it")
    s.set_defaults(func=cmd_symbols, sweeps=True)


@command
def _matrix_parsers(sub) -> None:
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


@command
def _bisect_parsers(sub) -> None:
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



@command
def _bisect_step_parser(sub) -> None:
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


@command
def _threads_parser(sub) -> None:
    th = sub.add_parser("threads", help="thread dump of a stuck process: futex groups, lock owner, hang class",
                        description="Dump every thread of a live process (through gdb's gcore; the process "
                        "is left as it was) or of a core file, one bounded gdb command per thread. Prints "
                        "the thread table, the threads grouped by the futex word they wait on, the owner "
                        "of each word, deadlock cycles (mutex owners, pthread_join) and the hang class. Exit: 1 a "
                        "hang signature matched or a deadlock cycle was found, 0 none, 4 error.")
    th.add_argument("target", metavar="PID|core:FILE")
    th.add_argument("--exe", type=Path, help="the program (with symbols); default for a PID: /proc/PID/exe")
    th.add_argument("--keep-core", type=Path, metavar="PATH", help="for a PID: write the core here and keep it")
    th.add_argument("--timeout", type=float, default=10.0, help="seconds per gdb command (default 10)")
    th.add_argument("--json", action="store_true", help="machine-readable output")
    th.set_defaults(func=cmd_threads)



@command
def _calibrate_parser(sub) -> None:
    c = sub.add_parser("calibrate", help="measure a reproducer on an affected kernel (for P(miss))")
    c.add_argument("kernel")
    c.add_argument("reproducer", help=repro_help())
    c.add_argument("repro_args", nargs="*")
    c.add_argument("--runs", type=int, default=5)
    c.add_argument("--write", action="store_true", help="write the reproducer's calibration (a built-in's: "
                   "repro/calibration/NAME.toml; your own: calibration/NAME.toml beside its data file)")
    add_vm_options(c)
    c.set_defaults(func=cmd_calibrate)


@command
def _analyze_parser(sub) -> None:
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


@command
def _attach_parser(sub) -> None:
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


@command
def _inspect_parser(sub) -> None:
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


@command
def _doctor_parser(sub) -> None:
    d = sub.add_parser("doctor", help="what this host can do for kstall, and the fix for what it lacks",
                       description="Checks QEMU and a debugger per guest architecture, KVM (and what kstall "
                       "recorded of it this host boot), the guest programs, libguestfs, crash and drgn, the "
                       "cache and its free disk, Debian's suites and the user. Exit status 1 when something a "
                       "verify needs is missing (each such line says its fix).")
    d.add_argument("--offline", action="store_true", help="do not ask Debian's mirror")
    d.add_argument("--json", action="store_true")
    d.add_argument("--matrix", metavar="FILE", type=Path,
                   help="the guest architectures of this matrix file's kernels are needed too")
    d.add_argument("--packages", action="store_true",
                   help="print only the Debian packages that would mend what is needed and missing (one line, "
                   "empty when none; exit 0), for `apt-get install $(kstall doctor --matrix FILE --packages)`")
    d.set_defaults(func=cmd_doctor)


def cmd_doctor(a: argparse.Namespace) -> int:
    from harness.analysis.expect import MatrixError
    from harness.drivers import doctor
    try:
        needed = doctor.matrix_arches(a.matrix) if a.matrix else set()
        builds_c = doctor.matrix_builds_c(a.matrix) if a.matrix else False
    except MatrixError as e:
        echo_stderr(f"error: {e}")
        return EXIT_USAGE
    findings = doctor.examine(a.offline or a.packages, needed, builds_c)
    if a.packages:
        print(" ".join(doctor.missing_packages(findings)))
        return 0
    text, code = doctor.report(findings, a.json)
    print(text)
    return code


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
    for add in _COMMANDS:
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
    if a.func is cmd_bisect_step:
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
