# SPDX-License-Identifier: GPL-2.0
"""What kstall reads from something it does not trust: numbers in guest
text (console, agent channel, /proc lines), names and paths in packages
and images, and the fields of a run record (run.json, held.json) that came
from elsewhere (a colleague's results, a CI artifact). What is not a sane
number, name or path is none, and nothing here raises."""
from __future__ import annotations

import os
import re
import stat
from pathlib import Path

_DEC = re.compile(r"-?\d{1,20}")
_HEX = re.compile(r"(?:0[xX])?[0-9a-fA-F]{1,16}")


def num(text: str | None, default: int | None = None) -> int | None:
    """A decimal integer of at most 20 digits, else default."""
    return int(text) if text is not None and _DEC.fullmatch(text) else default


def hexnum(text: str | None, default: int | None = None) -> int | None:
    """A hex integer of at most 16 digits (0x optional), else default."""
    return int(text, 16) if text is not None and _HEX.fullmatch(text) else default


# what a kernel release (uname -r) can look like: 6.16.12+deb13-amd64, 6.8.0-45-generic, 6.16.12-200.fc42.x86_64
_RELEASE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+~-]{0,127}")


def release(text: str | None) -> str | None:
    """A kernel release from a package, an image or a spec, else None: it is
    joined into cache paths, so no '/', no '..', nothing that is not a name."""
    return text if text is not None and _RELEASE.fullmatch(text) and ".." not in text else None


def relative_path(text: str) -> str | None:
    """A path from a package or an image (an archive member, a modules.dep
    line), normalised, when it stays below where it is put: relative, no '..'
    component, no NUL; else None."""
    if not text or "\0" in text or text.startswith("/"):
        return None
    parts = [p for p in text.split("/") if p not in ("", ".")]
    if not parts or ".." in parts:
        return None
    return "/".join(parts)


_SHA256 = re.compile(r"[0-9a-f]{64}")
# a path kstall itself would write: absolute, plain characters (no shell or gdb syntax, no spaces)
_PLAIN_PATH = re.compile(r"/[A-Za-z0-9/._+-]{0,4000}")


def sha256(text: object) -> str | None:
    """A SHA-256 in hex, else None (a record's kernel hash names cache files)."""
    return text if isinstance(text, str) and _SHA256.fullmatch(text) else None


def path_under(text: object, root: Path) -> Path | None:
    """A record's path when it lies inside root once resolved (kstall writes
    beside some of them), else None."""
    if not isinstance(text, str) or not _PLAIN_PATH.fullmatch(text):
        return None
    try:
        p, r = Path(text).resolve(), root.resolve()
    except (OSError, RuntimeError):
        return None
    return p if p == r or r in p.parents else None


def plain_file(text: object) -> Path | None:
    """A record's file a tool is given (a vmlinux for gdb's `symbol-file` or
    crash's command line): a plain absolute path to an existing regular
    file, nothing gdb or a command line would read as more, else None."""
    if not isinstance(text, str) or not _PLAIN_PATH.fullmatch(text):
        return None
    try:
        return Path(text) if stat.S_ISREG(os.stat(text).st_mode) else None
    except OSError:
        return None


def socket_path(text: object) -> Path | None:
    """A record's unix socket: a plain absolute path to an existing socket
    (it goes into gdb's `target remote`, where a leading '|' runs a command)."""
    if not isinstance(text, str) or not _PLAIN_PATH.fullmatch(text):
        return None
    try:
        return Path(text) if stat.S_ISSOCK(os.stat(text).st_mode) else None
    except OSError:
        return None
