# SPDX-License-Identifier: GPL-2.0
"""The benchmark's rows outlive the state they were made from
(tests/bench/syzbot_rows.py): a pass replaces the rows of the bugs it ran,
keeps the others, and counts again from the rows."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import syzbot_rows  # noqa: E402

DOC = """# before

<!-- rows 2026-12-01 -->
| bug | syzbot's title | debian:6.1.170 | debian:7.3.4 |
| --- | --- | --- | --- |
| aaaaaaaaaaaa | INFO: task hung in a | reproduced (title) 3/3 | not reproduced (120 s; reached: open) |
| bbbbbbbbbbbb (to run again) | INFO: task hung in b | different: INFO: task hung in c 2/3 | - |
| dddddddddddd | INFO: task hung in d | needs /dev/raw-gadget | - |

3 bugs

- debian:6.1.170: 3 bugs: reproduced 1, different 1, needs 1
- debian:7.3.4: 1 bugs: not reproduced 1
- pass 2026-12-01:
  - debian:6.1.170: 3 bugs; 7 cells in 0.30 h
<!-- /rows -->

# after
"""

TABLE = """| bug | syzbot's title | debian:6.1.170 | debian:7.3.4 |
| --- | --- | --- | --- |
| bbbbbbbbbbbb | INFO: task hung in b | not reproduced (120 s; reached: ioctl) | - |
| cccccccccccc | INFO: task hung in c | starved (oom kills: 40 OOM kills) | - |

2 bugs run
"""


def test_a_pass_replaces_the_rows_it_ran_keeps_the_others_and_counts_from_the_rows():
    out = syzbot_rows.merge(DOC, TABLE, ["- pass 2026-12-02:", "  - debian:6.1.170: 2 bugs; 2 cells in 0.07 h"])
    assert out.startswith("# before\n") and out.endswith("<!-- /rows -->\n\n# after\n")
    rows = [x for x in out.split("\n") if syzbot_rows.ROW.match(x)]
    assert [r[2:14] for r in rows] == ["aaaaaaaaaaaa", "bbbbbbbbbbbb", "cccccccccccc", "dddddddddddd"]
    assert "to run again" not in out and "reached: ioctl" in out and "hung in c 2/3" not in out
    assert "\n4 bugs\n" in out
    assert "- debian:6.1.170: 4 bugs: reproduced 1, not reproduced 1, starved 1, needs 1\n" in out
    assert "- debian:7.3.4: 1 bugs: not reproduced 1\n" in out
    # both passes' figures, the old one as it was
    assert "- pass 2026-12-01:\n  - debian:6.1.170: 3 bugs; 7 cells in 0.30 h\n- pass 2026-12-02:\n" in out


def test_the_same_pass_merged_again_replaces_its_own_figures():
    once = syzbot_rows.merge(DOC, TABLE, ["- pass 2026-12-02:", "  - first"])
    twice = syzbot_rows.merge(once, TABLE, ["- pass 2026-12-02:", "  - second"])
    assert "  - first" not in twice and twice.count("- pass 2026-12-02:") == 1 and "  - second" in twice
    assert twice == syzbot_rows.merge(DOC, TABLE, ["- pass 2026-12-02:", "  - second"])


def test_a_document_without_the_block_is_an_error_not_a_lost_table():
    with pytest.raises(ValueError, match="rows"):
        syzbot_rows.merge("# nothing here\n", TABLE, ["- pass x:"])


def test_a_named_block_is_merged_and_the_other_blocks_are_left_as_they_are():
    newest = DOC.replace("<!-- rows 2026-12-01 -->", "<!-- rows newest -->").replace("# before", "# newest")
    doc = DOC + newest
    out = syzbot_rows.merge(doc, TABLE, ["- pass x:"], block="newest")
    first, second = out.split("# newest")
    assert first == DOC and "cccccccccccc" in second and "- pass x:" in second
    assert syzbot_rows.merge(doc, TABLE, ["- pass x:"]).split("# newest")[1] == newest.split("# newest")[1]
    with pytest.raises(ValueError, match="rows none"):
        syzbot_rows.merge(doc, TABLE, ["- pass x:"], block="none")


def test_a_pass_on_fewer_kernels_keeps_the_other_kernels_cells_of_its_bugs():
    table = TABLE.replace("| bbbbbbbbbbbb | INFO: task hung in b | not reproduced (120 s; reached: ioctl) | - |",
                          "| aaaaaaaaaaaa | INFO: task hung in a | - | not in the kernel: filesystem sysv |")
    out = syzbot_rows.merge(DOC, table, ["- pass x:"])
    [row] = [x for x in out.split("\n") if x.startswith("| aaaaaaaaaaaa")]
    assert row == ("| aaaaaaaaaaaa | INFO: task hung in a | reproduced (title) 3/3 | "
                   "not in the kernel: filesystem sysv |")


def test_a_pass_over_other_kernels_fills_their_columns_by_name_and_keeps_the_rest():
    table = ("| bug | syzbot's title | debian:7.3.4 |\n| --- | --- | --- |\n"
             "| aaaaaaaaaaaa | INFO: task hung in a | not in the kernel: filesystem sysv |\n")
    out = syzbot_rows.merge(DOC, table, ["- pass x:"])
    [row] = [x for x in out.split("\n") if x.startswith("| aaaaaaaaaaaa")]
    assert row == ("| aaaaaaaaaaaa | INFO: task hung in a | reproduced (title) 3/3 | "
                   "not in the kernel: filesystem sysv |")
    with pytest.raises(ValueError, match="not all among the block's"):
        syzbot_rows.merge(DOC, table.replace("debian:7.3.4", "debian:7.2.13"), ["- pass x:"])
