# SPDX-License-Identifier: GPL-2.0
"""GDB under pexpect: a forked child that fails before its exec ends there,
and never runs on as a second kstall."""
import subprocess
import sys

from harness.base.paths import REPO


def test_a_gdb_child_whose_terminal_setup_fails_before_its_exec_ends_there():
    # ptyprocess lets an error of the new pty's setup (EIO: kstall was SIGKILLed
    # between the fork and the exec, and the pty hung up) out of the forked
    # child, a copy of kstall that then ran on and wrote a bisection's record
    code = f"""
import errno, os, sys
sys.path.insert(0, {str(REPO)!r})
import ptyprocess.ptyprocess as pp
from harness.debug import gdb
me = os.getpid()
setwinsize = pp._setwinsize
def hung_up(fd, rows, cols):
    if os.getpid() == me:  # the parent's own setup goes as it does
        return setwinsize(fd, rows, cols)
    raise OSError(errno.EIO, "Input/output error")
pp._setwinsize = hung_up
try:
    child = gdb.spawn_gdb(["-batch"], None, 10)
except BaseException as e:
    print(f"raised in {{'the parent' if os.getpid() == me else 'the forked child'}}: {{e!r}}", flush=True)
    os._exit(0)
child.expect(gdb.pexpect.EOF)
child.close()
print(f"parent went on; the child exited {{child.exitstatus}}, saying {{child.before.strip()!r}}", flush=True)
"""
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.stdout.splitlines() == ["parent went on; the child exited 1, saying ''"], p.stdout + p.stderr


def test_a_gdb_slow_to_exit_after_its_kill_is_reaped_not_raised_into_the_verdict():
    # pexpect's close() waits 0.1 s after SIGKILL, then raises "Could not
    # terminate the child"; on a host kept 63% busy a GDB tearing down a large
    # memory took longer, and a matrix cell ended as an internal error. Here
    # the child is a real process holding 1.5 GiB of touched memory, which
    # takes its time to exit, with pexpect's own wait taken away.
    import os
    import signal

    from harness.debug import gdb
    child = gdb.pexpect.spawn(sys.executable, ["-c", "b = bytearray(b'x') * (3 << 29); print('ready'); "
                                                     "import time; time.sleep(60)"],
                              encoding="utf-8", timeout=60)
    child.expect_exact("ready")
    child.ptyproc.delayafterterminate = 0
    gdb.end_gdb(child)
    assert not child.isalive() and child.signalstatus == signal.SIGKILL
    try:
        os.waitpid(child.pid, os.WNOHANG)
        raise AssertionError(f"{child.pid} was not reaped")
    except ChildProcessError:
        pass
