# SPDX-License-Identifier: GPL-2.0
"""The project is GPL-2.0 (like kernel tooling and the kselftest headers it
is meant to sit beside): a LICENSE file, and an SPDX line at the top of every
source file (C, headers, Python, shell, Makefile)."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SPDX = re.compile(r"^(//|#|/\*) SPDX-License-Identifier: GPL-2\.0( \*/)?$")
SCRIPTS = {"harness/kstall", "ci/install-deps", ".ci/run"}


def source_files() -> list[str]:
    files = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    return [f for f in files
            if not (f.startswith("tests/fixtures/") and not f.endswith(".py"))
            and (re.search(r"\.(c|h|py)$", f) or f.endswith("Makefile") or f in SCRIPTS)]


def test_license_is_gpl_2():
    text = (REPO / "LICENSE").read_text()
    assert "GNU GENERAL PUBLIC LICENSE" in text and "Version 2, June 1991" in text


def test_every_source_file_has_an_spdx_line():
    files = source_files()
    assert len(files) > 50 and "repro/agent/main.c" in files and "harness/cli.py" in files
    missing = []
    for f in files:
        head = (REPO / f).read_text(errors="replace").splitlines()[:2]
        lines = head[1:] if head and head[0].startswith("#!") else head[:1]
        if not any(SPDX.match(l) for l in lines):
            missing.append(f)
    assert missing == [], f"no SPDX-License-Identifier line at the top: {missing}"
