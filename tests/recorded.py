# SPDX-License-Identifier: GPL-2.0
"""Recorded real outputs (tests/fixtures/): GDB dumps, consoles, agent logs."""
import json
from pathlib import Path

FIXTURES = Path(__file__).resolve().parent / "fixtures"


def load_samples(name: str) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((FIXTURES / name).glob("sample-*.json"))]


def kcidb_validator():
    """A validator for KCIDB I/O v4.5 documents (kstall's transcription of the
    schema's constraints, tests/fixtures/kcidb/), with format checks."""
    import jsonschema
    schema = json.loads((FIXTURES / "kcidb" / "schema-v4.5.json").read_text())
    return jsonschema.Draft202012Validator(schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
