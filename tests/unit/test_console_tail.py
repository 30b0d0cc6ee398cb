# SPDX-License-Identifier: GPL-2.0
"""The console is read from the file QEMU writes, as it grows."""
import select

from harness.guest.streams import FileTail, LineReader


def test_the_console_is_read_from_where_it_stood_as_the_file_grows(tmp_path):
    """A restored guest's log begins with its snapshot's boot, which is not
    read again; what QEMU appends wakes select and is read in order, every
    line whole, however much arrives before kstall reads."""
    log = tmp_path / "console.log"
    log.write_bytes(b"[    1.0] the snapshot's boot\n")
    tail = FileTail(log, log.stat().st_size)
    try:
        reader = LineReader(tail)
        assert reader.read() == []
        lines = [f"[{i:8d}] an OOM killer's task list line".encode() for i in range(100_000)]
        with open(log, "ab") as qemu:  # as QEMU's file chardev writes (append=on)
            qemu.write(b"\n".join(lines) + b"\n")
        got = []
        for _ in range(1000):
            ready, _, _ = select.select([tail], [], [], 1.0)
            assert ready, "select did not wake for what was appended"
            got += reader.read()
            if len(got) == len(lines):
                break
        assert got == [l.decode() for l in lines]
        assert reader.read() == [] and not reader.eof  # nothing new: nothing, and no end
    finally:
        tail.close()
