# SPDX-License-Identifier: GPL-2.0
"""Recorded real outputs (tests/fixtures/): GDB dumps, consoles, agent logs."""
import json
from pathlib import Path

FIXTURES = Path(__file__).resolve().parent / "fixtures"


def load_samples(name: str) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((FIXTURES / name).glob("sample-*.json"))]


def clang_btf(out_dir: Path) -> bytes:
    """A real BTF blob: clang's, of the kernel declarations in fixtures/btf/
    (the .BTF section of a BPF object; binutils' objcopy does not read those)."""
    import struct
    import subprocess
    obj = out_dir / "layouts.o"
    subprocess.run(["clang", "-g", "-O2", "-target", "bpf", "-c", str(FIXTURES / "btf" / "layouts.c"), "-o", str(obj)],
                   check=True)
    elf = obj.read_bytes()
    shoff, = struct.unpack_from("<Q", elf, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", elf, 0x3A)
    headers = [struct.unpack_from("<IIQQQQ", elf, shoff + i * shentsize) for i in range(shnum)]
    names = headers[shstrndx][4]
    for sh_name, _, _, _, offset, size in headers:
        if elf[names + sh_name:elf.index(b"\0", names + sh_name)] == b".BTF":
            return elf[offset:offset + size]
    raise KeyError(".BTF")


def kcidb_validator():
    """A validator for KCIDB I/O v4.5 documents (kstall's transcription of the
    schema's constraints, tests/fixtures/kcidb/), with format checks."""
    import jsonschema
    schema = json.loads((FIXTURES / "kcidb" / "schema-v4.5.json").read_text())
    return jsonschema.Draft202012Validator(schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
