# SPDX-License-Identifier: GPL-2.0
"""The kernel's kselftest headers and selftests tree, from Debian's orig tarball.

kstall's reproducers print through the real kselftest.h (repro/selftest/kselftest.toml
pins the upstream version and the headers' hashes). `headers` extracts just
the two headers, once, into the cache; `selftests_tree` extracts the parts of
the source tree an in-tree selftest build needs (tools/, scripts/, the
top-level Makefile) for `make check-selftest`.

    python3 -m images.guest.kselftest headers DIR   copy the checked headers into DIR
"""
from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

from harness.base import paths
from images.kernels.kernel import Progress, SpecError

PIN = paths.data_file("repro", "selftest", "kselftest.toml")
TREE_PARTS = ("tools", "scripts", "Makefile")


def pin() -> dict:
    with open(PIN, "rb") as f:
        return tomllib.load(f)


def _sha256(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def _mismatches(root: Path, hashes: dict[str, str]) -> list[str]:
    return [f for f, want in hashes.items() if not (root / f).is_file() or _sha256(root / f) != want]


def _extract(members: list[str], dest: Path, progress: Progress | None) -> None:
    """members (paths below linux-<upstream>/) of the orig tarball into dest,
    via a temporary directory renamed into place: no half-extracted cache."""
    from images.kernels import debian_source
    p = pin()
    tarball = debian_source.orig_tarball(p["upstream"], progress)
    top = f"linux-{p['upstream']}"
    if progress:
        progress(f"kselftest: extracting {', '.join(members)} from {tarball.name}")
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
    try:
        r = subprocess.run(["tar", "-xJf", str(tarball), "-C", str(tmp), "--strip-components=1",
                            *[f"{top}/{m}" for m in members]], capture_output=True, text=True, timeout=600)
        if r.returncode != 0:
            raise SpecError(f"kselftest: tar on {tarball} failed: {r.stderr.strip()[-300:]}")
        bad = _mismatches(tmp, p["sha256"])
        if bad:
            raise SpecError(f"kselftest: {', '.join(bad)} in {tarball.name} do not match repro/selftest/kselftest.toml")
        shutil.rmtree(dest, ignore_errors=True)
        tmp.rename(dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # gone already unless something failed


def headers(progress: Progress | None = None) -> Path:
    """A directory holding the pinned kselftest.h and kselftest_harness.h."""
    p = pin()
    root = paths.cache_dir() / "kselftest" / f"headers-{p['upstream']}"
    if _mismatches(root, p["sha256"]):
        _extract(list(p["sha256"]), root, progress)
    return root / "tools" / "testing" / "selftests"


def selftests_tree(progress: Progress | None = None) -> Path:
    """The orig tarball's tools/, scripts/ and Makefile: enough of the kernel
    source for `make -C tools/testing/selftests TARGETS=...`."""
    p = pin()
    root = paths.cache_dir() / "kselftest" / f"linux-{p['upstream']}"
    if _mismatches(root, p["sha256"]) or not all((root / part).exists() for part in TREE_PARTS):
        _extract(list(TREE_PARTS), root, progress)
    return root


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] != "headers":
        print(__doc__.strip().splitlines()[-1].strip(), file=sys.stderr)
        return 2
    try:
        src = headers(lambda m: print(f"kstall: {m}", file=sys.stderr))
    except (SpecError, OSError) as e:
        print(f"kstall: {e}", file=sys.stderr)
        return 1
    out = Path(argv[1])
    out.mkdir(parents=True, exist_ok=True)
    for f in ("kselftest.h", "kselftest_harness.h"):
        shutil.copyfile(src / f, out / f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
