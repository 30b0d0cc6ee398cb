# SPDX-License-Identifier: GPL-2.0
"""`make test`: the unit tests and the end-to-end tests, in one wall time.

The end-to-end tests spend much of their time waiting (on a guest's boot,
a timeout they provoke, a mirror): one file at a time kept 1.27 of the two
cores busy (a fresh clone's 29m13s, 37 min of CPU). They run as two pytest
processes side by side (20m48s to 23m09s, about 41 min of CPU), each a half
of the files by their measured seconds (tests/e2e/seconds.toml): each half
is "another kstall on the host" to the other, which every e2e test must
hold beside anyway (helpers.py's KSTALL_TEST_SESSION keeps each half's
process checks to its own). The unit tests are two minutes of one core
and boot nothing: they run beside both at nice 10, taking what the guests
leave (the first e2e files' two bisections: 40 s alone, 88 s beside the unit
tests at nice 0, 78 s at nice 10).

Usage: run_suite.py [PYTEST_ARGS...]; exit 0 only when every part passed.
Arguments that name a test file or directory run as one e2e part.
"""
from __future__ import annotations

import signal
import statistics
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

E2E = Path(__file__).resolve().parent / "e2e"
NO_TESTS = 5  # pytest's exit code when the arguments select none of a half
UNIT_NICE = 10  # a tenth of a core's share where a guest's vCPU thread wants it too
STOP_S = 120  # a part told to stop (SIGINT) has this long to reap its guests before it is killed


def halves(files: list[Path], seconds: dict[str, float]) -> list[list[Path]]:
    """The files in two groups of about equal measured time: longest first,
    each to the group with less so far (a file not measured counts as the
    median)."""
    median = statistics.median(seconds.values()) if seconds else 1.0
    weight = {f: seconds.get(f.name, median) for f in files}
    groups: list[list[Path]] = [[], []]
    totals = [0.0, 0.0]
    for f in sorted(files, key=lambda f: (-weight[f], f.name)):
        i = totals.index(min(totals))
        groups[i].append(f)
        totals[i] += weight[f]
    return [sorted(g) for g in groups if g]


def stop(p: subprocess.Popen) -> None:
    """A part still running when another failed hard or make was interrupted:
    told to stop as Ctrl-C would (its kstalls reap their guests), then killed."""
    if p.poll() is not None:
        return
    p.send_signal(signal.SIGINT)
    try:
        p.wait(timeout=STOP_S)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


def main(args: list[str]) -> int:
    py = [sys.executable, "-m", "pytest", "-q"]
    named = [a for a in args if not a.startswith("-") and Path(a.split("::")[0]).exists()]
    if named:
        parts = [[]]  # the caller's own files, as one part
    else:
        seconds = tomllib.loads((E2E / "seconds.toml").read_text())
        parts = [[str(f) for f in g] for g in halves(sorted(E2E.glob("test_*.py")), seconds)]
    where = [] if named else ["tests"]
    # the unit tests' output, and every e2e part's but the first (printed when all are done)
    outs = [tempfile.TemporaryFile("w+") for _ in range(len(parts))]
    # their own cache off: two pytests must not both write .pytest_cache
    quiet = ["-p", "no:cacheprovider"]
    background = {"unit": subprocess.Popen(["nice", "-n", str(UNIT_NICE), *py, *quiet, "-m", "not e2e", *args,
                                            *where], stdout=outs[0], stderr=subprocess.STDOUT, text=True)}
    for i, files in enumerate(parts[1:], start=1):
        background[f"e2e {i + 1}"] = subprocess.Popen([*py, *quiet, "--durations=15", "-m", "e2e", *args, *files],
                                                      stdout=outs[i], stderr=subprocess.STDOUT, text=True)
    rcs: dict[str, int] = {}
    try:
        print(f"run_suite: the e2e tests in {len(parts)} part(s) side by side; part 1 here, the others' "
              "output and the unit tests' after it", flush=True)
        rcs["e2e 1"] = subprocess.run([*py, "--durations=15", "-m", "e2e", *args, *(parts[0] or [])]).returncode
        for name, p in background.items():
            rcs[name] = p.wait()
    finally:  # Ctrl-C or an error here: no part outlives make
        for p in background.values():
            stop(p)
    for (name, _), out in zip(list(background.items())[::-1], outs[::-1]):
        out.seek(0)
        print(f"\n== {'the unit tests' if name == 'unit' else f'the end-to-end tests, {name}'}, "
              "run beside the rest ==", flush=True)
        sys.stdout.write(out.read())
        out.close()
    if all(rc == NO_TESTS for rc in rcs.values()):
        return NO_TESTS
    failed = {k: rc for k, rc in rcs.items() if rc not in (0, NO_TESTS)}
    said = ", ".join(f"{k} (exit {rc})" for k, rc in failed.items())
    print(f"run_suite: failed: {said}" if failed else f"run_suite: every part passed ({', '.join(rcs)})")
    return max(failed.values()) if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
