# SPDX-License-Identifier: GPL-2.0
"""kstall's version: the VERSION file a release (or `make deb`) writes into
the tree, else what git says of the checkout: 0.<commits>+g<hash>, with
`.dirty` for uncommitted changes (a Debian-sortable version either way)."""
from __future__ import annotations

import subprocess

from harness.base import paths


def version() -> str:
    written = paths.REPO / "VERSION"
    if written.is_file():
        return written.read_text().strip()
    try:
        def git(*args: str) -> str:
            return subprocess.run(["git", "-C", str(paths.REPO), *args], capture_output=True, text=True,
                                  timeout=10, check=True).stdout.strip()
        dirty = ".dirty" if git("status", "--porcelain", "--untracked-files=no") else ""
        return f"0.{git('rev-list', '--count', 'HEAD')}+g{git('rev-parse', '--short=12', 'HEAD')}{dirty}"
    except (OSError, subprocess.SubprocessError):
        return "0.0+unknown"
