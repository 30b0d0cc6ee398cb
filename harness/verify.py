"""verify: one pass of the pipeline, kernel + reproducer -> verdict + run directory.

    kernel spec -> vmlinuz (+ cached symbols) -> QEMU -> watch -> (freeze or
    stuck: GDB samples -> classify) -> verdict -> results/<run-id>/

An emulator fault (the TCG int3 text-patching oops) is retried; every
attempt's files are kept.
"""
from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from harness import accel, classify, debug, paths, pmiss, reproducers, results, symcache
from harness.cores import Cancelled, CoreBudget, Gate
from harness.procs import Interrupted
from harness.verdict import Verdict, decide
from harness.vm import VM, VMConfig, VMError
from harness.watch import Limits, Outcome, Watch
from images import initramfs
from images.kernel import Kernel, SpecError, resolve

Echo = Callable[[str], None]


@dataclass
class Options:
    cpus: int | None = None
    memory_mb: int = 1024
    accel: str = "auto"
    duration: float | None = None
    count: int | None = None
    pmiss_target: float = 1e-6
    repro_args: list[str] = field(default_factory=list)
    samples: int = 3
    sample_interval: float = 0.2
    freeze_after: float = 0.8
    stuck_after: float | None = None
    boot_timeout: float = 120.0
    attempts: int = 2
    vmlinux: Path | None = None
    results_root: Path | None = None
    cmdline_extra: str = ""
    # in-process API: called with (vm, attempt number) once the reproducer runs
    on_repro_start: Callable[[VM, int], None] | None = None
    # shared by guests running side by side (matrix): boot ahead, run in turn
    budget: CoreBudget | None = None
    # set by another thread to end the run (reported as interrupted)
    cancel: threading.Event | None = None


@dataclass
class Result:
    verdict: Verdict
    run_dir: Path | None
    doc: dict


def ensure_guest(echo: Echo) -> None:
    """Build the guest binaries if they are missing or stale (cheap when not)."""
    p = subprocess.run(["make", "-q", "-C", str(paths.REPO), "guest"], capture_output=True)
    if p.returncode == 0:
        return
    echo("building guest binaries (make guest)")
    p = subprocess.run(["make", "-C", str(paths.REPO), "guest"], capture_output=True, text=True)
    if p.returncode != 0:
        raise SpecError(f"`make guest` failed:\n{p.stdout[-2000:]}{p.stderr[-2000:]}")


def kernel_cmdline(repro: reproducers.Reproducer, args: list[str], want_syms: bool, extra: str,
                   gated: bool = False) -> str:
    if any("," in a or " " in a for a in args):
        raise SpecError("reproducer arguments may not contain commas or spaces")
    parts = ["console=ttyS0", "nokaslr", "quiet", "panic=-1", "tsc=reliable",
             f"kstall.repro={repro.binary}", "kstall.args=" + ",".join(args)]
    if want_syms:
        parts.append("kstall.syms=1")
    if gated:
        parts.append("kstall.gate=1")
    return " ".join(parts + ([extra] if extra else []))


@dataclass
class Attempt:
    verdict: Verdict
    outcome: Outcome
    watch: dict
    classes: list[classify.CpuClass]
    samples: debug.Samples | None
    timings: dict
    cmdline: str
    count_target: int
    interrupted: BaseException | None = None


def run_attempt(kernel: Kernel, repro: reproducers.Reproducer, opts: Options, accel_kind: str,
                initrd: Path, out_dir: Path, echo: Echo, number: int = 1) -> Attempt:
    cal = pmiss.load(repro.name)
    target = opts.count or max(repro.min_count, pmiss.count_for(cal, opts.pmiss_target))
    duration = opts.duration or repro.max_seconds
    syms_path = symcache.cached(kernel.sha256)
    args = [repro.count_arg, str(target), repro.duration_arg, str(duration), *opts.repro_args]
    cmdline = kernel_cmdline(repro, args, syms_path is None, opts.cmdline_extra, gated=opts.budget is not None)
    cpus = opts.cpus or repro.default_cpus
    cfg = VMConfig(kernel=kernel.vmlinuz, initrd=initrd, cmdline=cmdline, log_dir=out_dir, cpus=cpus,
                   memory_mb=opts.memory_mb, accel=accel_kind)
    limits = Limits(boot_timeout=opts.boot_timeout, freeze_after=opts.freeze_after,
                    stuck_after=opts.stuck_after or repro.stuck_after_s, run_timeout=duration + 60)
    sigs = classify.load_signatures()
    classes: list[classify.CpuClass] = []
    samples: debug.Samples | None = None
    t0 = time.monotonic()
    timings: dict = {}
    gate = Gate(opts.budget, cpus, opts.cancel) if opts.budget else None  # waits for a boot core
    with VM(cfg) as vm, contextlib.ExitStack() as stack:
        if gate:
            stack.callback(gate.close)
        echo(f"booting {kernel.canonical} ({cpus} vCPUs, {accel_kind.upper()}), "
             f"{repro.name} until {target} {repro.count_name} or {duration:.0f}s")
        hook = (lambda: opts.on_repro_start(vm, number)) if opts.on_repro_start else None
        vm.start()
        w = Watch(vm, limits, echo=echo, on_repro_start=hook, gate=gate, cancel=opts.cancel)
        false_alarms = 0
        try:
            while True:
                outcome = w.watch()
                if w.syms.data and syms_path is None:
                    syms_path = symcache.store(kernel.sha256, w.syms.data)
                    echo(f"symbols captured: {w.syms_info.get('lines', '?')} text symbols "
                         f"({int(w.syms_info.get('bytes', 0)) / 1e6:.1f} MB, guest export "
                         f"{w.syms_info.get('ms', '?')} ms, host receipt "
                         f"{w.syms.done_at - w.hello_at if w.syms.done_at and w.hello_at else 0:.2f}s after hello)")
                if outcome.kind not in ("freeze", "stuck"):
                    break
                since = (w.last_hb_at if outcome.kind == "freeze" else w.count_changed_at) or outcome.at
                timings["detection_latency_s"] = round(outcome.at - since, 3)
                if w.repro_started_at:
                    timings["hang_after_s"] = round(max(since - w.repro_started_at, 0), 3)
                echo(f"{outcome.kind}: {outcome.detail}; reading every vCPU with gdb")
                t_dbg = time.monotonic()
                samples = debug.sample(vm.gdb_socket, vm.qmp, out_dir, syms_path, kernel.vmlinux or opts.vmlinux,
                                       opts.samples, opts.sample_interval, resume=True)
                timings["debug_s"] = round(time.monotonic() - t_dbg, 2)
                classes = classify.classify_samples(samples.dumps, sigs)
                hung = any(c.signature.role in ("culprit", "victim") for c in classes)
                if hung or false_alarms >= 2 or not samples.dumps:
                    break
                false_alarms += 1
                echo(f"no CPU is in a known hang ({classify.summarize(classes) or 'all idle/user'}): "
                     "resuming, thresholds doubled")
                w.rearm()
        except KeyboardInterrupt:
            outcome = Outcome("interrupted", "interrupted by the user (SIGINT)", time.monotonic())
            raise_later: BaseException | None = KeyboardInterrupt()
        except Interrupted as e:
            outcome = Outcome("interrupted", f"interrupted ({e})", time.monotonic())
            raise_later = e
        else:
            raise_later = None
        if w.syms.data and syms_path is None:
            symcache.store(kernel.sha256, w.syms.data)
    timings.update({"boot_s": round(w.hello_at - t0, 2) if w.hello_at else None,
                    "gate_wait_s": w.summary()["gate_wait_s"],
                    "to_outcome_s": round(outcome.at - t0, 2),
                    "repro_s": round(outcome.at - w.repro_started_at, 2) if w.repro_started_at else None,
                    "total_s": round(time.monotonic() - t0, 2)})
    report_reason = next((r.reason for r in w.reports if r.kind == "infra"), "")
    pm = pmiss.p_miss(cal, w.count, repro.count_name)
    v = decide(outcome, w.ktap, w.count, repro, classes, samples.errors if samples else [], pm, report_reason)
    return Attempt(v, outcome, w.summary(), classes, samples, timings, cmdline, target, raise_later)


def _attempt_doc(a: Attempt, n: int) -> dict:
    return {"attempt": n, "verdict": a.verdict.verdict, "reason": a.verdict.reason,
            "outcome": {"kind": a.outcome.kind, "detail": a.outcome.detail}, "timings": a.timings}


def verify(spec: str, repro_name: str, opts: Options, echo: Echo) -> Result:
    repro = reproducers.load(repro_name)
    t_start = time.time()
    kernel = resolve(spec, progress=echo)
    ensure_guest(echo)
    initrd = initramfs.build()
    accel_kind = accel.choose(opts.accel, kernel.sha256, kernel.vmlinuz, initrd, echo)
    run = results.RunDir(f"{kernel.canonical}-{repro.name}", opts.results_root)
    attempts: list[tuple[int, Attempt]] = []
    interrupted: BaseException | None = None

    def failed(kind: str, detail: str) -> None:
        attempts.append((len(attempts) + 1, Attempt(Verdict("ERROR", detail), Outcome(kind, detail, time.monotonic()),
                                                    {}, [], None, {}, "", 0)))
    try:
        for n in range(1, max(1, opts.attempts) + 1):
            adir = run.attempt(n)
            att = run_attempt(kernel, repro, opts, accel_kind, initrd, adir, echo, n)
            attempts.append((n, att))
            interrupted = att.interrupted
            if interrupted or not (att.verdict.retryable and n < opts.attempts):
                break
            echo(f"attempt {n}: {att.verdict.reason}; retrying")
    except (VMError, SpecError) as e:
        failed("error", str(e))
    except (KeyboardInterrupt, Interrupted) as e:  # before the watch loop had a guest to report on
        interrupted = e
        failed("interrupted", f"interrupted ({type(e).__name__})")
    except Cancelled as e:
        failed("interrupted", f"interrupted ({e})")
    n, final = attempts[-1]
    adir = run.work / f"attempt-{n}"
    if adir.exists():
        run.promote(adir)
    doc = build_run_json(run, spec, kernel, repro, opts, accel_kind, final, attempts, t_start)
    run.write_json("run.json", doc)
    if final.classes:
        run.write_json("cpus.json", {"cpus": [c.to_json() for c in final.classes],
                                     "samples": [f"sample-{i}.json" for i in range(len(final.samples.dumps))]
                                     if final.samples else []})
        run.write_text("backtraces.txt", results.backtraces_text(final.classes))
    path = run.finalize()
    doc["results_dir"] = str(path)
    if interrupted is not None:
        echo(f"interrupted; partial results kept in {path}")
        raise interrupted
    return Result(final.verdict, path, doc)


def build_run_json(run: results.RunDir, spec: str, kernel: Kernel, repro: reproducers.Reproducer, opts: Options,
                   accel_kind: str, final: Attempt, attempts: list[tuple[int, Attempt]], t_start: float) -> dict:
    v = final.verdict
    return {
        "schema": results.SCHEMA,
        "id": run.id,
        "command": sys.argv,
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t_start)),
        "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "wall_s": round(time.time() - t_start, 2),
        "verdict": v.verdict,
        "exit_code": v.exit_code,
        "line": v.line(),
        "reason": v.reason,
        "summary": v.summary,
        "confidence": v.confidence,
        "signature": v.signature,
        "kernel": kernel.to_json() | {"spec": spec},
        "reproducer": {"name": repro.name, "args": opts.repro_args, "count_name": repro.count_name,
                       "min_count": repro.min_count, "count_target": final.count_target},
        "vm": {"cpus": opts.cpus or repro.default_cpus, "memory_mb": opts.memory_mb, "accel": accel_kind,
               "cmdline": final.cmdline},
        "outcome": {"kind": final.outcome.kind, "detail": final.outcome.detail},
        "evidence": {
            "count": final.watch.get("count"),
            "count_name": repro.count_name,
            "p_miss": v.p_miss or None,
            "heartbeats": final.watch.get("heartbeats"),
            "max_heartbeat_gap_s": final.watch.get("max_heartbeat_gap_s"),
            "console_reports": final.watch.get("console_reports", []),
            "debug_method": final.samples.method if final.samples else None,
            "debug_errors": final.samples.errors if final.samples else [],
        },
        "cpus": [c.to_json() for c in final.classes],
        "guest": final.watch.get("hello", {}),
        "symbols": final.watch.get("syms") or {"cached": str(symcache.cached(kernel.sha256) or "")},
        "timings": final.timings,
        "attempts": [_attempt_doc(a, n) for n, a in attempts],
        "files": sorted(p.name for p in run.work.iterdir()),
    }


def dumps(doc: dict) -> str:
    return json.dumps(doc, indent=2, default=str)
