# SPDX-License-Identifier: GPL-2.0
"""QMP replies are matched to their command by id: the late reply of a
command that timed out is not taken as the next command's answer. The
monitor's side plays back replies in QEMU's own form (it echoes a command's
id in its reply; events carry none)."""
from __future__ import annotations

import json
import socket
import threading
import time
from pathlib import Path

import pytest

from harness.guest.qmp import QMP, QMPError


def monitor(path: Path, ready: threading.Event) -> None:
    """A QMP peer: greets, answers qmp_capabilities, then answers the first
    command only after the client gave up on it, just before the second's."""
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(str(path))
    srv.listen(1)
    ready.set()
    conn, _ = srv.accept()
    f = conn.makefile("rwb")

    def send(doc: dict) -> None:
        f.write(json.dumps(doc).encode() + b"\r\n")
        f.flush()
    send({"QMP": {"version": {"qemu": {"micro": 0, "minor": 2, "major": 7}}, "capabilities": ["oob"]}})
    cmds = [json.loads(f.readline()) for _ in range(1)]
    send({"return": {}, "id": cmds[0]["id"]})
    first = json.loads(f.readline())  # query-status: answered late
    second = json.loads(f.readline())  # query-name: sent after the client gave up on the first
    send({"timestamp": {"seconds": 1, "microseconds": 0}, "event": "RESUME"})
    send({"return": {"running": True, "status": "running"}, "id": first["id"]})
    send({"return": {"name": "kstall"}, "id": second["id"]})
    conn.close()
    srv.close()


def test_a_late_reply_is_not_the_next_commands_answer(tmp_path):
    path = tmp_path / "qmp.sock"
    ready = threading.Event()
    t = threading.Thread(target=monitor, args=(path, ready), daemon=True)
    t.start()
    assert ready.wait(5)
    q = QMP(path, timeout=5)
    q.connect(time.monotonic() + 5)
    with pytest.raises(QMPError, match="timed out"):
        q.cmd("query-status", timeout=0.2)
    assert q.cmd("query-name") == {"name": "kstall"}  # not the first command's {"running": ...}
    assert [e["event"] for e in q.events] == ["RESUME"]
    q.close()
    t.join(5)


def test_a_qemu_held_back_longer_than_the_first_bound_is_asked_again_not_called_wedged(tmp_path, monkeypatch):
    """A real QEMU stopped (SIGSTOP: as a host that gives it no CPU) for 4 s,
    past the first 3-s bound: on a 2-core host unpacking a kernel, that was
    "QEMU did not answer QMP or its gdbstub", an ERROR. It is asked again with
    a longer bound and answers; one stopped for good is not answering."""
    import os
    import signal
    import subprocess
    from harness.debug import vcpus
    from harness.guest.qmp import QMP
    path = tmp_path / "qmp.sock"
    qemu = subprocess.Popen(["qemu-system-x86_64", "-S", "-nodefaults", "-display", "none", "-machine", "none",
                             "-qmp", f"unix:{path},server=on,wait=off"], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        q = QMP(path, timeout=5)
        q.connect(time.monotonic() + 10, alive=lambda: qemu.poll() is None)
        assert vcpus.main_loop_answers(q) == ("", vcpus.MAIN_LOOP_TIMEOUT)
        os.kill(qemu.pid, signal.SIGSTOP)
        threading.Timer(4.0, os.kill, (qemu.pid, signal.SIGCONT)).start()
        t0 = time.monotonic()
        why, bound = vcpus.main_loop_answers(q)
        assert why == "" and bound > vcpus.MAIN_LOOP_TIMEOUT and 3.9 < time.monotonic() - t0 < 12, (why, bound)
        os.kill(qemu.pid, signal.SIGSTOP)
        monkeypatch.setattr(vcpus, "MAIN_LOOP_PATIENCE_S", 4.0)
        why, _ = vcpus.main_loop_answers(q)
        assert why.startswith("query-status: QMP timed out 2 times in 4s"), why
        q.close()
    finally:
        qemu.kill()
        qemu.wait(10)
