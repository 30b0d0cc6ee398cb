# SPDX-License-Identifier: GPL-2.0
"""`make test`: the end-to-end tests in two streams beside each other, the
unit tests ahead of the second, in one wall time.

The end-to-end tests spend much of their time waiting (on a guest's boot,
a timeout they provoke, a mirror), and one stream of them used about one
core of two; the unit tests are two minutes of one core and boot nothing.
Side by side they cost the longest stream, not the sum. The e2e tests must
hold on a busy host anyway (beside another kstall), so the second stream is
no new load for them. tests/e2e/streams.toml names the files of the second
stream. Usage: run_suite.py [PYTEST_ARGS...]; exit 0 only when every stream
passed. The first stream prints as it goes; the second when it ends.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

NO_TESTS = 5  # pytest's exit code when the arguments select none of a half
E2E = Path(__file__).resolve().parent / "e2e"


def streams() -> tuple[list[str], list[str]]:
    """The e2e files of the first stream and of the second (streams.toml)."""
    beside = set(tomllib.loads((E2E / "streams.toml").read_text())["beside"])
    files = sorted(p.name for p in E2E.glob("test_*.py"))
    unknown = beside - set(files)
    if unknown:
        raise SystemExit(f"run_suite: streams.toml names no such file: {', '.join(sorted(unknown))}")
    return ([str(E2E / f) for f in files if f not in beside], [str(E2E / f) for f in files if f in beside])


def main(args: list[str]) -> int:
    py = [sys.executable, "-m", "pytest", "-q"]
    first, second = streams()
    tests = str(E2E.parent)
    with tempfile.TemporaryFile("w+") as side_out:
        # the second stream: the unit tests, then its e2e files, one after the other, with
        # pytest's cache off (two pytests must not both write .pytest_cache)
        side_cmd = (f"{subprocess.list2cmdline([*py, '-p', 'no:cacheprovider', '-m', 'not e2e', *args, tests])}; "
                    "echo \"unit=$?\"; "
                    f"{subprocess.list2cmdline([*py, '-p', 'no:cacheprovider', '--durations=10', '-m', 'e2e', *args, *second])}; "
                    "echo \"e2e-beside=$?\"")
        side = subprocess.Popen(["/bin/sh", "-c", side_cmd], stdout=side_out, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True)
        try:
            e2e_rc = subprocess.run([*py, "--durations=25", "-m", "e2e", *args, *first]).returncode
            side.wait()
        finally:  # Ctrl-C or an error here: the second stream does not outlive make
            if side.poll() is None:
                os.killpg(side.pid, signal.SIGINT)
                try:
                    side.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    os.killpg(side.pid, signal.SIGKILL)
                    side.wait()
        side_out.seek(0)
        text = side_out.read()
        print("\n== the second stream: the unit tests, then the e2e files of streams.toml ==", flush=True)
        sys.stdout.write(text)
    rcs = {"e2e": e2e_rc, **_said_codes(text)}
    if all(rc == NO_TESTS for rc in rcs.values()):
        return NO_TESTS
    failed = {k: rc for k, rc in rcs.items() if rc not in (0, NO_TESTS)}
    said = ", ".join(f"{k} (exit {rc})" for k, rc in failed.items())
    print(f"run_suite: failed: {said}" if failed else "run_suite: both e2e streams and the unit tests passed")
    return max(failed.values()) if failed else 0


def _said_codes(text: str) -> dict[str, int]:
    """The second stream's exit codes, as its shell said them (unit=N, e2e-beside=N); one
    it never said (killed before it) is a failure."""
    codes = {"unit": 1, "e2e-beside": 1}
    for line in text.splitlines():
        k, sep, v = line.partition("=")
        if sep and k in codes and v.strip().isdigit():
            codes[k] = int(v)
    return codes


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except KeyboardInterrupt:  # both streams are ended (main's finally): say so, not where Python was
        print("run_suite: interrupted", file=sys.stderr)
        sys.exit(130)
