# SPDX-License-Identifier: GPL-2.0
"""bug-report.md: a hang, as a report to the kernel's distribution puts it,
from the run's record alone (harness/reports/bug_report.py)."""
from __future__ import annotations

import json

from recorded import FIXTURES

from harness.reports import bug_report

RUN = json.loads((FIXTURES / "perf-refresh-6.16.12-4cpu" / "run.json").read_text())
BUG = {"title": "INFO: task hung in pipe_write", "bug_id": "aaaa0000000000000001", "status": "open",
       "matched": {"how": "title", "theirs": "INFO: task hung in pipe_write", "ours": "INFO: task hung in pipe_write"},
       "link": "https://syzkaller.appspot.com/bug?extid=aaaa0000000000000001",
       "record": {"fix-commits": [{"title": "pipe: wake the writer | <b>", "link": "https://git.kernel.org/x"}]}}


def test_a_report_names_the_package_the_bug_its_upstream_fix_and_the_files_to_attach():
    doc = RUN | {"reproducer": RUN["reproducer"] | {"syzbot": BUG, "source": "/tmp/pipe_hang.c"},
                 "prediction": {"status": "affected", "reasons": ["changelog: does not list the fix \"pipe: x\""]},
                 "command": ["/x/harness/kstall", "verify", "debian:6.16.12", "/tmp/pipe_hang.c", "--json",
                             "--results", "/tmp/r", "--duration", "120"]}
    text = bug_report.render(doc, ["console.log", "run.json", "backtraces.txt", "gdb.log"])
    origin = RUN["kernel"]["origin"]
    assert text.startswith(f"# {origin['package']} {origin['version']}: ")
    assert "- upstream fix: pipe: wake the writer \\| \\<b\\> (https://git.kernel.org/x): a backport candidate" in text
    assert "- this package's changelog: does not list the fix" in text
    assert "Again, with kstall: `kstall verify debian:6.16.12 /tmp/pipe_hang.c --duration 120`" in text
    attach = text.split("## Files to attach", 1)[1]
    assert "`console.log`" in attach and "`backtraces.txt`" in attach and "`/tmp/pipe_hang.c`" in attach
    assert "gdb.log" not in attach and "nothing was sent anywhere" in text


def test_a_fix_the_changelog_lists_is_no_backport_candidate():
    doc = RUN | {"reproducer": RUN["reproducer"] | {"syzbot": BUG},
                 "prediction": {"status": "fixed", "reasons": ["changelog: lists the fix \"pipe: x\" (in 6.16.3-1)"]}}
    text = bug_report.render(doc, [])
    assert "backport candidate" not in text and "the hang came with it" in text


def test_a_hang_not_syzbots_gets_no_upstream_fix_and_a_culprit_line_hides_no_backport():
    other = BUG | {"matched": None}
    doc = RUN | {"reproducer": RUN["reproducer"] | {"syzbot": other},
                 "prediction": {"status": "affected", "reasons": ["changelog: does not list the fix \"pipe: x\""]}}
    text = bug_report.render(doc, [])
    assert "upstream fix" not in text and "this run's hang is another, not syzbot's" in text
    # the changelog carries the culprit (its first word) but not the fix: still a backport candidate
    doc = RUN | {"reproducer": RUN["reproducer"] | {"syzbot": BUG},
                 "prediction": {"status": "affected", "reasons": ["changelog: lists the culprit \"pipe: y\"",
                                                                  "changelog: does not list the fix \"pipe: x\""]}}
    text = bug_report.render(doc, [])
    assert ": a backport candidate for this package" in text
    assert "- this package's changelog: does not list the fix" in text
