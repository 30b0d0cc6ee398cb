# SPDX-License-Identifier: GPL-2.0
"""A matrix as KCIDB I/O data (schema v4.5), for KernelCI's dashboard.

One checkout and one build per kernel (a distro kernel is a build kstall did
not make: its package is the checkout), one test per cell, path
"kstall.<reproducer>". The verdict maps to a KCIDB status (ci/README.md):

    VULNERABLE, CRASHED        FAIL   the kernel has the bug, or died of it
    NOT_REPRODUCED             PASS   at the P(miss) in misc
    INCONCLUSIVE               SKIP   when the kernel lacks the config the
                                      path needs, else ERROR
    ERROR, a cell not run      MISS   kstall or the emulator failed
    a cell the matrix skips    SKIP

An xfail cell is `waived`. misc carries what KCIDB has no field for: the
verdict, signature, P(miss), counts and the kernel's console-report titles.
"""
from __future__ import annotations

import hashlib
import re

from harness.analysis.verdict import VerdictKind
from harness.base import arch
from harness.reports import views

ORIGIN = "kstall"
SCHEMA_VERSION = {"major": 4, "minor": 5}
EXCERPT_MAX = 16384  # the schema's limit on log_excerpt

STATUS = {VerdictKind.VULNERABLE: "FAIL", VerdictKind.CRASHED: "FAIL", VerdictKind.NOT_REPRODUCED: "PASS",
          VerdictKind.ERROR: "MISS", VerdictKind.FAILED: "ERROR"}  # FAILED: the test program itself failed


def status(cell: dict) -> str:
    if cell["status"] == "skip":
        return "SKIP"
    verdict = cell.get("verdict")
    if verdict == VerdictKind.INCONCLUSIVE:
        # nothing booted: the kernel (its config, its architecture) cannot run the path
        return "SKIP" if (cell.get("vm") or {}).get("accel") == "none" else "ERROR"
    return STATUS.get(verdict, "MISS")


def _id(*parts: str) -> str:
    """origin:<readable part>-<hash>: stable for the same inputs, and within
    the schema's id pattern whatever the spec contains."""
    text = "/".join(parts)
    slug = re.sub(r"[^A-Za-z0-9_.+-]+", "_", parts[-1])[:80]
    return f"{ORIGIN}:{slug}-{hashlib.sha256(text.encode()).hexdigest()[:12]}"


def _time(cell: dict) -> dict:
    return {"start_time": cell["started"]} if cell.get("started") else {}


def _p_miss(cell: dict) -> dict:
    p = cell.get("p_miss") or {}
    return {"p_miss": p.get("p_miss"), "p_miss_log10": p.get("p_miss_log10"), "p_miss_text": p.get("text")} if p \
        else {}


def _excerpt(cell: dict) -> str:
    parts = [cell.get("line") or "", cell.get("reason") or ""]
    if cell.get("console_titles"):
        parts.append(views.kernel_said(cell))
    parts.append(cell.get("backtraces") or "")
    return "\n".join(p for p in parts if p)[:EXCERPT_MAX]


def _kernel_objects(cell: dict) -> tuple[dict, dict]:
    spec = cell["kernel"]
    origin = cell.get("kernel_origin") or {}
    checkout = {"id": _id("checkout", spec), "origin": ORIGIN, "valid": True,
                "tree_name": spec.split(":", 1)[0], "comment": spec,
                "misc": {"spec": spec, **({"package": origin} if origin else {})}}
    if re.fullmatch(r"[0-9a-f]{40}", origin.get("commit", "")):
        checkout["git_commit_hash"] = origin["commit"]
    build = {"id": _id("build", spec), "checkout_id": checkout["id"],
             "origin": ORIGIN, "architecture": arch.get(cell.get("arch") or arch.DEFAULT).kcidb,
             "comment": cell.get("kernel_canonical") or spec,
             "valid": bool(cell.get("kernel_sha256")),
             "misc": {"spec": spec, "canonical": cell.get("kernel_canonical"), "sha256": cell.get("kernel_sha256")}}
    return checkout, build


def _test(doc: dict, cell: dict, build_id: str, page: dict[tuple[str, str], str]) -> dict:
    vm = cell.get("vm") or {}
    t = {"id": _id("test", doc["id"], cell["id"]), "build_id": build_id, "origin": ORIGIN,
         "path": "kstall." + re.sub(r"[^a-zA-Z0-9_-]", "_", cell["reproducer"]),
         "status": status(cell), "comment": cell.get("line") or cell.get("reason") or cell["status"],
         "duration": cell.get("seconds") or 0, **_time(cell),
         "misc": {"verdict": cell.get("verdict"), "expect": cell["expect"], "matrix_status": cell["status"],
                  "signature": cell.get("signature"), "confidence": cell.get("confidence"),
                  **_p_miss(cell), "count": cell.get("count"),
                  "count_name": cell.get("count_name"), "console_titles": cell.get("console_titles") or [],
                  "run_dir": cell.get("run_dir"), "matrix_run": doc["id"],
                  "prediction": (cell.get("prediction") or {}).get("status"),
                  # a syzbot bug on this kernel's page: open, fixed, other hang, not reproduced, not run
                  "syzbot_page": page.get((cell["kernel"], cell["reproducer"]))}}
    if cell.get("xfail"):
        t["waived"] = True
    if vm:
        t["environment"] = {"comment": f"QEMU {vm.get('accel', '').upper()}, {vm.get('cpus')} vCPUs, "
                                       f"{vm.get('memory_mb')} MiB",
                            "misc": {k: vm[k] for k in ("accel", "cpus", "memory_mb") if k in vm}}
    excerpt = _excerpt(cell)
    if excerpt:
        t["log_excerpt"] = excerpt
    # KCIDB has no null: a property without a value is left out
    t["misc"] = {k: v for k, v in t["misc"].items() if v is not None}
    return t


def from_matrix(doc: dict) -> dict:
    """kcidb.json's document"""
    checkouts: dict[str, dict] = {}
    builds: dict[str, dict] = {}
    tests = []
    page = {(k, r): section for k, entries in views.kernel_pages(doc) for section, r, _ in entries}
    for cell in doc["cells"]:
        checkout, build = _kernel_objects(cell)
        checkouts.setdefault(checkout["id"], checkout)
        if build["valid"] or build["id"] not in builds:  # a cell that booted the kernel knows its hash
            builds[build["id"]] = build
        tests.append(_test(doc, cell, build["id"], page))
    return {"version": SCHEMA_VERSION, "checkouts": list(checkouts.values()), "builds": list(builds.values()),
            "tests": tests}
