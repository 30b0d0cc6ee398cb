# SPDX-License-Identifier: GPL-2.0
"""Recorded real outputs (tests/fixtures/): GDB dumps, consoles, agent logs."""
import json
from pathlib import Path

FIXTURES = Path(__file__).resolve().parent / "fixtures"


def load_samples(name: str) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((FIXTURES / name).glob("sample-*.json"))]
