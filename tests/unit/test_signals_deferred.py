# SPDX-License-Identifier: GPL-2.0
"""A signal that arrives while results are written acts only once they are whole."""
import os
import signal
from pathlib import Path

import pytest

from harness.base import paths, procs


def test_ctrl_c_inside_the_block_is_raised_after_it():
    # as in a terminal (a background job, such as `nohup make test &`, starts with SIGINT ignored)
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    done = []
    try:
        with pytest.raises(KeyboardInterrupt):
            with procs.signals_deferred():
                os.kill(os.getpid(), signal.SIGINT)
                done.append("written")  # the block runs to its end first
        assert done == ["written"]
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, old)


def test_an_ignored_ctrl_c_stays_ignored():
    old = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with procs.signals_deferred():
            os.kill(os.getpid(), signal.SIGINT)
        assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, old)


def test_sigterm_keeps_kstalls_handler_and_a_quiet_block_raises_nothing():
    procs.raise_on_termination()
    try:
        with procs.signals_deferred():
            pass
        with pytest.raises(procs.Interrupted):
            with procs.signals_deferred():
                os.kill(os.getpid(), signal.SIGTERM)
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGHUP, signal.SIG_DFL)


def test_a_child_knows_its_forker_and_no_python_runs_in_kstall_at_a_fork():
    # die_with_parent compares the child's parent with the process that forked
    # it; that pid is recorded in the child (a hook run in kstall before each
    # fork swallowed a SIGTERM that landed in it)
    import subprocess
    r, w = os.pipe()

    def preexec():
        os.write(w, str(procs._forked_by).encode())
        procs.die_with_parent()
    try:
        assert subprocess.run(["true"], preexec_fn=preexec).returncode == 0
        assert int(os.read(r, 32)) == os.getpid() == procs._me
    finally:
        os.close(r)
        os.close(w)


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # the drop itself
def test_a_sigterm_python_dropped_in_a_finalizer_is_raised_at_the_next_check(monkeypatch):
    """Python prints and drops an exception a signal handler raises while a
    __del__ runs; the run must still end where new work starts."""
    old = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGHUP)}
    monkeypatch.setattr(procs, "_terminated", "")
    procs.raise_on_termination()
    went_on = []

    class Finalized:
        def __del__(self):
            os.kill(os.getpid(), signal.SIGTERM)
            went_on.append("finalizer")  # the handler runs before this line, and its raise is dropped

    try:
        Finalized()  # collected at once: its __del__ gets the SIGTERM
        went_on.append("after")
        assert went_on == ["after"]  # the finalizer stopped, the run did not
        with pytest.raises(procs.Interrupted, match="SIGTERM"):
            procs.check_terminated()
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def test_a_child_spawned_without_a_preexec_dies_with_kstall_and_never_outlives_a_kstall_already_gone():
    import subprocess
    import sys
    import time
    # a stand-in kstall starts a sleeper the fast way, and is SIGKILLed
    code = ("import subprocess, sys; sys.path.insert(0, sys.argv[1]); from harness.base import procs; "
            "p = subprocess.Popen(procs.dying_with_parent(['sleep', '60'])); print(p.pid, flush=True); "
            "import time; time.sleep(60)")
    parent = subprocess.Popen([sys.executable, "-c", code, str(paths.REPO)], stdout=subprocess.PIPE, text=True)
    try:
        child = int(parent.stdout.readline())
        deadline = time.monotonic() + 10
        while Path(f"/proc/{child}/comm").read_text().strip() != "sleep" and time.monotonic() < deadline:
            time.sleep(0.01)  # setpriv, then the shell, then sleep: one process
        parent.kill()
        parent.wait(10)
        while time.monotonic() < deadline and Path(f"/proc/{child}").exists() \
                and procs.stat_fields(f"/proc/{child}/stat")[:1] != ["Z"]:
            time.sleep(0.01)
        assert not Path(f"/proc/{child}").exists() or procs.stat_fields(f"/proc/{child}/stat")[:1] == ["Z"]
    finally:
        parent.kill()
        parent.wait(10)
    # kstall gone before the death signal was set: the command never runs
    cmd = procs.dying_with_parent(["echo", "ran"])
    cmd[cmd.index("--") + 4] = "1"  # the pid it must be the child of
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=10)
    assert r.returncode != 0 and r.stdout == ""


def test_kstall_ends_without_the_interpreters_teardown_and_loses_no_output(tmp_path):
    import subprocess
    import sys
    left_open = tmp_path / "left-open"
    code = (f"import sys; sys.path.insert(0, {str(paths.REPO)!r}); from harness.base.procs import exit_now; "
            f"f = open({str(left_open)!r}, 'w'); f.write('its tail'); print('the verdict', end=''); exit_now(3)")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert (p.returncode, p.stdout, left_open.read_text()) == (3, "the verdict", "its tail")
