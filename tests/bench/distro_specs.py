#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0
"""Speed figures for distro kernels as shipped (medians of several runs).

    tests/bench/distro_specs.py [--runs N]

All on debian:6.16.12's kernel, perf-refresh, 4 vCPUs (VULNERABLE), its
symbols cached, wall clock of the whole `kstall verify`:
- the baseline: debian:6.16.12, kernel cached;
- deb: and rpm: the first time (their kernel cache entry removed before each
  run), as overhead over the baseline;                           goal <= 3 s
- image: default mode, first time (its cache entry removed: libguestfs
  inspection, copy, boot, verdict);                              goal <= 60 s
- image: default mode again, as overhead over the baseline;      goal <= 1 s
- --boot-image to VULNERABLE, first time (the agent layer made with
  libguestfs) and later (layer cached).                          goal <= 60 s
The artefacts come from tests/distro_assets.py (the disk image needs root).
"""
import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

import distro_assets  # noqa: E402
from harness.base import paths  # noqa: E402
from images.kernels import image  # noqa: E402

KSTALL = [str(REPO / "harness" / "kstall")]


def verify(spec: str, *extra: str) -> float:
    with tempfile.TemporaryDirectory() as d:
        t0 = time.monotonic()
        p = subprocess.run([*KSTALL, "verify", spec, "perf-refresh", "--cpus", "4", "--json", "--results", d,
                            *extra], capture_output=True, text=True, timeout=900)
        wall = time.monotonic() - t0
    doc = json.loads(p.stdout)
    assert doc["verdict"] == "VULNERABLE", doc.get("line") or p.stderr[-500:]
    return wall


def runs(n: int, spec: str, *extra: str, before=None) -> list[float]:
    out = []
    for _ in range(n):
        if before:
            before()
        out.append(verify(spec, *extra))
    return out


def med(xs: list[float]) -> float:
    return statistics.median(xs)


def show(label: str, xs: list[float], goal: str = "", base: float | None = None) -> None:
    m = med(xs)
    extra = f"  overhead {m - base:+.2f}s, ratio {m / base:.2f}" if base else ""
    print(f"{label:<46} median {m:6.2f}s (min {min(xs):.2f}, max {max(xs):.2f}, n={len(xs)}){extra}"
          f"{'   goal ' + goal if goal else ''}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    n = a.runs
    debs = ",".join(map(str, distro_assets.debian_debs("6.16.12")))
    rpms = ",".join(map(str, distro_assets.fedora_rpms("6.16.12", "xz")))
    disk = distro_assets.disk_image("6.16.12")
    kernels = paths.cache_dir() / "kernels"

    def forget(scheme: str):
        return lambda: [shutil.rmtree(d) for d in (kernels / scheme).glob("*") if d.is_dir()]

    ident = image.identity(image.image_chain(disk)[1])[:20]

    def forget_image(layer: bool = False):  # layer too: a first --boot-image reads and installs at once
        def go():
            for p in (kernels / "image").glob(f"{ident}-*"):
                if p.is_dir():
                    shutil.rmtree(p)
                elif layer:
                    p.unlink()
        return go

    verify("debian:6.16.12")  # kernel and symbols cached
    base = runs(n, "debian:6.16.12")
    show("debian:6.16.12 (cached)", base)
    b = med(base)
    show("deb: first time", runs(n, f"deb:{debs}", before=forget("deb")), "<= +3s", b)
    show("rpm: first time", runs(n, f"rpm:{rpms}", before=forget("rpm")), "<= +3s", b)
    show("image: default mode, first time", runs(n, f"image:{disk}", before=forget_image()), "<= 60s")
    show("image: default mode, cached", runs(n, f"image:{disk}"), "<= +1s", b)
    show("image: --boot-image, first time (layer made)",
         runs(n, f"image:{disk}", "--boot-image", before=forget_image(layer=True)), "<= 60s")
    show("image: --boot-image, layer cached", runs(n, f"image:{disk}", "--boot-image"), "<= 60s")


if __name__ == "__main__":
    main()
