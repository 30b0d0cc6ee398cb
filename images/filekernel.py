"""file:PATH kernels: a bzImage the user built or copied."""
from __future__ import annotations

from pathlib import Path

from images.kernel import Kernel, SpecError, sha256_file


def bzimage_release(data: bytes) -> str | None:
    """The version string a bzImage's setup header points at (boot protocol
    2.00+: 'HdrS' at 0x202, kernel_version at 0x20e), up to the first space."""
    if len(data) < 0x210 or data[0x202:0x206] != b"HdrS":
        return None
    ptr = int.from_bytes(data[0x20E:0x210], "little")
    if not ptr:
        return None
    start = ptr + 0x200
    end = data.find(b"\0", start, start + 256)
    if end < 0:
        return None
    return data[start:end].decode(errors="replace").split(" ")[0] or None


def resolve(spec: str, path_text: str) -> Kernel:
    path = Path(path_text).expanduser().resolve()
    if not path.is_file():
        raise SpecError(f"{spec}: no such file {path}")
    with open(path, "rb") as f:
        head = f.read(65536)
    config = None
    for candidate in (path.parent / ".config", path.parent.parent.parent.parent / ".config"):
        if candidate.is_file():
            config = candidate
            break
    release = bzimage_release(head)
    vmlinux = next((p for p in (path.parent / "vmlinux", path.parent.parent.parent.parent / "vmlinux")
                    if p.is_file()), None)
    return Kernel(spec=spec, canonical=f"file:{path}", vmlinuz=path, sha256=sha256_file(path),
                  release=release, upstream=release.split("-")[0].split("+")[0] if release else None,
                  config=config, vmlinux=vmlinux, origin={"path": str(path)})
