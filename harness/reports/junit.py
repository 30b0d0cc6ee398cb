# SPDX-License-Identifier: GPL-2.0
"""junit.xml: one test suite per reproducer, one test case per kernel."""
from __future__ import annotations

import xml.etree.ElementTree as ET
from collections import Counter

from harness.analysis.expect import STATUS_TEXT
from harness.reports import views


def render(doc: dict) -> str:
    suites = ET.Element("testsuites", name="kstall matrix")
    by_repro: dict[str, list[dict]] = {}
    for c in doc["cells"]:
        by_repro.setdefault(c["reproducer"], []).append(c)
    all_counts = Counter()
    for repro, cells in by_repro.items():
        counts = Counter()
        suite = ET.SubElement(suites, "testsuite", name=f"kstall.{repro}", timestamp=doc["started"][:19],
                              hostname="kstall")
        for c in cells:
            case = ET.SubElement(suite, "testcase", classname=f"kstall.{repro}", name=c["kernel"],
                                 time=f"{c['seconds']:.2f}")
            counts["tests"] += 1
            st = c["status"]
            expected = f"expected {c['expect']}"
            if st in ("regression", "unexpected-pass", "mismatch", "disagrees"):
                counts["failures"] += 1
                el = ET.SubElement(case, "failure", type=st, message=f"{STATUS_TEXT[st]}: {expected}: {c['line']}")
                el.text = "\n".join(filter(None, [c["line"], c["reason"], views.kernel_said(c), c["backtraces"]]))
            elif st in ("error", "missing", "not-run"):
                counts["errors"] += 1
                el = ET.SubElement(case, "error", type="error", message=f"{expected}: {c['reason']}")
                el.text = c["reason"] or ""
            elif st in ("skip", "xfail"):
                counts["skipped"] += 1
                ET.SubElement(case, "skipped", message=f"{st}: {c['reason'] or c.get('xfail') or ''}")
            out = ET.SubElement(case, "system-out")
            out.text = "\n".join(filter(None, [c["line"], c["reason"], views.predicted(c),
                                               f"results: {c['run_dir']}" if c["run_dir"]
                                               else None]))
            counts["time"] += c["seconds"]
        for k in ("tests", "failures", "errors", "skipped"):
            suite.set(k, str(counts[k]))
        suite.set("time", f"{counts['time']:.2f}")
        all_counts.update(counts)
    for k in ("tests", "failures", "errors", "skipped"):
        suites.set(k, str(all_counts[k]))
    suites.set("time", f"{doc['wall_s']:.2f}")
    ET.indent(suites)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suites, encoding="unicode") + "\n"
