# SPDX-License-Identifier: GPL-2.0
"""The guest's streams as they arrive on QEMU's unix sockets: text lines (the
console, the agent channel) and tagged blobs (the symbols port). The guest is
not trusted: lines and blobs are bounded, and what is not kstall's is dropped."""
from __future__ import annotations

import collections
import os
import re
import select
import socket
import threading
import time

from harness.base.untrusted import num


class Pump:
    """A guest stream read by a thread of its own as fast as QEMU sends it.
    QEMU's UART waits for a full socket: while kstall was busy (a console
    flood on a loaded host, or the seconds GDB samples the vCPUs) a guest
    printing an OOM killer's task list stood in the UART's wait with
    interrupts off, and was read as a hang of its own. Readers see a socket:
    fileno() for select, recv() that raises BlockingIOError when nothing is
    there. Up to `limit` bytes wait unread; beyond that the guest waits."""

    def __init__(self, sock: socket.socket, limit: int = 64 << 20) -> None:
        self.sock, self.limit = sock, limit
        self._chunks: collections.deque[bytes] = collections.deque()
        self._size = 0
        self._eof = False
        self._stop = False
        self._lock = threading.Lock()
        self._wake_r, self._wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._thread = threading.Thread(target=self._run, name="kstall-stream-pump", daemon=True)
        self._thread.start()

    def fileno(self) -> int:
        return self._wake_r

    def _run(self) -> None:
        while not self._stop:
            if self._size >= self.limit:
                time.sleep(0.01)
                continue
            try:
                ready, _, _ = select.select([self.sock], [], [], 0.2)  # bounded: close() is seen within it
                if not ready:
                    continue
                data = self.sock.recv(1 << 16)
            except BlockingIOError:
                continue
            except (OSError, ValueError):
                data = b""
            with self._lock:
                if data:
                    self._chunks.append(data)
                    self._size += len(data)
                else:
                    self._eof = True
            try:
                os.write(self._wake_w, b"x")
            except (BlockingIOError, OSError):
                pass  # the pipe is full: a reader is woken already
            if not data:
                return

    def recv(self, n: int) -> bytes:
        try:
            while os.read(self._wake_r, 4096):
                pass
        except (BlockingIOError, OSError):
            pass
        with self._lock:
            if not self._chunks:
                if self._eof:
                    return b""
                raise BlockingIOError
            taken, size = [], 0
            while self._chunks and size < n:
                c = self._chunks.popleft()
                if size + len(c) > n:
                    c, back = c[:n - size], c[n - size:]
                    self._chunks.appendleft(back)
                taken.append(c)
                size += len(c)
            self._size -= size
            out, more = b"".join(taken), bool(self._chunks)
        if more:  # more than asked for: select wakes the reader again
            try:
                os.write(self._wake_w, b"x")
            except (BlockingIOError, OSError):
                pass
        return out

    def close(self) -> None:
        self._stop = True
        try:
            self.sock.shutdown(socket.SHUT_RDWR)  # wakes the thread's select at once
        except OSError:
            pass
        self._thread.join(timeout=1.0)
        self.sock.close()
        for fd in (self._wake_r, self._wake_w):
            try:
                os.close(fd)
            except OSError:
                pass


class LineReader:
    """Lines from a guest's stream. The guest is not trusted: a line longer
    than max_line is cut there (the rest comes as further lines), so an
    endless line costs neither memory nor time."""

    def __init__(self, sock: socket.socket | Pump | None, max_line: int = 16384) -> None:
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
