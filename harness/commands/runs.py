# SPDX-License-Identifier: GPL-2.0
"""`kstall verify`, `explain`, `threads` and `calibrate`: their parsers and
what each runs (harness/drivers/)."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from harness.analysis.verdict import VerdictKind
from harness.base import reproducers
from harness.commands.shared import (EXIT_ERROR, EXIT_USAGE, add_build_options, add_handover_options,
                                     add_vm_options, echo_stderr, options_from, repro_help)
from images.guest.programs import BuildError
from images.kernels import schemes
from images.kernels.kernel import SpecError


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


def cmd_calibrate(a: argparse.Namespace) -> int:
    from harness.drivers import calibrate
    return calibrate.run(a.kernel, a.reproducer, options_from(a), a.runs, a.write, echo_stderr)


def verify_parser(sub) -> None:
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


def explain_parser(sub) -> None:
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


def threads_parser(sub) -> None:
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



def calibrate_parser(sub) -> None:
    c = sub.add_parser("calibrate", help="measure a reproducer on an affected kernel (for P(miss))")
    c.add_argument("kernel")
    c.add_argument("reproducer", help=repro_help())
    c.add_argument("repro_args", nargs="*")
    c.add_argument("--runs", type=int, default=5)
    c.add_argument("--write", action="store_true", help="write the reproducer's calibration (a built-in's: "
                   "repro/calibration/NAME.toml; your own: calibration/NAME.toml beside its data file)")
    add_vm_options(c)
    c.set_defaults(func=cmd_calibrate)
