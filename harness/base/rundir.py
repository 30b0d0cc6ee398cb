# SPDX-License-Identifier: GPL-2.0
"""Run directories: one per run, written atomically, never overwritten.

A run is assembled in results/.<id>.incomplete/ and renamed to results/<id>/
when it is complete, so a reader never sees half a run and an interrupted
run still ends up as a whole directory (with verdict ERROR, reason
"interrupted"). Earlier attempts of a retried run stay in attempt-<n>/.
"""
from __future__ import annotations

import errno
import json
import os
import re
import secrets
import shutil
import time
from pathlib import Path

from harness.base import leftovers, paths

def out_of_space(e: BaseException) -> bool:
    return isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT)


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.+_-]+", "-", text).strip("-")[:60]


class RunDir:
    def __init__(self, label: str, root: Path | None = None) -> None:
        self.root = root or paths.results_dir()
        self.root.mkdir(parents=True, exist_ok=True)
        stamp = time.strftime("%Y%m%d-%H%M%S")
        self.id = f"{stamp}-{slug(label)}-{secrets.token_hex(2)}"
        self.work = self.root / f".{self.id}.incomplete"
        self.work.mkdir(mode=0o700)  # cores, consoles, kallsyms: the user's alone (the mode outlives the rename)
        os.chmod(self.work, 0o700)   # whatever the umask
        leftovers.mark(self.work)  # a later run removes it if this one is killed
        self.final = self.root / self.id

    def attempt(self, n: int) -> Path:
        d = self.work / f"attempt-{n}"
        d.mkdir(exist_ok=True)
        return d

    def promote(self, attempt_dir: Path) -> None:
        """The final attempt's files go to the top of the run directory."""
        for p in attempt_dir.iterdir():
            os.replace(p, self.work / p.name)
        attempt_dir.rmdir()

    def write_json(self, name: str, doc: dict) -> None:
        (self.work / name).write_text(json.dumps(doc, indent=2, default=str) + "\n")

    def write_text(self, name: str, text: str) -> None:
        (self.work / name).write_text(text)

    def finalize(self) -> Path:
        (self.work / leftovers.OWNER).unlink(missing_ok=True)
        if self.final.exists():  # never overwrite: ids are unique, this is paranoia
            self.final = self.root / f"{self.id}-{secrets.token_hex(2)}"
        os.replace(self.work, self.final)
        return self.final

    def abandon(self) -> None:
        shutil.rmtree(self.work, ignore_errors=True)
