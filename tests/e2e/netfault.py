# SPDX-License-Identifier: GPL-2.0
"""Network faults for the download tests: a port nothing listens on, and an
HTTP proxy that relays Debian's mirror but cuts every .deb off after a
number of bytes, as a dropped connection does, or answers the first request
for one file with half of it, as a glitching mirror or proxy does."""
from __future__ import annotations

import http.server
import socket
import threading
import urllib.request


def closed_port() -> int:
    """A local TCP port with nothing listening on it."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _Relay(http.server.BaseHTTPRequestHandler):
    server: "CuttingProxy"

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with direct.open(self.path, timeout=60) as up:
            size = up.headers.get("Content-Length")
            halved = bool(self.server.garble and size) and self.path.endswith(self.server.garble) \
                and self.path not in self.server.garbled
            if halved:  # a whole answer of its own length, but half the file
                self.server.garbled.append(self.path)
                left = int(size) // 2
            else:
                left = self.server.cut_after if self.path.endswith(".deb") else None
            self.send_response(up.status)
            for name in ("Content-Type", "Content-Length", "Last-Modified"):
                if up.headers.get(name):
                    self.send_header(name, str(left) if halved and name == "Content-Length" else up.headers[name])
            self.send_header("Connection", "close")
            self.end_headers()
            while left is None or left > 0:
                chunk = up.read(1 << 16 if left is None else min(1 << 16, left))
                if not chunk:
                    break
                self.wfile.write(chunk)
                if left is not None:
                    left -= len(chunk)
        if left is not None and not halved:
            self.server.cut.append(self.path)
        self.close_connection = True

    def log_message(self, *args) -> None:
        pass


class CuttingProxy(http.server.ThreadingHTTPServer):
    """with CuttingProxy(n) as p: env http_proxy=p.url; cut_after: the bytes
    of a .deb relayed (None: all); garble: the end of a URL whose first
    request gets half the file."""
    daemon_threads = True

    def __init__(self, cut_after: int | None = None, garble: str = "") -> None:
        super().__init__(("127.0.0.1", 0), _Relay)
        self.cut_after = cut_after
        self.cut: list[str] = []
        self.garble = garble
        self.garbled: list[str] = []
        self.url = f"http://127.0.0.1:{self.server_address[1]}"

    def __enter__(self) -> "CuttingProxy":
        threading.Thread(target=self.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
        self.server_close()
