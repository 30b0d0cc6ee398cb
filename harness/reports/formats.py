# SPDX-License-Identifier: GPL-2.0
"""The report formats: one file each, rendered from matrix.json's document.
This table is the one place that names them; a new format is a module here
and a line in it."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

from harness.base import paths
from harness.reports import html, junit, kcidb, ktap, lava, markdown

FORMATS: dict[str, Callable[[dict], str]] = {
    "matrix.json": lambda doc: json.dumps(doc, indent=2) + "\n",
    "junit.xml": junit.render,
    "summary.md": markdown.render,
    "report.html": html.render,
    "matrix.ktap": ktap.render,
    "kcidb.json": lambda doc: json.dumps(kcidb.from_matrix(doc), indent=2) + "\n",
    "lava-cases.txt": lava.render,
}


def write_all(directory: Path, doc: dict) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for name, render in FORMATS.items():
        paths.write_atomic(directory / name, render(doc))


def listing(directory: Path) -> str:
    """'DIR/{summary.md,report.html,...}' for the line that says where they are."""
    return f"{directory}/{{{','.join(FORMATS)}}}"
