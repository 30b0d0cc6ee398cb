# SPDX-License-Identifier: GPL-2.0
"""`kstall __complete LINE`: the words that complete LINE's last one, one per
line, for the shell's completion (harness/completion/kstall). Commands and
options come from the same argparse definitions as --help; reproducer names
from the catalog; debian: versions from the package index kstall keeps (no
network: a TAB never waits on a mirror). Files are the shell's own."""
from __future__ import annotations

import argparse
import json
import shlex

from harness.base import paths, reproducers
from images.kernels import debian

SCHEMES = ("debian:", "deb:", "rpm:", "image:", "file:", "build:", "run:")


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _options(parser: argparse.ArgumentParser) -> list[str]:
    return sorted(o for a in parser._actions for o in a.option_strings if o.startswith("--"))


def _debian_specs() -> list[str]:
    """debian:VERSION for every kernel in the index (its flavour when not the default's)."""
    out: set[str] = set()
    for index in paths.cache_dir().glob("apt*/kernels.json"):
        try:
            kernels = json.loads(index.read_text())
        except (OSError, ValueError):
            continue
        try:
            out.update(debian.DebKernel(**k).short_spec for k in kernels)
        except TypeError:  # an index of another kstall's making
            continue
    return sorted(out)


def candidates(line: str, parser: argparse.ArgumentParser) -> list[str]:
    """parser: the command line's (harness/cli.py build_parser)."""
    try:
        words = shlex.split(line)
    except ValueError:  # an open quote: complete nothing rather than guess
        return []
    if not line or line[-1].isspace():
        words.append("")
    cur, before = words[-1], words[1:-1]
    subs = _subcommands(parser)
    if not before:
        return [c for c in [*subs, "--help", "--version"] if c.startswith(cur)]
    sub = subs.get(before[0])
    if sub is not None and _subcommands(sub):  # a command with commands of its own (bisect debian|git)
        if len(before) == 1:
            return [c for c in _subcommands(sub) if c.startswith(cur)]
        sub = _subcommands(sub).get(before[1])
    if sub is None:
        return []
    if cur.startswith("-"):
        return [o for o in _options(sub) if o.startswith(cur)]
    if cur.startswith("debian:"):
        return [s for s in _debian_specs() if s.startswith(cur)]
    return [w for w in [*SCHEMES, *reproducers.names()] if w.startswith(cur)]
