# SPDX-License-Identifier: GPL-2.0
"""matrix.ktap: the matrix as KTAP v1 (Documentation/dev-tools/ktap.rst), for
LAVA- and tuxrun-style consumers."""
from __future__ import annotations

from harness.analysis.expect import FAILING, STATUS_TEXT
from harness.reports import views


def _ktap_text(text: str) -> str:
    """One line, no '#' (KTAP starts a directive at the first '#')."""
    return " ".join(str(text or "").replace("#", "no.").split())


def render(doc: dict) -> str:
    """The matrix as KTAP v1 (Documentation/dev-tools/ktap.rst), one test per
    cell, for LAVA- and tuxrun-style consumers: failing cells (a cell the
    run never reached among them) are `not ok`, skipped cells `ok … # SKIP`,
    xfail cells `ok … # XFAIL` (kselftest's directive); the verdict line
    follows as a diagnostic."""
    out = ["KTAP version 1", f"1..{len(doc['cells'])}", f"# kstall matrix {doc['matrix']} ({doc['id']})"]
    for i, c in enumerate(doc["cells"], 1):
        st = c["status"]
        name = _ktap_text(c["id"]).replace(" ", "_")
        why = _ktap_text(c["reason"] or c.get("xfail") or st)
        directive = {"skip": f" # SKIP {why}", "xfail": f" # XFAIL {why}"}.get(st, "")
        out.append(f"{'not ok' if st in FAILING else 'ok'} {i} {name}{directive}")
        detail = c["line"] or c["reason"]
        if detail:
            out.append(f"# {_ktap_text(detail)} (expected {c['expect']}: {STATUS_TEXT.get(st, st)})")
        if views.predicted(c):
            out.append(f"# {_ktap_text(views.predicted(c))} ({_ktap_text(c['prediction'].get('cve') or '')})")
        if views.kernel_said(c):
            out.append(f"# {_ktap_text(views.kernel_said(c))}")
    t = doc["totals"]
    out.append(f"# totals: {' '.join(f'{k}={n}' for k, n in sorted(t.items()))}")
    return "\n".join(out) + "\n"
