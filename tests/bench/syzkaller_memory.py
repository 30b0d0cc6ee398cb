#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0
"""What syzbot's machine costs: a syzkaller guest of 1 GiB beside one of
2 GiB (repro/syzkaller/environment.toml `memory_mb`), on one kernel, with a
small program in syzkaller's format (medians; the kernel cached first).

    tests/bench/syzkaller_memory.py [--runs N] [--kernel SPEC]

- cold boot to the agent's hello (--no-snapshot);
- the snapshot at the agent's gate: its size on disk and the time to save it
  (when this run saved it; a snapshot already there is restored, not saved);
- restore (QEMU start to a running guest at its gate);
- the whole `kstall verify` of a 3-second run, restored.
"""
import argparse
import json
import subprocess
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
KSTALL = [str(REPO / "harness" / "kstall")]
PROGRAM = REPO / "tests" / "fixtures" / "syzkaller-programs" / "busy_forks.c"

import sys  # noqa: E402
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests" / "bench"))
from verify_speed import med  # noqa: E402


def verify(kernel: str, memory: int, res: str, extra: list[str]) -> tuple[float, dict]:
    t0 = time.monotonic()
    p = subprocess.run([*KSTALL, "verify", kernel, str(PROGRAM), "--duration", "3", "--memory", str(memory),
                        "--json", "--results", res, *extra], capture_output=True, text=True, timeout=900)
    return time.monotonic() - t0, json.loads(p.stdout)


def snapshot_files(key: str | None) -> list[Path]:
    from harness.base import paths
    return list((paths.cache_dir() / "snapshots").glob(f"*{key}*")) if key else []


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--kernel", default="debian:6.1.170")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as res:
        for memory in (1024, 2048):
            cold = [verify(a.kernel, memory, res, ["--no-snapshot"])[1] for _ in range(a.runs)]
            first = verify(a.kernel, memory, res, [])[1]
            warm = [verify(a.kernel, memory, res, []) for _ in range(a.runs)]
            snap = first["vm"]["snapshot"] or {}
            restored = [d for _, d in warm if (d["vm"]["snapshot"] or {}).get("restored")]
            saved = f"saved in {snap['saved_s']:.2f}s" if not snap.get("restored") and snap.get("saved_s") \
                else "already there"
            # a restored run's record has no size: the run that saved it says, or the file itself
            size = snap.get("bytes") or sum(f.stat().st_blocks * 512 for f in snapshot_files(snap.get("key")))
            print(f"{a.kernel} syzkaller guest, {memory} MB:")
            print(f"  cold boot to the agent's hello:   {med([d['timings']['boot_s'] for d in cold])}")
            print(f"  snapshot on disk:                 {(size or 0) / 1e6:.0f} MB ({saved})")
            if restored:
                print(f"  restore to the gate:              {med([d['timings']['boot_s'] for d in restored])}")
            print(f"  restored 3-s run, whole command:  {med([w for w, d in warm if d in restored] or [0.0])}"
                  f" ({len(restored)}/{len(warm)} restored)")


if __name__ == "__main__":
    main()
