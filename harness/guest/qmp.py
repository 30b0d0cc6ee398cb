# SPDX-License-Identifier: GPL-2.0
"""A minimal QMP client over a unix socket: every call has a deadline."""
from __future__ import annotations

import array
import json
import socket
import threading
import time
from pathlib import Path
from typing import Any, Callable


class QMPError(RuntimeError):
    pass


class QMPTimeout(QMPError):
    """QEMU's main loop did not answer in time (it is held or busy), as against a closed connection."""


class QMP:
    def __init__(self, path: Path, timeout: float = 10.0) -> None:
        self.path = path
        self.timeout = timeout
        self.sock: socket.socket | None = None
        self.buf = b""
        self.events: list[dict[str, Any]] = []
        # one command at a time: the NMI injector's thread shares the monitor
        self.lock = threading.Lock()
        # every command carries an id and takes only the reply with its id: the
        # late reply of a command that timed out is no answer to the next one
        self._ids = 0

    def connect(self, deadline: float, alive: Callable[[], bool] = lambda: True) -> None:
        """Connect (QEMU may still be creating the socket: alive() says
        whether it is still there to create it) and negotiate."""
        while True:
            try:
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                s.connect(str(self.path))
                break
            except (FileNotFoundError, ConnectionRefusedError):
                s.close()
                if not alive():
                    raise QMPError("QEMU exited or stopped before its QMP socket came up")
                if time.monotonic() > deadline:
                    raise QMPError(f"QMP socket {self.path} did not come up")
                time.sleep(0.005)  # QEMU makes it within 0.1 s: a finer poll is found sooner
        self.sock = s
        self._read_msg(deadline)  # greeting
        self.cmd("qmp_capabilities")

    def _read_msg(self, deadline: float) -> dict[str, Any]:
        assert self.sock is not None
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise QMPTimeout("QMP timed out")
            self.sock.settimeout(left)
            try:
                chunk = self.sock.recv(65536)
            except socket.timeout:
                raise QMPTimeout("QMP timed out") from None
            if not chunk:
                raise QMPError("QMP connection closed")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return json.loads(line)

    def cmd(self, name: str, timeout: float | None = None, **args: Any) -> Any:
        with self.lock:
            return self._cmd(name, timeout, **args)

    def send_fd(self, name: str, fd: int, timeout: float | None = None) -> None:
        """Hand QEMU a file descriptor under a name (getfd, SCM_RIGHTS), for
        an `fd:NAME` migration: QEMU writes to a file it could not open."""
        with self.lock:
            self._cmd("getfd", timeout, fds=[fd], fdname=name)

    def _cmd(self, name: str, timeout: float | None = None, fds: list[int] | None = None, **args: Any) -> Any:
        if self.sock is None:
            raise QMPError("QMP not connected")
        self._ids += 1
        ident = f"kstall-{self._ids}"
        msg: dict[str, Any] = {"execute": name, "id": ident}
        if args:
            msg["arguments"] = args
        data = json.dumps(msg).encode() + b"\n"
        if fds:
            self.sock.settimeout(timeout or self.timeout)
            self.sock.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])
        else:
            self.sock.sendall(data)
        deadline = time.monotonic() + (timeout or self.timeout)
        while True:
            reply = self._read_msg(deadline)
            if "event" in reply:
                self.events.append(reply)
                continue
            if reply.get("id") != ident:  # an earlier command's, which timed out waiting for it
                continue
            if "error" in reply:
                raise QMPError(f"{name}: {reply['error'].get('desc', reply['error'])}")
            return reply.get("return")

    def hmp(self, command: str, cpu: int | None = None, timeout: float | None = None) -> str:
        args: dict[str, Any] = {"command-line": command}
        if cpu is not None:
            args["cpu-index"] = cpu
        return self.cmd("human-monitor-command", timeout=timeout, **args)

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None
