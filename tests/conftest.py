"""Test setup: import paths, markers, and shared helpers.

Unit tests run on recorded real outputs in tests/fixtures/ (GDB dumps,
consoles, agent logs). End-to-end tests (marker e2e) boot real Debian kernels
under QEMU and can fail; they share the kstall cache (~/.cache/kstall or
$KSTALL_CACHE) so kernels are downloaded once.
"""
import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures"
for p in (REPO, REPO / "gdbscripts"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))


def pytest_configure(config):
    config.addinivalue_line("markers", "e2e: boots real kernels under QEMU (slow)")


def load_samples(name: str) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((FIXTURES / name).glob("sample-*.json"))]


@pytest.fixture
def fixtures() -> Path:
    return FIXTURES
