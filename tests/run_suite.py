# SPDX-License-Identifier: GPL-2.0
"""`make test`: the unit tests beside the end-to-end ones, in one wall time.

The end-to-end tests spend much of their time waiting (on a guest's boot,
a timeout they provoke, a mirror), and use about one of two cores; the unit
tests are two minutes of one core and boot nothing. Run side by side they
cost the longer of the two, not the sum. The e2e tests must hold on a busy
host anyway (beside another kstall), so the unit run is no new load for
them; it runs at nice 10 all the same, so that it takes the cores the
guests leave (the first e2e files' two bisections: 40 s with no unit tests
beside them, 88 s beside them at nice 0, 78 s at nice 10; the suite in all
24m25s against 25m09s). Usage: run_suite.py [PYTEST_ARGS...]; exit 0 only
when both passed.
"""
from __future__ import annotations

import subprocess
import sys
import tempfile

NO_TESTS = 5  # pytest's exit code when the arguments select none of a half
UNIT_NICE = 10  # a tenth of a core's share where a guest's vCPU thread wants it too


def main(args: list[str]) -> int:
    py = [sys.executable, "-m", "pytest", "-q"]
    with tempfile.TemporaryFile("w+") as unit_out:
        # its own cache off: two pytests must not both write .pytest_cache
        unit = subprocess.Popen(["nice", "-n", str(UNIT_NICE), *py, "-p", "no:cacheprovider", "-m", "not e2e",
                                 *args, "tests"], stdout=unit_out, stderr=subprocess.STDOUT, text=True)
        try:
            e2e_rc = subprocess.run([*py, "--durations=25", "-m", "e2e", *args, "tests"]).returncode
            unit_rc = unit.wait()
        finally:  # Ctrl-C or an error here: the unit run does not outlive make
            if unit.poll() is None:
                unit.kill()
                unit.wait()
        unit_out.seek(0)
        print("\n== the unit tests, run beside the end-to-end ones ==", flush=True)
        sys.stdout.write(unit_out.read())
    rcs = {"e2e": e2e_rc, "unit": unit_rc}
    if all(rc == NO_TESTS for rc in rcs.values()):
        return NO_TESTS
    failed = {k: rc for k, rc in rcs.items() if rc not in (0, NO_TESTS)}
    said = ", ".join(f"{k} (exit {rc})" for k, rc in failed.items())
    print(f"run_suite: failed: {said}" if failed else "run_suite: the e2e and the unit tests passed")
    return max(failed.values()) if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
