# SPDX-License-Identifier: GPL-2.0
"""What packages, images and processes hand kstall is bounded and checked:
decompression bombs, stale cores, a process left stopped."""
import gzip
import os
import signal
import subprocess
import sys
import time

import pytest

from harness.base import procs
from harness.debug import process
from images.guest import pvh


def test_a_payload_that_decompresses_past_the_limit_is_no_kernel():
    payload = gzip.compress(bytes(1 << 20))  # 1 MiB of zeros in 1 KiB
    assert pvh.decompress(payload, limit=2 << 20) == bytes(1 << 20)
    assert pvh.decompress(payload, limit=64 << 10) is None


def test_a_stale_core_is_not_taken_for_a_new_one(tmp_path):
    core = tmp_path / "keep.core"
    core.write_bytes(b"an old core")
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    with pytest.raises(process.DumpError):
        process.capture_live(int(gone.stdout), core, timeout=20)
    assert not core.exists()


def _state_after_a_dump(pid: int, core, timeout: float) -> str:
    """The process's state once capture_live is done with it (done or given up)."""
    try:
        process.capture_live(pid, core, timeout=timeout)
    except process.DumpError:
        pass
    time.sleep(0.1)
    return procs.stat_fields(f"/proc/{pid}/stat")[0]


@pytest.mark.parametrize("timeout", [0.05, 0.2, 0.5])
def test_a_process_is_left_running_as_it_was_found(tmp_path, timeout):
    """gdb killed by its time limit, mid-attach or mid-dump, leaves no stopped
    process behind; and gdb's detach does not resume one that was stopped."""
    sleeper = subprocess.Popen(["sleep", "60"], preexec_fn=procs.die_with_parent)
    try:
        time.sleep(0.05)
        assert _state_after_a_dump(sleeper.pid, tmp_path / "core", timeout) != "T"
        os.kill(sleeper.pid, signal.SIGSTOP)
        deadline = time.monotonic() + 5
        while procs.stat_fields(f"/proc/{sleeper.pid}/stat")[0] != "T" and time.monotonic() < deadline:
            time.sleep(0.01)
        assert _state_after_a_dump(sleeper.pid, tmp_path / "core2", timeout) == "T"
    finally:
        sleeper.kill()
        sleeper.wait()
