# SPDX-License-Identifier: GPL-2.0
"""verify: one pass of the pipeline, kernel + reproducer -> verdict + run directory.

    kernel spec -> vmlinuz (+ cached symbols) -> QEMU -> watch -> (freeze or
    stuck: GDB samples -> classify) -> verdict -> results/<run-id>/

Each attempt is harness/drivers/attempt.py. An emulator fault (the TCG int3
text-patching oops) is retried; every attempt's files are kept.
"""
from __future__ import annotations

import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from harness.analysis.outcome import Outcome, OutcomeKind
from harness.analysis.record import Evidence, RunRecord
from harness.analysis.retry import accel_after, another_attempt
from harness.analysis.verdict import Verdict, VerdictKind
from harness.base import procs, rundir
from harness.base.procs import Interrupted
from harness.drivers import case as cases, explain
from harness.drivers.attempt import run_attempt
from harness.drivers.run_state import Attempt
from harness.drivers.case import Case, Loaded
from harness.drivers.options import Options
from harness.guest.cores import Cancelled
from harness.guest.hold import Held
from harness.guest.vm import VMError
from harness.reports import views
from images.kernels import symcache
from images.kernels.kernel import SpecError

Echo = Callable[[str], None]


@dataclass
class Result:
    record: RunRecord
    run_dir: Path | None
    held: Held | None = None  # the hung guest, kept for `kstall attach` until Held.wait() ends

    @property
    def verdict(self) -> Verdict:
        return self.record.verdict

    @property
    def doc(self) -> dict:
        """run.json"""
        return self.record.to_json()


def verify(spec: str, repro: str | Loaded, opts: Options, echo: Echo) -> Result:
    """repro: a reproducer spec (reproducers.resolve), or one case.load() read."""
    loaded = cases.load(repro, echo) if isinstance(repro, str) else repro
    t_start = time.time()
    c = cases.resolve(spec, loaded, opts, echo)
    prediction = explain.predict(c.kernel, loaded.record, echo) if loaded.record else None
    if prediction:
        echo(f"the record predicts: {prediction.text()} ({'; '.join(prediction.reasons)})")
    run = rundir.RunDir(f"{c.kernel.origin.get('label') or c.kernel.canonical}-{loaded.name}", opts.results_root)
    attempts, interrupted, tb = run_attempts(c, opts, run, echo)
    final = attempts[-1][1]
    try:
        return _finish(run, spec, c, opts, attempts, t_start, prediction, interrupted, tb, echo)
    except BaseException:
        final.release()  # a held guest goes with a run that could not be written
        raise


def _finish(run: rundir.RunDir, spec: str, c: Case, opts: Options, attempts: list[tuple[int, Attempt]],
            t_start: float, prediction, interrupted: BaseException | None, tb: str, echo: Echo) -> Result:
    """The run written from its final attempt; a held guest published, or released."""
    n, final = attempts[-1]
    adir = run.work / f"attempt-{n}"
    if adir.exists():
        run.promote(adir)
    record = make_record(run, spec, c, opts, final, attempts, t_start)
    record.prediction = prediction.to_json() if prediction else None
    if c.check.test_modules and final.accel:  # a guest ran with them: the verdict says so
        record.verdict.reason += "; " + test_modules_note(c.check.test_modules)
    if c.firmware and final.accel:
        record.verdict.reason += "; the guest carried " + "; ".join(f.text() for f in c.firmware) \
            + ", as syzbot's images carry linux-firmware"
    with procs.signals_deferred():
        try:
            path = _write_run(run, final, record, tb)
        except OSError as e:
            if not rundir.out_of_space(e):
                raise
            # a half-written run is worse than none: the verdict goes to stdout and stderr only
            run.abandon()
            path = None
    if path is None:
        record.verdict = Verdict(VerdictKind.ERROR, f"no space left for the results in {run.root}: the run was "
                                 f"not kept; it said {final.verdict.line()}")
        echo(record.verdict.reason)
    else:
        record.results_dir = str(path)
    if interrupted is not None:  # (the caller releases a held guest on the way out)
        if path is not None:
            echo(f"interrupted; partial results kept in {path}")
        raise interrupted
    if final.held is not None and path is not None:
        final.held.publish(path)
    else:
        final.release()
    return Result(record, path, final.held)


def run_attempts(c: Case, opts: Options, run: rundir.RunDir,
                 echo: Echo) -> tuple[list[tuple[int, Attempt]], BaseException | None, str]:
    """Attempts until one is not spoilt by an emulator fault (up to
    opts.run.attempts); a failure before any guest ran is an attempt too, so the
    run directory always says what happened. (attempts, the Ctrl-C or SIGTERM
    to raise once the run is written, a kstall bug's traceback)"""
    attempts: list[tuple[int, Attempt]] = []
    interrupted: BaseException | None = None
    tb = ""

    def failed(kind: OutcomeKind, detail: str, verdict: VerdictKind = VerdictKind.ERROR, summary: str = "",
               **more) -> None:
        attempts.append((len(attempts) + 1, Attempt(Verdict(verdict, detail, summary=summary),
                                                    Outcome(kind, detail, time.monotonic()), {}, [], None, {}, "", 0,
                                                    **more)))
    try:
        if c.check.blocked:  # nothing to boot: the path cannot run on this kernel
            failed(OutcomeKind.PREFLIGHT, c.check.reason(), VerdictKind.INCONCLUSIVE, c.check.summary(),
                   reach=c.check.reach)
        n, case = 0, c
        while not c.check.blocked:
            n += 1
            att = run_attempt(case, opts, run.attempt(n), echo, n)
            attempts.append((n, att))
            interrupted = att.interrupted
            if interrupted or not another_attempt(att.verdict.retry, n, opts.run.attempts):
                break
            att.release()
            accel = accel_after(att.verdict.retry, case.accel)
            how = f" under {accel.upper()}" if accel != case.accel else ""
            case = cases.with_accel(case, accel)
            echo(f"attempt {n}: {att.verdict.reason}; retrying{how}")
    except (VMError, SpecError) as e:
        failed(OutcomeKind.ERROR, str(e))
    except (KeyboardInterrupt, Interrupted) as e:  # before the watch loop had a guest to report on
        interrupted = e
        failed(OutcomeKind.INTERRUPTED, f"interrupted ({type(e).__name__})")
    except Cancelled as e:
        failed(OutcomeKind.INTERRUPTED, f"interrupted ({e})")
    except Exception as e:  # noqa: BLE001 - a kstall bug still ends as a complete run directory
        if rundir.out_of_space(e):
            failed(OutcomeKind.ERROR, f"no space left for the results: {e}")
        else:
            failed(OutcomeKind.ERROR, f"internal error: {type(e).__name__}: {e}")
            tb = traceback.format_exc()
    finally:
        if c.disk:
            c.disk.remove()
    return attempts, interrupted, tb


def _write_run(run: rundir.RunDir, final: Attempt, record: RunRecord, tb: str) -> Path:
    if tb:
        run.write_text("traceback.txt", tb)
    run.write_json("run.json", record.to_json())
    if final.classes:
        run.write_json("cpus.json", {"cpus": record.cpus,
                                     "samples": [f"sample-{i}.json" for i in range(len(final.samples.dumps))]
                                     if final.samples else []})
        run.write_text("backtraces.txt", views.cpu_backtraces(record.cpus, benign=True))
    if record.verdict.verdict in (VerdictKind.VULNERABLE, VerdictKind.CRASHED):
        from harness.reports import bug_report  # only a hang's run writes one
        files = sorted(p.name for p in run.work.iterdir())
        run.write_text("bug-report.md", bug_report.render(record.to_json(), files))
    return run.finalize()


def _attempt_doc(a: Attempt, n: int) -> dict:
    return {"attempt": n, "accel": a.accel or None, "verdict": a.verdict.verdict, "reason": a.verdict.reason,
            "outcome": {"kind": a.outcome.kind, "detail": a.outcome.detail}, "timings": a.timings}


def _process_doc(final: Attempt) -> dict | None:
    if final.process:
        return {k: v for k, v in final.process.to_json().items() if k != "threads"} | {"threads": "threads.json"}
    return {"error": final.process_error} if final.process_error else None


def test_modules_note(built: list) -> str:
    """What the kernel ran with besides its own modules, as a verdict says it."""
    return ("the kernel ran with a test module kstall added: " + "; ".join(b.text() for b in built)
            + " (unsigned: it taints the kernel; the code the program reaches is the kernel's own)")


def make_record(run: rundir.RunDir, spec: str, c: Case, opts: Options, final: Attempt,
                attempts: list[tuple[int, Attempt]], t_start: float) -> RunRecord:
    w = final.watch
    kernel, repro = c.kernel, c.repro.spec
    return RunRecord(
        id=run.id, verdict=final.verdict, outcome=Outcome(final.outcome.kind, final.outcome.detail, final.outcome.at),
        kernel=kernel.to_json() | {"spec": spec, "test_modules": [b.to_json() for b in c.check.test_modules]},
        reproducer={"name": repro.name, "source": repro.source or None, "program": repro.program or None,
                    "command": repro.command or None, "args": opts.run.repro_args, "count_name": repro.count_name,
                    "min_count": repro.min_count, "count_target": final.count_target, "env": repro.env or None,
                    "syzbot": repro.syzbot | {"matched": final.verdict.matched or None} if repro.syzbot else None},
        vm={"cpus": c.cpus, "memory_mb": c.memory_mb, "accel": final.accel or c.accel,
            "arch": kernel.arch,
            "cmdline": final.cmdline, "go": final.go, "boot_image": opts.kernel.boot_image, "snapshot": final.snapshot,
            "vmcore": final.vmcore, "hold_s": opts.debug.hold if final.held else None,
            "firmware": [f.to_json() for f in c.firmware]},
        evidence=Evidence(count=w.get("count"), count_name=repro.count_name, stalls=final.stalls,
                          nmi_injection=w.get("nmi"), p_miss=final.verdict.p_miss or None,
                          heartbeats=w.get("heartbeats"), max_heartbeat_gap_s=w.get("max_heartbeat_gap_s"),
                          max_unexplained_gap_s=w.get("max_unexplained_gap_s"),
                          console_reports=w.get("console_reports", []),
                          console_reports_dropped=w.get("console_reports_dropped", 0),
                          debug_method=final.samples.method if final.samples else None,
                          debug_errors=final.samples.errors if final.samples else [], reach=final.reach,
                          health=final.health, silences=w.get("silences", []),
                          candidates=w.get("candidates", []),
                          reports_before_program=w.get("reports_before_program", 0)),
        cpus=[c.to_json() for c in final.classes], hang=final.hang.to_json() if final.hang else None,
        waits=final.wait_graph,
        process=_process_doc(final), guest=w.get("hello", {}),
        # where the symbols are kept, also on the run that captured them (analyze reads its vmcore with them)
        symbols=(w.get("syms") or {}) | {"cached": str(symcache.cached(kernel.key) or "")}, timings=final.timings,
        attempts=[_attempt_doc(a, n) for n, a in attempts], files=sorted(p.name for p in run.work.iterdir()),
        command=sys.argv,
        started=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t_start)),
        finished=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), wall_s=round(time.time() - t_start, 2))
