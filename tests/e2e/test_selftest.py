# SPDX-License-Identifier: GPL-2.0
"""`make check-selftest` inside `make test`: perf-refresh built in Debian's
6.17.8 selftests tree with lib.mk runs under the kselftest runner in real
guests (ok and NOT_REPRODUCED on 6.17.8, VULNERABLE on 6.16.12)."""
import subprocess
import sys

import pytest

from helpers import REPO, kstall_processes

pytestmark = pytest.mark.e2e


def test_check_selftest_passes():
    p = subprocess.run([sys.executable, str(REPO / "tests" / "check_selftest.py")], capture_output=True, text=True,
                       timeout=1200)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert "the runner said ok 1 selftests: kstall: perf-refresh" in p.stdout
    assert "6.16.12: VULNERABLE" in p.stdout and "6.17.8: NOT_REPRODUCED" in p.stdout
    assert kstall_processes() == []
