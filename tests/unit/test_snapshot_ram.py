# SPDX-License-Identifier: GPL-2.0
"""A snapshot's RAM copy: what the guest wrote, with its holes and zero pages left out."""
import os
import shutil

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


def test_a_disk_image_made_again_at_its_path_is_not_restored_under_an_old_snapshot(tmp_path):
    """A snapshot's guest has the disk image it was saved with mounted: the
    key named only its path, and a module tree read afresh into the same
    path was restored under the old mount."""
    from harness.base.kernel_cache import KernelKey
    from harness.guest import snapshot
    from harness.guest.vm import VM, VMConfig
    from images.guest.disks import Disk
    image = tmp_path / "modules.ext4"
    image.write_bytes(b"old tree")
    cfg = VMConfig(kernel=tmp_path / "vmlinuz", initrd=tmp_path / "initrd", cmdline="x", log_dir=tmp_path,
                   disks=(Disk(image, "kstall-modules", readonly=True),))
    kernel = KernelKey("0" * 64, "x86_64")
    vm = VM(cfg)
    try:
        before = snapshot.for_vm(vm, kernel).key
        assert snapshot.for_vm(vm, kernel).key == before  # the same image: the same snapshot
        os.utime(image, (1, 1))  # a use touches it (module_tree: what prune keeps): still the same image
        assert snapshot.for_vm(vm, kernel).key == before
        copy = tmp_path / "copy.part"
        shutil.copy(image, copy)
        copy.replace(image)  # a cache copied to another runner: a new inode, the same image
        assert snapshot.for_vm(vm, kernel).key == before
        new = tmp_path / "modules.ext4.part"
        new.write_bytes(b"new tree")
        new.replace(image)  # made again, as module_tree.py does: a new file at the old path
        assert snapshot.for_vm(vm, kernel).key != before
    finally:
        vm.__exit__(None, None, None)
