# SPDX-License-Identifier: GPL-2.0
"""bug-report.md: a hang a run found, as a report to the kernel's
distribution would put it, from the run's record alone: which package, which
bug (syzbot's, with the upstream fix a backport would take), what the kernel
said and for how long, who waited for whom, how to run it again, and which
files of the run directory to attach. kstall writes it beside the run and
sends nothing anywhere."""
from __future__ import annotations

from harness.analysis import console
from harness.reports.markdown import code_span, esc, safe_link

ATTACH = ("console.log", "run.json", "backtraces.txt", "threads.txt")
EXCERPT_LINES = 60
FENCE = "`" * 3


def render(doc: dict, files: list[str]) -> str:
    """doc: run.json's document; files: the run directory's file names."""
    k, r = doc["kernel"], doc["reproducer"]
    origin = k.get("origin") or {}
    bug = r.get("syzbot") or {}
    record = bug.get("record") or {}
    fixes = [f for f in record.get("fix-commits") or [] if isinstance(f, dict) and f.get("title")]
    package = f"{origin.get('package', k.get('release', ''))} {origin.get('version', '')}".strip()
    title = doc.get("title") or doc.get("summary") or doc["verdict"]
    lines = [f"# {esc(package or k.get('spec'))}: {esc(title)}", ""]
    lines.append(f"- kernel: {package} ({k.get('spec')}" + (f", {origin['suite']}" if origin.get("suite") else "")
                 + f", {k.get('arch', '')})")
    theirs = bool(bug.get("matched"))  # syzbot's own hang came: its bug and its fix are this report's
    if bug:
        lines.append(f"- syzbot: [{esc(bug.get('title', ''))}]({safe_link(bug.get('link', ''))}), "
                     f"{esc(bug.get('status', ''))}" + (" upstream" if fixes else "")
                     + ("" if theirs else "; this run's hang is another, not syzbot's: its fix is not this one's"))
    pred = doc.get("prediction") or {}
    said = [x.removeprefix("changelog: ") for x in pred.get("reasons", []) if x.startswith("changelog:")]
    of_fix = [x for x in said if "the fix" in x]  # not the culprit's line
    listed = any(x.startswith("lists the fix") for x in of_fix)
    for f in fixes if theirs else []:
        lines.append(f"- upstream fix: {esc(f['title'])}" + (f" ({safe_link(str(f['link']))})" if f.get("link") else "")
                     + ("" if listed else ": a backport candidate for this package"))
    if theirs and of_fix:
        lines.append(f"- this package's changelog: {esc(of_fix[0])}"
                     + ("; the hang came with it" if listed and doc["verdict"] == "VULNERABLE" else ""))
    mods = k.get("test_modules") or []
    if mods:
        lines.append("- the kernel ran with a test module kstall built from its own source: "
                     + ", ".join(m.get("name", "") for m in mods) + " (unsigned: it taints the kernel)")
    for f in (doc.get("vm") or {}).get("firmware") or []:
        names = esc(", ".join(f.get("files", [])))
        lines.append(f"- the guest carried device firmware, as syzbot's images do: {names} "
                     f"for {esc(f.get('driver', ''))}, from Debian's {esc(f.get('package', ''))}")
    lines += ["", "## What happened", "", esc(doc["line"]), ""]
    if doc.get("reason"):
        lines += [esc(doc["reason"]), ""]
    waits = (doc.get("waits") or {}).get("findings") or []
    if waits:
        lines += ["Who waits for whom (the tasks' stacks, read from the guest):", ""]
        lines += [f"- {esc(w)}" for w in waits] + [""]
    # the program's reports that were not a slow wait: the boot's and those that went on are no evidence
    ours = [rep for rep in (doc.get("evidence") or {}).get("console_reports") or []
            if not rep.get("before_program") and (rep.get("stuck") or {}).get("state") != "went on"]
    excerpt = [x for rep in ours[:2] for x in rep.get("excerpt", [])][:EXCERPT_LINES]
    titles = console.titles(ours)
    if titles:
        lines += ["The kernel reported: " + "; ".join(f"{esc(t['title'])} (x{t['count']})" for t in titles), ""]
    if excerpt:
        lines += ["The kernel's report (console.log has all of it):", "", FENCE,
                  *(x.replace(FENCE, "'" * 3) for x in excerpt), FENCE, ""]
    vm = doc.get("vm") or {}
    lines += ["## How it ran", "",
              f"QEMU {str(vm.get('accel', '')).upper()}, {vm.get('cpus')} vCPUs, {vm.get('memory_mb')} MiB, "
              f"command line {code_span(vm.get('cmdline', ''))}.", "",
              "Again, with kstall: " + code_span(" ".join(_again(doc))), ""]
    attach = [f for f in ATTACH if f in files] + ([r["source"]] if r.get("source") else [])
    lines += ["## Files to attach", "", *(f"- {code_span(f)}" for f in attach), "",
              "Written by kstall from the run's record; nothing was sent anywhere.", ""]
    return "\n".join(lines)


def _again(doc: dict) -> list[str]:
    """The verify command that runs it again: the recorded one, without the flags of a harness around it."""
    cmd = list(doc.get("command") or [])
    out, skip = ["kstall"], False
    for a in cmd[1:]:
        if skip:
            skip = False
        elif a in ("--json", "--no-snapshot"):
            continue
        elif a == "--results":
            skip = True
        else:
            out.append(a)
    return out
