#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0
"""Run kstall and send it a real signal the moment it enters a given function:
for stages too short to hit from outside (classification, writing a run's
results, merging a matrix's reports). Nothing of kstall is replaced.

    signal_at.py MODULE.FUNCTION INT|TERM|KILL KSTALL-ARGS...
"""
from __future__ import annotations

import importlib
import os
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def main() -> int:
    target, name, args = sys.argv[1], sys.argv[2], sys.argv[3:]
    sig = signal.Signals[f"SIG{name}"]
    module_name, function = target.rsplit(".", 1)
    module = importlib.import_module(module_name)
    real = getattr(module, function)

    def at_entry(*a, **kw):
        setattr(module, function, real)  # once
        print(f"signal_at: SIG{name} at {target}", file=sys.stderr, flush=True)
        os.kill(os.getpid(), sig)
        return real(*a, **kw)

    setattr(module, function, at_entry)
    from harness import cli
    return cli.main(args)


if __name__ == "__main__":
    sys.exit(main())
