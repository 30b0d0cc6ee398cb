# SPDX-License-Identifier: GPL-2.0
"""The guest's streams: text lines (the console, as QEMU writes it to its log
file; the agent channel, on a unix socket) and tagged blobs (the symbols
port). The guest is not trusted: lines and blobs are bounded, and what is
not kstall's is dropped."""
from __future__ import annotations

import os
import re
import socket
import threading
import time
from pathlib import Path

from harness.base.untrusted import num


class FileTail:
    """The guest's console as QEMU writes it to its log file, read from where
    it stood when the guest started. A file, not a socket: QEMU's UART sends
    a byte a write, a unix socket holds only a few hundred of those, and
    whenever kstall was slower than that (a loaded host, the seconds GDB
    samples the vCPUs) the guest stood in the UART's transmit wait with
    interrupts off (read once as a hang in console_unlock), and QEMU wrote
    the refused byte to its log twice. A file never refuses a byte. Readers
    see a socket: fileno() for select (a pipe a thread marks when the file
    has grown), recv() that raises BlockingIOError when nothing is new."""

    POLL_S = 0.01

    def __init__(self, path: Path, start: int = 0) -> None:
        self.f = open(path, "rb")  # noqa: SIM115 - kept open for the guest's life; close() closes it
        self.f.seek(start)
        self._seen = start
        self._stop = threading.Event()
        self._wake_r, self._wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._thread = threading.Thread(target=self._run, name="kstall-console-tail", daemon=True)
        self._thread.start()

    def fileno(self) -> int:
        return self._wake_r

    def _run(self) -> None:
        while not self._stop.wait(self.POLL_S):  # bounded: close() is seen within one poll
            try:
                size = os.fstat(self.f.fileno()).st_size
            except (OSError, ValueError):
                return
            if size > self._seen:
                self._seen = size
                _mark(self._wake_w)

    def recv(self, n: int) -> bytes:
        try:
            while os.read(self._wake_r, 4096):
                pass
        except (BlockingIOError, OSError):
            pass
        data = self.f.read(n)
        if not data:
            raise BlockingIOError
        if len(data) == n:  # there may be more: select wakes the reader again
            _mark(self._wake_w)
        return data

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=1.0)
        self.f.close()
        for fd in (self._wake_r, self._wake_w):
            try:
                os.close(fd)
            except OSError:
                pass


def _mark(fd: int) -> None:
    try:
        os.write(fd, b"x")
    except (BlockingIOError, OSError):
        pass  # the pipe is full: the reader is woken already


class LineReader:
    """Lines from a guest's stream. The guest is not trusted: a line longer
    than max_line is cut there (the rest comes as further lines), so an
    endless line costs neither memory nor time."""

    def __init__(self, sock: socket.socket | FileTail | None, max_line: int = 16384) -> None:
        self.sock = sock
        self.buf = b""
        self.eof = sock is None
        self.max_line = max_line

    def read(self) -> list[str]:
        if self.sock is None or self.eof:
            return []
        try:
            data = self.sock.recv(1 << 16)
        except BlockingIOError:
            return []
        except OSError:
            data = b""
        if not data:
            self.eof = True
            return []
        return self.feed(data)

    def feed(self, data: bytes) -> list[str]:
        *lines, self.buf = (self.buf + data).split(b"\n")
        out = []
        for raw in lines:
            out += [raw[i:i + self.max_line] for i in range(0, max(len(raw), 1), self.max_line)]
        while len(self.buf) >= self.max_line:
            out.append(self.buf[:self.max_line])
            self.buf = self.buf[self.max_line:]
        return [l.decode(errors="replace").rstrip("\r") for l in out]


class BlobReader:
    """The syms port: blobs as 'TAG <n>\\n' then n bytes (KALLSYMS, CORE).
    The guest is not trusted: a blob is kept only when kstall asked for one
    of its tag (expect()), and only up to the size asked for; another is
    skipped whole, and a header that lies beyond MAX_BYTES drops the stream
    until the next header line."""
    MAX_BYTES = 256 << 20
    MAX_REFUSED = 32  # refused headers named; the rest only counted (a guest may send millions)

    def __init__(self, sock: socket.socket | None) -> None:
        self.sock = sock
        self.buf = bytearray()
        self.head: tuple[str, int] | None = None
        self.skip = 0  # bytes of a refused blob still to come
        self.expected: dict[str, int] = {}  # tag -> the most bytes kstall will take
        self.refused: list[str] = []  # 'TAG n' of the first blobs skipped
        self.refused_count = 0  # all of them
        self.blobs: dict[str, bytes] = {}
        self.arrived: dict[str, float] = {}
        self.eof = sock is None

    def expect(self, tag: str, max_bytes: int) -> None:
        """Take the next blob of this tag, if it is no larger than max_bytes."""
        self.expected[tag] = max_bytes

    def complete(self, last: str) -> bool:
        """Whether the blobs asked for, sent in order, are in up to the last."""
        return last in self.blobs

    def read(self) -> None:
        if self.sock is None or self.eof:
            return
        try:
            chunk = self.sock.recv(1 << 20)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if not chunk:
            self.eof = True
            return
        self.feed(chunk)

    def feed(self, chunk: bytes) -> None:
        self.buf += chunk
        while True:
            if self.skip:
                dropped = min(self.skip, len(self.buf))
                del self.buf[:dropped]
                self.skip -= dropped
                if self.skip:
                    return
            if self.head is None:
                if not self._header():
                    return
                continue  # a blob to take, or one to skip
            tag, n = self.head
            if len(self.buf) < n:
                return
            self.blobs[tag], self.arrived[tag] = bytes(self.buf[:n]), time.monotonic()
            del self.buf[:n]
            self.head = None
            self.expected.pop(tag, None)  # one blob per request

    def _header(self) -> bool:
        """Read the next header: whether a blob to keep or skip follows."""
        nl = self.buf.find(b"\n")
        if nl < 0:
            if len(self.buf) > 256:  # no header in sight: not ours
                self.buf.clear()
            return False
        m = re.match(rb"([A-Z]+) (\d+)$", bytes(self.buf[:nl]))
        del self.buf[:nl + 1]
        size = num(m.group(2).decode()) if m else None
        if size is None or size > self.MAX_BYTES:
            self.buf.clear()
            return False
        tag = m.group(1).decode()
        if size > self.expected.get(tag, -1):
            self.refused_count += 1
            if len(self.refused) < self.MAX_REFUSED:
                self.refused.append(f"{tag} {size}")
            self.skip = size
        else:
            self.head = (tag, size)
        return True
