# SPDX-License-Identifier: GPL-2.0
"""A guest stream is read as fast as it is sent, whatever kstall is doing."""
import socket
import threading

from harness.guest.streams import LineReader, Pump


def test_a_sender_is_never_held_up_by_a_reader_that_is_busy_elsewhere():
    """4 MB of lines sent into a socket nobody reads for the time being (as
    a guest's UART sends while GDB samples it): all of them are taken at
    once by the pump, then read in order, every line whole."""
    qemu, host = socket.socketpair()
    pump = Pump(host)
    lines = [f"[{i:8d}] an OOM killer's task list line".encode() for i in range(100_000)]
    sent = threading.Event()

    def send() -> None:
        qemu.sendall(b"\n".join(lines) + b"\n")
        sent.set()
    t = threading.Thread(target=send, daemon=True)
    t.start()
    try:
        assert sent.wait(30), "the sender waited for a reader"
        reader, got = LineReader(pump), []
        while len(got) < len(lines):
            got += reader.read()
        assert got == [l.decode() for l in lines]
        qemu.close()
        for _ in range(1000):  # its end arrives as end-of-file
            reader.read()
            if reader.eof:
                break
            threading.Event().wait(0.005)
        assert reader.eof
    finally:
        qemu.close()
        pump.close()
        t.join(5)
