# SPDX-License-Identifier: GPL-2.0
"""One renderer per view, shared by every report, run directory and the
command line: a vCPU's line and backtrace, the kernel's console titles, a
matrix's headline and grid."""
from __future__ import annotations

import re

from harness.analysis import reach
from harness.analysis.classify import NAMED_ROLES, Role, waits_text
from harness.analysis.expect import FAILING, STATUS_TEXT

MAX_FRAMES = 24  # frames shown per CPU in a report (backtraces.txt keeps all)


def cpu_state(c: dict) -> str:
    """'stuck': the same class and place in every sample (a spin); else 'moving'"""
    return "stuck" if c.get("stuck") else "moving"


def cpu_line(c: dict, width: int = 0) -> str:
    """'CPU1: hrtimer_cancel self-deadlock at hrtimer_cancel+0x28/0x40 (stuck, 3/3 samples)'"""
    state = cpu_state(c)
    seen = (c.get("seen") or {}).get(c.get("signature"), 0)
    waits = waits_text(c["cpu"], c.get("waits_for") or [], c.get("lock") or "", c.get("waits_how") == "memory")
    waits = f", {waits}" if waits else ""
    return (f"CPU{c['cpu']}: {c['class']:<{width}} at {c.get('pc') or '?'} ({state}, {seen}/{c.get('samples')} "
            f"samples){waits}")


def cpu_backtraces(cpus: list[dict], benign: bool = False, max_frames: int | None = MAX_FRAMES) -> str:
    """Each CPU's line and stack (classify.CpuClass.to_json()), a blank line
    after each; idle and user-mode CPUs only with benign."""
    out = []
    for c in cpus:
        if c.get("role") == Role.BENIGN and not benign:
            continue
        out.append(cpu_line(c))
        out += [f"    {f}" for f in c.get("frames", [])[:max_frames]]
        out.append("")
    return "\n".join(out)


def other_cpus(cpus: list[dict]) -> str:
    """The CPUs a verdict does not name, by what they do: 'CPU0 idle, CPU2 user'."""
    named = {c["cpu"] for c in named_cpus(cpus)}
    return ", ".join(f"CPU{c['cpu']} {c['class']}" for c in cpus if c["cpu"] not in named)


def named_cpus(cpus: list[dict]) -> list[dict]:
    """The CPUs a verdict names: culprits, victims, emulator faults, unknowns."""
    return [c for c in cpus if c.get("role") in NAMED_ROLES]


def titles_text(titles: list[dict]) -> str:
    """'INFO: task hung in pipe_write (x2); ...' from console.titles()"""
    return "; ".join(t["title"] + (f" (x{t['count']})" if t["count"] > 1 else "") for t in titles)


def kernel_said(cell: dict) -> str:
    """What the kernel reported, and who held what its sleeping tasks waited for."""
    said = f"kernel reported: {titles_text(cell['console_titles'])}" if cell.get("console_titles") else ""
    return "; ".join(filter(None, [said, sleeping_waits(cell)]))


def sleeping_waits(cell: dict) -> str:
    """'waits: pid 91 (blocked-writer) waits for pipe->mutex held by ...' (harness/analysis/task_waits.py)"""
    return f"waits: {'; '.join(cell['waits'])}" if cell.get("waits") else ""


def grid(doc: dict) -> list[tuple[str, list[dict | None]]]:
    """The matrix as rows: each kernel with its cell per reproducer (None
    where the run had none, e.g. another shard's)."""
    cells = {(c["kernel"], c["reproducer"]): c for c in doc["cells"]}
    return [(k, [cells.get((k, r)) for r in doc["reproducers"]]) for k in doc["kernels"]]


def predicted(c: dict) -> str:
    """'record: fixed': what the cell's bug record predicts ("" without one)."""
    return f"record: {c['prediction']['status']}" if c.get("prediction") else ""


def headline(doc: dict) -> str:
    t = doc["totals"]
    parts = [f"{n} {STATUS_TEXT.get(s, s)}" for s, n in sorted(t.items(), key=lambda kv: kv[0] not in FAILING)]
    shards = f", shards {', '.join(doc['shards'])}" if doc.get("shards") else ""
    stopped = " (interrupted)" if doc.get("interrupted") else ""
    return f"kstall matrix: {', '.join(parts)}{stopped} ({doc['matrix']}{shards}, {doc['wall_s']:.0f}s)"


def failing_line(c: dict) -> str:
    """'REGRESSION: debian:6.16.12/perf-refresh: VULNERABLE: ... (expected not_reproduced)'"""
    return f"{STATUS_TEXT[c['status']]}: {c['id']}: {c['line'] or c['reason']} (expected {c['expect']})"


# a syzkaller reproducer's cell, by what a kernel team asks of it, in the order its table counts them
# a need's three kinds (reach.need_kind) apart: an answer about the kernel, a harness limit, the guest's
SYZBOT_OUTCOMES = ("reproduced", "different", "crashed", "not reproduced", "starved", reach.KERNEL,
                   reach.TEST_DEVICE, reach.HOST, "other")


def syzbot_outcome(c: dict) -> str:
    """Which of SYZBOT_OUTCOMES a cell is."""
    if (c.get("syzbot") or {}).get("matched"):
        return "reproduced"
    if c["verdict"] == "VULNERABLE":
        return "different"
    if c["verdict"] == "CRASHED":
        return "crashed"
    if c["verdict"] == "NOT_REPRODUCED":
        return "not reproduced"
    if c["verdict"] == "INCONCLUSIVE" and (c.get("health") or {}).get("mostly"):
        return "starved"
    if c["verdict"] == "INCONCLUSIVE" and c.get("needs"):
        return reach.need_kind(c["needs"][0])
    return "other"


def one_line(text: str, width: int = 100) -> str:
    """text on one line of at most width characters (an ellipsis where it was cut)."""
    text = " ".join(text.split())
    return text if len(text) <= width else text[:width - 1] + "…"


def syzbot_text(c: dict | None) -> str:
    """A syzkaller reproducer's cell, said as a distro maintainer asks:
    'reproduced: TITLE', 'different: TITLE', 'not reproduced (clean, 120 s)',
    'starved (WHY)', 'needs X'; with the bug record's prediction beside it
    ('record: fixed') and, where the two disagree, that they do."""
    if c is None:
        return "-"
    return " ".join(filter(None, [_syzbot_answer(c), f"[{predicted(c)}]" if predicted(c) else "",
                                  f"({syzbot_disagrees(c)})" if syzbot_disagrees(c) else ""]))


def _syzbot_answer(c: dict) -> str:
    outcome, health = syzbot_outcome(c), c.get("health") or {}
    tries = f" {c['tries']}" if c.get("tries") else ""
    if outcome == "reproduced":
        m = c["syzbot"]["matched"]
        return f"reproduced: {m['ours']}" + (f" ({m['how']})" if m["how"] != "title" else "") + tries
    if outcome in ("different", "crashed"):
        return f"{outcome}: {c.get('title') or c['line']}{tries}"
    if outcome == "not reproduced":
        secs = f"{c['duration_s']:.0f} s" if c.get("duration_s") else ""
        weaker = f"weaker: {health['events'][0]}" if health.get("events") else "clean"
        return f"not reproduced ({', '.join(filter(None, [weaker, secs]))})"
    if outcome == "starved":
        return f"starved ({health.get('why', '')}{': ' + health['events'][0] if health.get('events') else ''})"
    if outcome in (reach.KERNEL, reach.TEST_DEVICE, reach.HOST):
        return need_text(c["needs"][0])
    return f"{c['verdict'] or STATUS_TEXT[c['status']]}: {(c.get('line') or c.get('reason') or '')[:80]}"


def need_text(need: str) -> str:
    """'not in the kernel: filesystem sysv', 'test device not built: /dev/raw-gadget',
    'not in the guest: /dev/kvm' (the need's kind, then what)."""
    return f"{reach.need_kind(need)}: {need.split(':')[0]}"


def syzbot_disagrees(c: dict) -> str:
    """Where the record's prediction and the verdict part: a fix the package's
    changelog lists, yet syzbot's hang came back."""
    status = (c.get("prediction") or {}).get("status")
    if status == "fixed" and syzbot_outcome(c) == "reproduced":
        return "disagrees: the changelog lists the fix"
    return ""


def syzbot_counts(doc: dict) -> list[tuple[str, dict[str, int]]]:
    """Per kernel, how many of syzbot's bugs came out each way (SYZBOT_OUTCOMES)."""
    out = []
    for i, k in enumerate(doc["kernels"]):
        n = dict.fromkeys(SYZBOT_OUTCOMES, 0)
        for _, row in syzbot_rows(doc):
            if (c := row[i]) is not None:
                n[syzbot_outcome(c)] += 1
        out.append((k, n))
    return out


def syzbot_counts_text(n: dict[str, int]) -> str:
    """'reproduced 2, different 1, not reproduced 80, starved 3, needs 9'"""
    return ", ".join(f"{k} {v}" for k, v in n.items() if v)


PAGE_SECTIONS = ("open", "fixed", "other hang", "not reproduced", "not run")


def nothing_open(page: dict[str, list[str]]) -> str:
    """A page's line where no syzbot hang is open: a kernel whose cells all
    ended without an answer (its "not run" lines say why), or none of whose
    cells ran (a run's --only or shard left them out), cannot say "none open"."""
    if any(page[s] for s in PAGE_SECTIONS if s != "not run"):
        return "no syzbot hang open here"
    return "no syzbot bug ran to an answer here" if page["not run"] else "none of syzbot's bugs ran here in this run"


def per_kernel(doc: dict) -> list[tuple[str, dict[str, list[str]]]]:
    """Each kernel's page of syzbot's bugs, as a kernel team reads it: the
    hangs still open there (syzbot's own hang came back), each with its
    evidence and the upstream fix a backport would take; those fixed on the
    kernel's release line, with the version that fixed them; other hangs;
    those that did not come back; what could not be run, and why."""
    out = []
    for k, entries in kernel_pages(doc):
        page: dict[str, list[str]] = {s: [] for s in PAGE_SECTIONS}
        for section, _, text in entries:
            page[section].append(text)
        out.append((k, page))
    return out


def kernel_pages(doc: dict) -> list[tuple[str, list[tuple[str, str, str]]]]:
    """Per kernel, each syzbot bug's (section of PAGE_SECTIONS, reproducer, line)."""
    out = []
    rows = syzbot_rows(doc)
    for i, k in enumerate(doc["kernels"]):
        entries = []
        for bug, row in rows:
            if (c := row[i]) is None:
                continue
            bid, title = (bug.get("bug_id") or bug["reproducer"])[:12], bug.get("title", "")
            outcome, fix = syzbot_outcome(c), _fix_said(c)
            if outcome == "reproduced":
                said, upstream = kernel_said(c), upstream_fix(c)
                entry = ("open", f"{bid} open: {title} ({_syzbot_answer(c)}" + (f"; {said}" if said else "")
                         + (f"; {fix}" if fix else "")
                         + (f"; upstream fix: {upstream} (a backport candidate)" if upstream else "") + ")")
            elif outcome in ("different", "crashed"):
                entry = ("other hang", f"{bid}: {title}: {_syzbot_answer(c)}")
            elif outcome == "not reproduced" and (since := fixed_on_line(doc, bug, row, i)):
                entry = ("fixed", f"{bid} fixed: {title} ({since})")
            elif outcome == "not reproduced":
                entry = ("not reproduced", f"{bid}: {title}" + (f" ({fix})" if fix else ""))
            else:
                entry = ("not run", f"{bid}: {title}: {_syzbot_answer(c)}")
            entries.append((entry[0], bug["reproducer"], entry[1]))
        out.append((k, entries))
    return out


def _fix_said(c: dict) -> str:
    """What the bug's record and the kernel's changelog say of its fix, in a line ('' when nothing)."""
    p = c.get("prediction") or {}
    reason = next((r for r in p.get("reasons", []) if "fix" in r), "")
    return f"record: {p['status']}" + (f", {reason}" if reason else "") if p.get("status") else ""


def upstream_fix(c: dict) -> str:
    """The fixing commit syzbot's record names ('' when it names none)."""
    record = (c.get("syzbot") or {}).get("record") or {}
    return next((str(f["title"]) for f in record.get("fix-commits") or [] if isinstance(f, dict) and f.get("title")),
                "")


def line_version(spec: str) -> tuple[str, tuple[int, ...]] | None:
    """A kernel spec's release line, its whole flavour part of it, and version:
    debian:6.1.192 -> ('6.1', (6, 1, 192)); debian:6.19.14-rt -> ('6.19-rt', ...);
    debian:6.1.176-rt-arm64 -> ('6.1-rt-arm64', ...), another line than amd64's rt."""
    m = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?((?:-[a-z][a-z0-9]*)*)", spec.split(":", 1)[-1])
    return (f"{m[1]}.{m[2]}{m[4] or ''}", tuple(int(x) for x in m.groups(0)[:3])) if m else None


def fixed_on_line(doc: dict, bug: dict, row: list[dict | None], i: int) -> str:
    """Why a bug not reproduced on kernel i counts as fixed on its release
    line: the matrix file's fixed_in (the first version without the hang, as
    a bisection over the line found it), else an older kernel of the same
    line in this matrix where syzbot's hang came back. '' when neither."""
    here = line_version(doc["kernels"][i])
    if here is None:
        return ""
    # the line's kernels (its flavour's) in this matrix where syzbot's hang came
    hung = [(v[1], doc["kernels"][j]) for j, c in enumerate(row)
            if c and syzbot_outcome(c) == "reproduced" and (v := line_version(doc["kernels"][j]))
            and v[0] == here[0]]
    if any(v > here[1] for v, _ in hung):
        return ""  # a newer kernel of the line hung: this one's clean run is no fix
    about = doc.get("about", {}).get(bug["reproducer"], {})
    for spec in about.get("fixed_in", []):
        if (v := line_version(spec)) and v[0] == here[0] and v[1] <= here[1] and all(h < v[1] for h, _ in hung):
            fix = about.get("fix") or upstream_fix(next((c for c in row if c), {}))
            return f"fixed in {spec}" + (f": {fix}" if fix else "")
    older = [h for h in hung if h[0] < here[1]]
    return (f"hung on {max(older)[1]}, not here: fixed in between, unless a clean run (no P(miss)) missed it"
            if older else "")


def syzbot_rows(doc: dict) -> list[tuple[dict, list[dict | None]]]:
    """One row per syzkaller reproducer (its bug: title, link), with its cell per kernel."""
    cells = {(c["kernel"], c["reproducer"]): c for c in doc["cells"]}
    rows = []
    for r in doc["reproducers"]:
        row = [cells.get((k, r)) for k in doc["kernels"]]
        bug = doc.get("bugs", {}).get(r) or next((c["syzbot"] for c in row if c and c.get("syzbot")), None)
        if bug is not None:
            rows.append((bug | {"reproducer": r}, row))
    return rows
