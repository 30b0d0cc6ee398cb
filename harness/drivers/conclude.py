# SPDX-License-Identifier: GPL-2.0
"""An attempt's conclusion: its timings, its stall measurement (and chart),
the findings, and the verdict decide() gives them."""
from __future__ import annotations

import time
from pathlib import Path

from harness.analysis import console, latency, pmiss, reach, starvation, syzbot, usb_console
from harness.analysis.decide import decide
from harness.analysis.findings import Findings, ProcessReading
from harness.analysis.outcome import Outcome, OutcomeKind
from harness.base import arch as arches
from harness.base import guest_env, syscall_numbers
from harness.base.syzkaller import titles_of
from harness.analysis.kallsyms import Kallsyms
from harness.debug import inlines
from harness.drivers.plan import Plan, ended_by
from harness.drivers.run_state import Attempt, RunState
from harness.guest.watch import Watch
from images.kernels import debuginfo, module_tree
from images.kernels.kernel import SpecError


def conclude(r: RunState, w: Watch, plan: Plan, outcome: Outcome, t0: float,
             nmi: dict | None) -> Attempt:
    """The attempt's timings, its stall measurement (and chart), its verdict."""
    watch_doc = w.summary() | {"nmi": nmi, "silences": r.silences}
    r.timings.update({"boot_s": round(w.agent.hello_at - t0, 2) if w.agent.hello_at else None,
                      "gate_wait_s": watch_doc["gate_wait_s"],
                      "to_outcome_s": round(outcome.at - t0, 2),
                      "repro_s": round(outcome.at - w.agent.repro_started_at, 2) if w.agent.repro_started_at else None,
                      "total_s": round(time.monotonic() - t0, 2)})
    if (share := r.host_wait_share(w, outcome)) is not None:  # P(miss) reads it
        r.timings["vcpu_host_wait_share"] = share
    repro = r.repro
    stall = latency.evidence(repro.stall, w.agent.ktap.lines, w.agent.progress, r.host_wait_during(w, outcome)) \
        if repro.stall else None
    if stall:
        if outcome.kind.hang:
            stall["frozen_s"] = r.timings.get("hang_observed_s")
        if stall["data"]["paths"]:
            chart = latency.svg(stall["data"], stall["threshold_ms"], stall["titles"],
                                f"{r.kernel.canonical}: {stall['title']}")
            if chart:
                (r.out_dir / "latency.svg").write_text(chart)
    report_reason = next((rep.reason for rep in w.console.reports if rep.kind == OutcomeKind.INFRA), "")
    pm = pmiss.p_miss(r.case.calibration, w.agent.count, repro.count_name, r.case.pmiss_unknown,
                      r.timings.get("vcpu_host_wait_share"))
    reports = watch_doc["console_reports"] = with_inlines(r, [rep.to_json() for rep in w.console.reports])
    v = decide(Findings(outcome, repro, w.agent.ktap, w.agent.count, r.own_bug, pm, r.opts.run.pmiss_target,
                        r.opts.run.pmiss_given, r.classes, r.samples.errors if r.samples else [], report_reason,
                        stall, ProcessReading(r.process, r.process_error) if r.dumped else None, r.hang,
                        ended_by(repro, plan, w.agent.count), reports,
                        reached := program_reach(r, w), w.agent.leftovers,
                        starved := starvation.judge(w.agent.health, reached, cpus=plan.cpus), r.silences,
                        candidates=w.candidates.to_json(), host_share=r.timings.get("vcpu_host_wait_share"),
                        count_target=plan.target or 0, accel=plan.vm.accel))
    return Attempt(v, outcome, watch_doc, r.classes, r.samples, r.timings, plan.vm.cmdline, plan.target,
                   process=r.process, process_error=r.process_error, go=plan.go, stalls=stall, hang=r.hang,
                   accel=plan.vm.accel, reach=reached.to_json() if reached else None, wait_graph=r.wait_graph,
                   health=({"agent": w.agent.health} | (starved.to_json() if starved else {}))
                   if w.agent.health else None)


def with_inlines(r: RunState, reports: list[dict]) -> list[dict]:
    """A syzkaller reproducer's titled reports with the functions the build
    inlined into their frames ("inlined"), when kstall has the kernel's debug
    info: syzbot names a hang after those too (harness/debug/inlines.py)."""
    titled = [rep for rep in reports if rep.get("kind") in console.TITLED_KINDS]
    vmlinux = debuginfo.cached_vmlinux(r.kernel) if titled and r.repro.syzbot else None
    if vmlinux is None or r.syms_path is None:
        return reports
    syms = Kallsyms.load(r.syms_path)
    for rep in titled:
        rep["inlined"] = inlines.inlined(inlines.addresses(rep.get("excerpt", []), syms), vmlinux)
    # a module's debug file is a stream of the whole -dbg package (a minute): only where it may matter
    unnamed = syzbot.unnamed(titles_of(r.repro.syzbot), titled)
    in_modules = [inlines.module_frames(rep.get("excerpt", [])) for rep in unnamed]
    kos = module_debug_files(r, {m for frames in in_modules for m in frames})
    for rep, frames in zip(unnamed, in_modules):
        rep["inlined"] += [f for m, at in frames.items() if m in kos for f in inlines.inlined_in_module(at, kos[m])]
    return reports


def module_debug_files(r: RunState, names: set[str]) -> dict[str, Path]:
    """The debug files of the modules a report's frames are in, fetched the
    first time (about a minute per kernel and set of modules); without them,
    those frames' inlined functions are unknown, and the run goes on."""
    try:
        return debuginfo.module_files(r.kernel, names, progress=r.echo)
    except SpecError as e:
        r.echo(f"the functions inlined into the report's module frames are unknown: {e}")
        return {}


RAW_GADGET = "/dev/raw-gadget"


def program_reach(r: RunState, w: Watch) -> reach.Reach | None:
    """What a guest environment's agent said the program reached and lacked (reach.py)."""
    if not r.repro.env or not w.agent.env_lines:
        return None
    numbers = None  # a program of another ABI (a 32-bit one): the tracer named its calls by the native table
    if r.repro.abi:
        compat = arches.compat_of(r.repro.abi)
        numbers = syscall_numbers.table(compat["cc"], tuple(compat.get("cflags", []))) if compat else {}
        if not numbers:
            return None
    aliases = module_tree.aliases(r.kernel, r.case.check.test_module_files)
    try:
        source = Path(r.repro.source).read_text(errors="replace") if r.repro.source else ""
    except OSError:
        source = ""
    found = reach.analyse(w.agent.env_lines, reach.program_calls(source), guest_env.get(r.repro.env),
                          reach.Aliases(aliases.read_text(errors="replace")) if aliases else None, numbers,
                          frozenset(reach.setup_calls(source)), r.kernel.config_value if r.kernel.config else None,
                          reach.program_strings(source), reach.pseudo_calls(source))
    # a USB device the program emulates (syzkaller's syz_usb_* pseudo-calls, or raw_gadget driven by
    # hand): its calls are not counted apart, the console says what they reached
    if any(c.startswith("syz_usb_") for c in found.pseudo) or RAW_GADGET in source:
        found.usb = usb_console.from_log(w.vm.console_log)
        if found.usb is not None and (need := found.usb.need()):
            found.needs.append(need)
    return found
