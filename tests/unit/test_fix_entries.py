# SPDX-License-Identifier: GPL-2.0
"""Which changelog entry of the first fixed version is the fix (harness/drivers/bisect/fix_entries.py)."""
from __future__ import annotations

import gzip

from harness.drivers.bisect import fix_entries

CHANGELOG = """linux (6.1.180-1) bookworm-security; urgency=high

  * New upstream stable update:
    https://www.kernel.org/pub/linux/kernel/v6.x/ChangeLog-6.1.180
    - fuse: do not wait for a reply from a dead connection in fuse_lookup
    - fuse: fix a leak
    - ext4: fix a race in ext4_rename
    - mm: page_alloc: fix a counter
    - [x86] mutex: speed up something

 -- Maintainer <m@example.org>  Mon, 01 Jun 2026 00:00:00 +0000

linux (6.1.176-1) bookworm; urgency=medium

  * New upstream stable update:
    - fuse: an older fix, before the range
    - net: sched: fix the old thing

 -- Maintainer <m@example.org>  Mon, 01 May 2026 00:00:00 +0000
"""

# a hung-task report as 6.1's console prints it
CONSOLE = """INFO: task syz-executor:312 blocked for more than 143 seconds.
Call Trace:
 <TASK>
 __schedule+0x2e4/0x8c0
 schedule+0x5a/0xd0
 schedule_preempt_disabled+0x11/0x20
 __mutex_lock.constprop.0+0x2a0/0x5d0
 fuse_lookup+0x8c/0x1a0 [fuse]
 __lookup_slow+0x81/0x130
 walk_component+0x158/0x1d0
 do_syscall_64+0x55/0xb0
"""


def write(tmp_path):
    p = tmp_path / "changelog.Debian.gz"
    p.write_bytes(gzip.compress(CHANGELOG.encode()))
    return p


def test_without_a_fix_in_the_record_the_entries_near_the_hangs_code_are_the_candidates(tmp_path):
    got = fix_entries.answer(write(tmp_path), "6.1.176", "6.1.180", "", CONSOLE)
    subjects = [e["subject"] for e in got["entries"]]
    # the entry naming a frame first, then its subsystem's; not the lock's, the mm's or the older version's
    assert subjects == ["fuse: do not wait for a reply from a dead connection in fuse_lookup", "fuse: fix a leak"]
    assert got["entries"][0]["why"] == "names fuse_lookup"
    assert got["text"] == "the record names no fix; 2 of the 5 entries since 6.1.176 are near the hang's code"


def test_the_records_fix_is_found_in_the_changelog_or_said_missing(tmp_path):
    got = fix_entries.answer(write(tmp_path), "6.1.176", "6.1.180", "ext4: fix a race in ext4_rename", CONSOLE)
    assert got["entries"] == [{"version": "6.1.180-1", "subject": "ext4: fix a race in ext4_rename",
                               "why": "the record's fix"}]
    assert "(since 6.1.176)" in got["text"]
    got = fix_entries.answer(write(tmp_path), "6.1.176", "6.1.180", "nfs: never listed", "")
    assert got["text"].startswith("the changelog does not list the record's fix \"nfs: never listed\"; none of the 5")
    assert fix_entries.answer(None, "6.1.176", "6.1.180", "", CONSOLE)["entries"] == []


def test_a_fix_listed_in_a_version_that_still_hung_is_not_what_stopped_it(tmp_path):
    got = fix_entries.answer(write(tmp_path), "6.1.176", "6.1.180", "net: sched: fix the old thing", CONSOLE)
    assert all(e["why"] != "the record's fix" for e in got["entries"]), got
    assert got["text"].startswith("the changelog lists the record's fix \"net: sched: fix the old thing\" in "
                                  "6.1.176-1, already in 6.1.176, which still hung; 2 of the 5"), got["text"]


def test_a_subjects_subsystem_is_its_prefix():
    assert fix_entries.subsystem("fs/ntfs3: fix x") == "ntfs3"
    assert fix_entries.subsystem("fuse: fix x") == "fuse"
    assert fix_entries.subsystem("Revert \"x: y\"") == ""
    assert fix_entries.functions(CONSOLE)[:2] == ["__schedule", "schedule"]
    assert "__mutex_lock" in fix_entries.functions(CONSOLE)


def test_a_hang_in_the_vfs_over_an_image_takes_its_candidates_from_the_images_filesystem(tmp_path):
    # 42986aeeddfd on 6.1.180: rmdir waits for the inode lock it took itself in
    # vfs_rmdir, on an exFAT image; no frame names exfat, the console does
    log = CHANGELOG.replace("    - ext4: fix a race in ext4_rename\n",
                            "    - ext4: fix a race in ext4_rename\n"
                            "    - exfat: validate cluster allocation bits of the allocation bitmap\n")
    p = tmp_path / "changelog.Debian.gz"
    p.write_bytes(gzip.compress(log.encode()))
    console = ("[   10.9] EXT4-fs (vdb): mounted filesystem with ordered data mode.\n"
               "[   11.1] exFAT-fs (loop0): failed to load upcase table\n"
               "INFO: task syz:197 blocked for more than 30 seconds.\n"
               " rwsem_down_write_slowpath+0x311/0x6d0\n vfs_rmdir+0x53/0x200\n do_rmdir+0x171/0x1b0\n")
    got = fix_entries.answer(p, "6.1.176", "6.1.180", "", console)
    # exfat's entry, not ext4's: the guest's own disk (vdb) is not the program's image
    subjects = [e["subject"] for e in got["entries"]]
    assert subjects == ["exfat: validate cluster allocation bits of the allocation bitmap"]
    assert got["entries"][0]["why"] == "in exfat, the filesystem of the program's image (\"exFAT-fs (loop0)\")"
    # as each filesystem says it; the changelog's name where that differs; no word in a filesystem's place
    said = ("XFS (loop1): Mounting V5\nBTRFS error (device loop2: state EA): x\nUDF-fs: error (device loop3): x\n"
            "ntfs3: loop4: x\nNILFS (loop5): x\nQuota error (device loop6): x\nloop0: detected capacity change\n"
            "Buffer I/O error on dev loop0, logical block 0\n")
    assert fix_entries.mounted(said) == {"xfs": "XFS (loop1)", "btrfs": "BTRFS error (device loop2",
                                         "udf": "UDF-fs: error (device loop3)", "ntfs3": "ntfs3: loop4:",
                                         "nilfs2": "NILFS (loop5)"}
