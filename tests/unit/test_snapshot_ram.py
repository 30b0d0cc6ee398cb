# SPDX-License-Identifier: GPL-2.0
"""A snapshot's RAM copy: what the guest wrote, with its holes and zero pages left out."""
import os

from harness.guest.snapshot import PAGE, copy_sparse


def test_copy_sparse_keeps_data_and_leaves_holes(tmp_path):
    src = tmp_path / "ram"
    size = 64 * PAGE
    with open(src, "wb") as f:
        f.truncate(size)
        f.seek(3 * PAGE)
        f.write(b"\x01" * PAGE + bytes(PAGE) + b"kstall")  # data, a written zero page, a partial page
        f.seek(40 * PAGE + 100)
        f.write(b"\xff" * 10)
    fd = os.open(src, os.O_RDONLY)
    try:
        got_size, written = copy_sparse(fd, tmp_path / "copy")
    finally:
        os.close(fd)
    copy = (tmp_path / "copy").read_bytes()
    assert got_size == size and copy == src.read_bytes()
    assert written == 3 * PAGE  # the zero page was not written
    assert os.stat(tmp_path / "copy").st_blocks * 512 < size // 4
    assert os.stat(tmp_path / "copy").st_mode & 0o077 == 0  # guest RAM is its owner's only
