# SPDX-License-Identifier: GPL-2.0
"""The report formats: one file each, rendered from matrix.json's document.
This table is the one place that names them; a new format is a module here
and a line in it."""
from __future__ import annotations

import json
from pathlib import Path

from harness.base import paths
import importlib

# each report file and the module (harness/reports/NAME.py) whose render(doc)
# writes it: imported when a matrix writes them, not by every kstall command
# (html's alone is 50 ms of a restored verify's second)
FORMATS: dict[str, str] = {
    "matrix.json": "",
    "junit.xml": "junit",
    "summary.md": "markdown",
    "report.html": "html",
    "matrix.ktap": "ktap",
    "kcidb.json": "kcidb",
    "lava-cases.txt": "lava",
}


def render(name: str, doc: dict) -> str:
    module = FORMATS[name]
    if not module:  # with each kernel's page of syzbot's bugs, derived afresh (a merge re-renders it)
        from harness.reports import views
        pages = {k: page for k, page in views.per_kernel(doc)} if doc.get("bugs") else None
        return json.dumps(doc | ({"per_kernel": pages} if pages else {}), indent=2) + "\n"
    if module == "kcidb":
        return json.dumps(importlib.import_module("harness.reports.kcidb").from_matrix(doc), indent=2) + "\n"
    return importlib.import_module(f"harness.reports.{module}").render(doc)


def write_all(directory: Path, doc: dict) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for name in FORMATS:
        paths.write_atomic(directory / name, render(name, doc))


def listing(directory: Path) -> str:
    """'DIR/{summary.md,report.html,...}' for the line that says where they are."""
    return f"{directory}/{{{','.join(FORMATS)}}}"
