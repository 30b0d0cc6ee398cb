# SPDX-License-Identifier: GPL-2.0
"""Test setup: import paths and markers.

Unit tests run on recorded real outputs in tests/fixtures/ (GDB dumps,
consoles, agent logs; see tests/recorded.py). End-to-end tests (marker e2e)
boot real Debian kernels under QEMU and can fail; they share the kstall cache
(~/.cache/kstall or $KSTALL_CACHE) so kernels are downloaded once.
"""
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
# KSTALL_TREE: test another kstall tree than this checkout (autopkgtest: the installed /usr/lib/kstall)
TREE = Path(os.environ.get("KSTALL_TREE") or HERE.parent)
for p in (TREE, HERE, HERE / "e2e"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))


def pytest_configure(config):
    config.addinivalue_line("markers", "e2e: boots real kernels under QEMU (slow)")
