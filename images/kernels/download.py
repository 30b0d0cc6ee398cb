# SPDX-License-Identifier: GPL-2.0
"""One file over HTTP, checked against its size and SHA-256, with progress:
the packages and tarballs Debian's apt names (images/kernels/debian.py gives the
addresses). A network or disk failure is a SpecError that says which."""
from __future__ import annotations

import hashlib
import sys
import time
from pathlib import Path

from images.kernels.kernel import Progress, SpecError


def why_failed(e: BaseException) -> str:
    return str(getattr(e, "reason", None) or getattr(e, "strerror", None) or e or type(e).__name__)


def download(url: str, dest: Path, size: int, sha256: str, label: str, progress: Progress | None) -> None:
    """Fetch url into dest, checked against size and sha256. A network or disk
    failure is a SpecError that says which of the two it was."""
    # here, not at the top: every verify imports this module, and HTTP's
    # modules (ssl, email) were 0.03 s of each one's start, most of which
    # download nothing
    import http.client
    import urllib.parse
    import urllib.request
    h = hashlib.sha256()
    done = 0
    last = 0.0
    t0 = time.monotonic()
    tty = sys.stderr.isatty()
    host = urllib.parse.urlsplit(url).netloc
    try:
        r = urllib.request.urlopen(url, timeout=60)
    except (OSError, http.client.HTTPException) as e:
        raise SpecError(f"cannot download {label} from {host}: {why_failed(e)}") from None
    with r:
        try:
            f = open(dest, "wb")
        except OSError as e:
            raise SpecError(f"cannot store {label} in {dest.parent}: {why_failed(e)}") from None
        with f:
            while True:
                try:
                    chunk = r.read(1 << 20)
                except (OSError, http.client.HTTPException) as e:
                    raise SpecError(f"download of {label} from {host} broke off after {done} of {size} bytes: "
                                    f"{why_failed(e)}") from None
                if not chunk:
                    break
                try:
                    f.write(chunk)
                    f.flush()
                except OSError as e:
                    raise SpecError(f"cannot store {label} in {dest.parent}: {why_failed(e)}") from None
                h.update(chunk)
                done += len(chunk)
                now = time.monotonic()
                if progress and (now - last > (0.5 if tty else 10) or done == size):
                    last = now
                    rate = done / max(now - t0, 1e-3) / 1e6
                    pct = 100 * done // max(size, 1)
                    bar = "#" * (pct // 5) + "-" * (20 - pct // 5)
                    progress(f"\r[{bar}] {pct:3d}% {done / 1e6:.0f}/{size / 1e6:.0f} MB {rate:.0f} MB/s {label}"
                             if tty else f"{label}: {pct}% of {size / 1e6:.0f} MB ({rate:.0f} MB/s)")
    if progress and tty:
        progress("\n")
    if done < size:  # the server closed the connection early
        raise SpecError(f"download of {label} from {host} broke off after {done} of {size} bytes")
    if done != size or h.hexdigest() != sha256:
        raise SpecError(f"download of {label} from {host} is corrupt ({done} of {size} bytes, sha256 mismatch)")
