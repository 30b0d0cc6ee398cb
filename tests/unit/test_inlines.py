# SPDX-License-Identifier: GPL-2.0
"""The functions a build inlined into a report's frames, from its DWARF: a
program and a module-like object built here, read by addr2line, and a
recorded report of Debian's 6.1.170 whose hung task syzbot names after a
function the build inlined."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

from harness.analysis import syzbot
from harness.analysis.kallsyms import Kallsyms
from harness.debug import inlines

RUNS = Path(__file__).resolve().parents[1] / "fixtures" / "syzkaller-runs"
PROGRAM = """
static volatile int sink;
static inline __attribute__((always_inline)) void lock_rename_like(int n) { while (n--) sink = n; }
__attribute__((noinline)) void do_renameat2_like(int n) { sink = 1; lock_rename_like(n); sink = 2; }
int main(int argc, char **argv) { do_renameat2_like(argc); return 0; }
"""


def test_a_frame_in_a_function_the_build_inlined_names_it(tmp_path):
    """A return address inside an inlined function (the byte after the
    call, as a stack trace shows it) names the inlined function, innermost
    first; the function that holds it is the frame's own."""
    src, exe = tmp_path / "p.c", tmp_path / "p"
    src.write_text(PROGRAM)
    subprocess.run(["gcc", "-O2", "-g", "-no-pie", "-o", str(exe), str(src)], check=True)
    nm = subprocess.run(["nm", str(exe)], capture_output=True, text=True, check=True).stdout
    syms = Kallsyms.parse(nm)
    base = syms.by_name["do_renameat2_like"]
    # the first address the loop's code has: inside the inlined function
    inside = next(a for a in range(base, base + 0x40) if inlines.inlined([a], exe) == ["lock_rename_like"])
    frame = f" do_renameat2_like+{inside + 1 - base:#x}/0x40"
    assert inlines.inlined(inlines.addresses([frame], syms), exe) == ["lock_rename_like"]
    # a stale word on the stack is no frame; a module's frame is not the kernel's
    assert inlines.addresses([" ? " + frame.strip(), frame + " [fuse]"], syms) == []


MODULE = """
static volatile int sink;
static inline __attribute__((always_inline)) void lock_metapage_like(int n) { while (n--) sink = n; }
static inline __attribute__((always_inline)) void other_inline(int n) { while (n--) sink = n + 1; }
__attribute__((noinline)) void first_in_text(int n) { sink = 3; other_inline(n); sink = 4; }
__attribute__((noinline, section(".text.unlikely")))
void get_metapage_like(int n) { sink = 1; lock_metapage_like(n); sink = 2; }
"""


def test_a_modules_frame_is_read_from_its_own_debug_file_at_its_sections_offset(tmp_path):
    """A .ko is relocatable: every section starts at 0, so a function's
    offset means something only in its own section (here .text.unlikely,
    whose offsets .text's first function also has)."""
    src, ko = tmp_path / "m.c", tmp_path / "m.ko"
    src.write_text(MODULE)
    subprocess.run(["gcc", "-O2", "-g", "-c", "-o", str(ko), str(src)], check=True)
    syms = inlines.module_symbols(ko)
    section, base = syms["get_metapage_like"]
    assert section == ".text.unlikely" and syms["first_in_text"][0] == ".text"
    inside = next(a for a in range(base, base + 0x40)
                  if inlines.inlined([a], ko, section) == ["lock_metapage_like"])
    lines = [f" get_metapage_like+{inside + 1 - base:#x}/0x40 [m]", " schedule+0x1/0x2",
             f" ? get_metapage_like+{inside + 1 - base:#x}/0x40 [m]"]  # a stale word: no frame
    frames = inlines.module_frames(lines)
    assert frames == {"m": [("get_metapage_like", inside + 1 - base)]}
    assert inlines.inlined_in_module(frames["m"], ko) == ["lock_metapage_like"]


def test_syzbots_function_inlined_into_a_frame_of_the_report_reproduces_its_title():
    """Recorded on 6.1.170 (c95626e6ef19, syzbot's "INFO: task hung in
    lock_rename"): the task's stack shows do_renameat2+0x47e, where the
    build inlined lock_rename, as its debug info says."""
    report = json.loads((RUNS / "lock-rename-6.1.170.report.json").read_text())
    assert report["title"] == "INFO: task hung in do_renameat2" and "lock_rename" in report["inlined"]
    m = syzbot.match(["INFO: task hung in lock_rename"], [syzbot.report_hang(report)])
    assert m is not None and m.how == "inlined"
    assert "inlined into a frame" in m.text()
    without = dict(report, inlined=[])  # without the kernel's debug info: a different hang
    assert syzbot.match(["INFO: task hung in lock_rename"], [syzbot.report_hang(without)]) is None
    # only a report the title does not name yet has its modules' debug files fetched,
    # and none once another report is named: the title is reproduced already
    assert syzbot.unnamed(["INFO: task hung in lock_rename"], [without]) == [without]
    assert syzbot.unnamed(["INFO: task hung in lock_rename"], [report, without]) == []
    assert syzbot.unnamed(["INFO: task hung in do_renameat2"], [without]) == []
