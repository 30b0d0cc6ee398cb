# SPDX-License-Identifier: GPL-2.0
"""The guest's streams as they arrive on QEMU's unix sockets: text lines (the
console, the agent channel) and tagged blobs (the symbols port). The guest is
not trusted: lines and blobs are bounded, and what is not kstall's is dropped."""
from __future__ import annotations

import re
import socket
import time

from harness.base.untrusted import num


class LineReader:
    """Lines from a guest's stream. The guest is not trusted: a line longer
    than max_line is cut there (the rest comes as further lines), so an
    endless line costs neither memory nor time."""

    def __init__(self, sock: socket.socket | None, max_line: int = 16384) -> None:
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

    def __init__(self, sock: socket.socket | None) -> None:
        self.sock = sock
        self.buf = bytearray()
        self.head: tuple[str, int] | None = None
        self.skip = 0  # bytes of a refused blob still to come
        self.expected: dict[str, int] = {}  # tag -> the most bytes kstall will take
        self.refused: list[str] = []  # 'TAG n' of the blobs skipped
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
            self.refused.append(f"{tag} {size}")
            self.skip = size
        else:
            self.head = (tag, size)
        return True
