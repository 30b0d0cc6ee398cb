# SPDX-License-Identifier: GPL-2.0
"""Which entry of the first fixed version's changelog is the fix, once a
fix hunt over Debian versions has found that version.

Where the bug's record names the fixing commit, the answer is whether the
package's changelog lists that subject (and in which version). Where it
names none (syzbot's open bugs), the answer is a short list: the entries the
first fixed version added since the last version with the hang, those whose
subject names a function of the hang's stacks first, then those of the
subsystem those functions belong to ("fuse: ..." for fuse_lookup), then
those of a filesystem the program mounted on a loop device, which the
console names ("exFAT-fs (loop0): ..."): a syzkaller image's bug often
hangs in the VFS's own functions (vfs_rmdir over exfat). A list,
never a verdict: a stable update takes hundreds of changes, and a fix may
be far from where the tasks sleep."""
from __future__ import annotations

import re
import tomllib
from pathlib import Path

from harness.analysis.classify import base_name
from harness.base import paths
from harness.debug import inlines
from images.kernels import changelog

# words of the functions every sleeping or spinning task's stack passes through,
# whatever the bug (fix-entries.toml): a subsystem they name says nothing of it
_DATA = tomllib.loads(paths.data_file("harness", "drivers", "bisect", "fix-entries.toml").read_text())
EVERYWHERE = frozenset(_DATA["everywhere"])
MESSAGE_NAMES: dict[str, str] = _DATA["message-names"]
NOT_FILESYSTEMS = frozenset(_DATA["not-filesystems"]["words"])
# a heading over a version's changes: "New upstream stable update:" and the
# ChangeLog's address the changelog puts under it
HEADING = re.compile(r":(\s+\S+://\S+)?$")
MAX_ENTRIES = 12
# a filesystem's kernel messages about an image on a loop device: "exFAT-fs (loop0)",
# "EXT4-fs (loop3)", "XFS (loop1)", "BTRFS error (device loop0: state EA)", "UDF-fs: error
# (device loop0)", "erofs: (device loop0)", "ntfs3: loop0:" (the guest's own disks are vdX)
MOUNTED = re.compile(r"\b([A-Za-z][A-Za-z0-9]*?)(?:-fs)?:?(?: ([a-z]+):?)? \((?:device )?loop\d+\)?"
                     r"|\b(ntfs3): loop\d+:")
MIN_NAME = 6  # shorter function names appear in subjects by chance


def since(lines: list[changelog.Line], last_old: str) -> list[changelog.Line]:
    """The changes listed newer than the package of upstream version
    last_old (newest first, as the changelog lists them), without the
    headings over them ("New upstream stable update:")."""
    out = []
    for line in lines:
        if line.version.split("-")[0] == last_old:
            break
        if not HEADING.search(line.subject):
            out.append(line)
    return out


def functions(console: str) -> list[str]:
    """The functions of the stacks a console printed, most frequent first."""
    seen: dict[str, int] = {}
    for m in [*inlines.FRAME.findall(console), *inlines.MODULE_FRAME.findall(console)]:
        name = base_name(m[0])  # fuse_lookup of fuse_lookup.isra.0
        seen[name] = seen.get(name, 0) + 1
    return sorted(seen, key=lambda n: -seen[n])


def subsystem(subject: str) -> str:
    """'fuse' of 'fuse: fix ...', 'ntfs3' of 'fs/ntfs3: ...' ('' when the subject has no prefix)."""
    head, sep, _ = subject.partition(":")
    return head.strip().split("/")[-1].lower() if sep and " " not in head.strip() else ""


def mounted(console: str) -> dict[str, str]:
    """The filesystems the console says an image on a loop device was of: name -> the message's words."""
    out: dict[str, str] = {}
    for m in MOUNTED.finditer(console):
        name = (m[1] or m[3]).lower()
        if name not in NOT_FILESYSTEMS:
            out.setdefault(MESSAGE_NAMES.get(name, name), m[0])
    return out


def ranked(entries: list[changelog.Line], names: list[str],
           filesystems: dict[str, str] | None = None) -> list[tuple[str, changelog.Line]]:
    """(why, entry) for the entries a hang through names, on filesystems
    (mounted()), could be fixed by, the likeliest first."""
    # a function of the scheduler, the locks or the syscall entry is in every hang's stack
    filesystems = filesystems or {}
    named = [n for n in names if len(n) >= MIN_NAME and not set(n.strip("_").split("_")) & EVERYWHERE]
    areas = {n.strip("_").split("_")[0] for n in names} - EVERYWHERE - {""}
    out = []
    for e in entries:
        hit = next((n for n in named if re.search(rf"\b{re.escape(n)}\b", e.subject)), "")
        if hit:
            out.append((0, f"names {hit}", e))
        elif subsystem(e.subject) in areas:
            out.append((1, f"in {subsystem(e.subject)}, as the hang's {subsystem(e.subject)}_* frames", e))
        elif (fs := subsystem(e.subject)) in filesystems:
            out.append((2, f"in {fs}, the filesystem of the program's image (\"{filesystems[fs]}\")", e))
    out.sort(key=lambda x: x[0])
    return [(why, e) for _, why, e in out][:MAX_ENTRIES]


def answer(log_path: Path | None, last_old: str, first_new: str, fix_subject: str, console: str) -> dict:
    """What the first fixed version's changelog says of the fix: the
    record's subject found there (and in which version), or the candidates."""
    if log_path is None:
        return {"text": f"debian:{first_new}'s package has no changelog to read", "entries": []}
    lines = changelog.load(log_path)
    new = since(lines, last_old)
    said = "the record names no fix; "
    if fix_subject:
        found = changelog.find(lines, fix_subject)
        if found and found.reverted:
            said = f"the changelog lists the record's fix \"{fix_subject}\" and its revert; "
        elif found and found.line in new:
            return {"text": f"the changelog lists the record's fix \"{fix_subject}\" in {found.line.version} "
                            f"(since {last_old})", "entries": [{"version": found.line.version,
                                                              "subject": found.line.subject,
                                                              "why": "the record's fix"}]}
        elif found:  # there already in a version that hung: not what stopped it here
            said = (f"the changelog lists the record's fix \"{fix_subject}\" in {found.line.version}, "
                    f"already in {last_old}, which still hung; ")
        else:
            said = f"the changelog does not list the record's fix \"{fix_subject}\"; "
    images = mounted(console)
    picks = ranked(new, functions(console), images)
    if not picks:
        image = f", their subsystems or {', '.join(images)}, the program's image" if images else " or their subsystems"
        return {"text": said + f"none of the {len(new)} entries since {last_old} names the hang's functions{image}",
                "entries": []}
    return {"text": said + f"{len(picks)} of the {len(new)} entries since {last_old} are near the hang's code",
            "entries": [{"version": e.version, "subject": e.subject, "why": why} for why, e in picks]}
