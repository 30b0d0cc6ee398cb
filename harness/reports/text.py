# SPDX-License-Identifier: GPL-2.0
"""What the command line prints: a verify run's verdict with its evidence, and
the matrix's verdict table (`make run`)."""
from __future__ import annotations

from harness.analysis import bug_record
from harness.analysis.bug_record import BugRecord, Prediction
from harness.analysis.expect import STATUS_TEXT
from harness.analysis.record import RunRecord
from harness.analysis.verdict import VerdictKind
from harness.reports import views
from images.kernels.kernel import Kernel


def run_text(rec: RunRecord) -> str:
    """verify's human output: the verdict line, then what it rests on."""
    out = [rec.line]
    ev = rec.evidence
    for s in (ev.stalls or {}).get("stalled", []):
        nulls = f", {s['nulls']} NULL returns" if s.get("nulls") is not None else ""
        out.append(f"  {s['title']}: longest {s['max_ms']:.1f} ms, {s['over']} past {s['threshold_ms']:g} ms{nulls}")
    if ev.nmi_injection:
        out.append(f"  NMIs injected: {ev.nmi_injection['sent']} at {ev.nmi_injection['achieved_rate']}/s")
    v = rec.verdict
    if rec.hang and rec.hang.get("title") and v.signature is None:  # no signature named it: each CPU's state
        out += [f"  {c}" for c in rec.hang_lines()]
    elif (v.signature is not None and not rec.stalled_by_measurement) or v.verdict == VerdictKind.INCONCLUSIVE:
        out += [f"  {views.cpu_line(c, 30)}" for c in views.named_cpus(rec.cpus)]
        if others := views.other_cpus(rec.cpus):
            out.append(f"  other CPUs: {others}")
    if v.verdict == VerdictKind.NOT_REPRODUCED and ev.p_miss:
        out.append(f"  {ev.p_miss['method']}")
    if ev.console_titles:
        out.append(f"  kernel reported: {views.titles_text(ev.console_titles)}")
    out += [f"  waits: {f}" for f in (rec.waits or {}).get("findings", []) if rec.hang is None or rec.verdict.signature]
    syz = rec.reproducer.get("syzbot")
    if syz:
        out.append(f"  syzbot: \"{syz.get('title') or '?'}\" {syz.get('link') or ''} "
                   f"(status: {syz.get('status') or '?'})")
    if rec.prediction:
        out.append(f"  {prediction_line(rec.prediction, v.verdict)}")
    # a program run for its time says what its calls reached, even when nothing hung
    timeboxed = rec.reproducer.get("env") and v.verdict == VerdictKind.NOT_REPRODUCED
    if (v.verdict not in (VerdictKind.VULNERABLE, VerdictKind.NOT_REPRODUCED) or timeboxed) and v.summary:
        out.append(f"  reason: {v.reason}")
    t = rec.timings
    boot = f"boot {t['boot_s']}s" if t.get("boot_s") is not None else "no boot"
    counted = f"{ev.count} {ev.count_name}; " if ev.count is not None else ""
    out.append(f"  {counted}{boot}, verdict after {rec.wall_s}s; results: {rec.results_dir or 'not kept'}")
    return "\n".join(out)


def prediction_line(p: dict, verdict: str) -> str:
    """'predicted from the record: affected (CVE-2025-40327), agrees'"""
    said = bug_record.agreement(p["status"], verdict)
    what = f"{p['status']} ({p['cve']})" if p.get("cve") else p["status"]
    return f"predicted from the record: {what}" + (f", {said}" if said else "")


def explain_text(kernel: Kernel, record: BugRecord | None, p: Prediction, reproducer: str,
                 before: dict | None = None) -> str:
    """`kstall explain`: the prediction and every line it rests on, then what
    the check before booting finds (before: explain.before_boot's)."""
    origin = kernel.origin
    package = " ".join(x for x in (origin.get("image_package") or origin.get("package"), origin.get("version")) if x)
    head = f"{kernel.spec} (upstream {kernel.upstream or 'unknown'}{', ' + package if package else ''})"
    if record is not None:
        head += f" and {reproducer or 'no reproducer'}: {record.cve}" + \
            (f" \"{record.fix_subject}\"" if record.fix_subject else "")
    out = [head, f"predicted: {p.status}"] + [f"  {r}" for r in p.reasons]
    if record is not None and not reproducer:
        out.append("  kstall has no reproducer for it: a prediction only, nothing measured")
    if before is not None and before["verdict"]:
        out.append(f"before booting: {before['verdict']}, with no boot: {before['reason']}")
    elif before is not None:
        out.append(f"before booting: {before['reason'] or 'nothing the reproducer needs is missing'}")
    return "\n".join(out)


def matrix_table(doc: dict) -> str:
    """The verdict table `make run` prints; syzkaller's reproducers one bug a row."""
    bugs = views.syzbot_rows(doc)
    if bugs and len(bugs) == len(doc["reproducers"]):
        return "\n".join([views.headline(doc), "", bug_table(bugs, doc["kernels"]), ""] +
                         [f"{k}: {views.syzbot_counts_text(n)}" for k, n in views.syzbot_counts(doc)] +
                         [views.failing_line(c) for c in doc["cells"] if c["failing"]])
    w = max(len(k) for k in doc["kernels"]) + 2
    rows = views.grid(doc)
    cols = [max([len(r), 14] + [len(_cell_text(row[i])) for _, row in rows]) for i, r in enumerate(doc["reproducers"])]
    out = [views.headline(doc), "",
           "kernel".ljust(w) + "".join(r.ljust(c + 2) for r, c in zip(doc["reproducers"], cols))]
    for k, row in rows:
        out.append((k.ljust(w) + "".join(_cell_text(c).ljust(width + 2) for c, width in zip(row, cols))).rstrip())
    out += [views.failing_line(c) for c in doc["cells"] if c["failing"]]
    return "\n".join(out)


def _cell_text(c: dict | None) -> str:
    if c is None:
        return "-"
    status = f" [{STATUS_TEXT[c['status']]}]" if c["status"] != "pass" else ""
    predicted = f" ({views.predicted(c)})" if views.predicted(c) else ""
    return (c["verdict"] or STATUS_TEXT[c["status"]]) + predicted + status


def bug_table(bugs: list[tuple[dict, list[dict | None]]], kernels: list[str]) -> str:
    """syzkaller's reproducers: the bug, its title, then each kernel's answer."""
    out = []
    for bug, row in bugs:
        out.append(f"{bug.get('title') or bug['reproducer']}  [{bug.get('link') or bug['reproducer']}]")
        out += [f"  {k}: {views.syzbot_text(c)}" for k, c in zip(kernels, row)]
    return "\n".join(out)
