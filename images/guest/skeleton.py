# SPDX-License-Identifier: GPL-2.0
"""A libbpf skeleton for a big-endian guest (s390x), made on a little-endian
host whose bpftool cannot open a big-endian object (bookworm's libbpf 1.1
refuses one; 1.5 learned to). The skeleton's code comes from the same
source's little-endian object, which has the same maps, programs and
globals at the same offsets; the object it carries, and loads, is the
big-endian one:

    python3 -m images.guest.skeleton SKEL_FROM_LITTLE_ENDIAN BIG_ENDIAN_OBJECT > SKEL
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

# the function that hands libbpf the embedded object: its size, then its bytes as one string literal
_ELF_BYTES = re.compile(r'(__elf_bytes\(size_t \*sz\)\n\{\n\t\*sz = )\d+(;\n\treturn \(const void \*\)")(.*?)(";\n\})',
                        re.S)


def literal(data: bytes, width: int = 32) -> str:
    """data as the lines of a C string literal, each ended by a backslash-newline."""
    lines = ["".join(f"\\x{b:02x}" for b in data[i:i + width]) for i in range(0, len(data), width)]
    return "\\\n" + "\\\n".join(lines)


def carrying(skeleton: str, obj: bytes) -> str:
    """skeleton with obj as the object it embeds."""
    out, n = _ELF_BYTES.subn(lambda m: f"{m.group(1)}{len(obj)}{m.group(2)}{literal(obj)}{m.group(4)}", skeleton)
    if n != 1:
        raise ValueError("the skeleton has no __elf_bytes() of the shape bpftool writes")
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print(__doc__.strip().splitlines()[-1].strip(), file=sys.stderr)
        return 2
    sys.stdout.write(carrying(Path(argv[1]).read_text(), Path(argv[2]).read_bytes()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
