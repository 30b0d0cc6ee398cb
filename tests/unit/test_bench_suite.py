# SPDX-License-Identifier: GPL-2.0
"""ci/syzbot-hangs.toml is written from what the benchmark measured
(tests/bench/syzbot_suite.py): a bug enters it once its title came back on a
Debian kernel; a kernel expects the hang where it came in at least half of
its tries, its absence only at or after a fix hunt's first fixed version,
and anything elsewhere."""
from __future__ import annotations

import json
import sys
from pathlib import Path

from recorded import FIXTURES

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import syzbot_suite  # noqa: E402

from harness.drivers import matrix as matrix_file  # noqa: E402

PROGRAMS = FIXTURES / "syzkaller-programs"


def tries(state: Path, bug: str, kernel: str, outcomes: str) -> None:
    """One cell file per try: 'm' syzbot's title, 'd' a different hang, 'c' clean."""
    (state / "cells").mkdir(parents=True, exist_ok=True)
    for n, o in enumerate(outcomes, 1):
        cell = {"bug": bug, "kernel": kernel, "try": n, "duration": 120, "status": "open", "title": "t",
                "verdict": "NOT_REPRODUCED" if o == "c" else "VULNERABLE", "line": "", "title_found": "x",
                "matched": {"how": "title", "ours": "t"} if o == "m" else None, "reached": ["open"],
                "needs": [], "health_events": []}
        name = f"{bug}__{kernel.replace(':', '-')}__{n}.json"
        (state / "cells" / name).write_text(json.dumps(cell))


def test_the_suite_holds_every_reproduced_bug_with_what_each_kernel_must_show(tmp_path):
    state = tmp_path / "state"
    pipe, late, busy = "aaaa0000000000000001", "adad0000000000000001", "bbbb0000000000000002"
    tries(state, pipe, "debian:6.1.170", "mmc")
    tries(state, pipe, "debian:6.1.192", "c")
    tries(state, pipe, "debian:6.12.118", "c")
    tries(state, pipe, "debian:7.3.4", "m")
    tries(state, late, "debian:6.1.170", "mcc")   # 1 of 3: too flaky to expect either way
    tries(state, busy, "debian:6.1.170", "d")     # another hang: not this bug's reproduction
    hunts = tmp_path / "hunts" / "20261203-bisect"
    hunts.mkdir(parents=True)
    (hunts / "bisect.json").write_text(json.dumps({
        "reproducer": f"syz:{PROGRAMS / 'pipe_hang.c'}", "direction": "fix", "first_new": "6.1.176",
        "fix_entries": {"text": "the record names no fix; 1 of 9 entries ...",
                        "entries": [{"version": "6.1.176-1", "subject": "pipe: x", "why": "names pipe_write"}]}}))
    text = syzbot_suite.suite([(state, PROGRAMS)], [tmp_path / "hunts"])
    f = tmp_path / "syzbot-hangs.toml"
    f.write_text(text)
    m = matrix_file.load(f)
    want = {("debian:6.1.170", "syz-aaaa00000000"): "vulnerable", ("debian:6.1.192", "syz-aaaa00000000"):
            "not_reproduced", ("debian:6.12.118", "syz-aaaa00000000"): "any",
            ("debian:7.3.4", "syz-aaaa00000000"): "vulnerable", ("debian:6.1.170", "syz-adad00000000"): "any"}
    assert {(c.kernel, c.reproducer): c.expect for c in m.cells if (c.kernel, c.reproducer) in want} == want
    assert m.reproducers == ["syz-aaaa00000000", "syz-adad00000000"]  # bbbb's hang was another
    assert m.kernels == ["debian:6.1.170", "debian:6.1.192", "debian:6.12.118", "debian:7.3.4"]
    assert m.about["syz-aaaa00000000"] == {"fixed_in": ["debian:6.1.176"]}
    assert "#   fixed in debian:6.1.176: the record names no fix; 1 of 9 entries" in text


def test_the_suite_is_written_from_the_documents_rows_and_keeps_what_was_kept_by_hand(tmp_path):
    """The state goes with a machine, the document's rows blocks stay: the suite
    is made from them too, a later block's word on a kernel over an earlier's
    (today's code over older), and an entry no measurement made stays as written."""
    doc = tmp_path / "README.md"
    doc.write_text("\n".join([
        "<!-- rows old -->", "| bug | syzbot's title | debian:6.1.170 | debian:6.12.118 |", "| --- | --- | --- | --- |",
        "| aaaa00000000 | t | reproduced (title) 2/3 | reproduced (stack) 3/3 |",
        "| bbbb00000000 | t | different: INFO: task hung in x 3/3 | not reproduced (120 s; reached: open) |",
        "<!-- /rows -->", "", "<!-- rows newest -->", "| bug | syzbot's title | debian:6.12.118 | debian:7.3.4 |",
        "| --- | --- | --- | --- |", "| aaaa00000000 | t | not reproduced (120 s; reached: open) | - |",
        "<!-- /rows -->", ""]))
    old = tmp_path / "old.toml"
    old.write_text('# head\n\n# kept by hand: why\n[[reproducer]]\n'
                   'syzbot = "0660ec96c45e609f07f6a7a08f343f23b21ae1e7"\nduration = 150\n\n'
                   '[[kernel]]\nspec = "debian:6.17.8"\nexpect = { syz-0660ec96c45e = "not_reproduced" }\n')
    text = syzbot_suite.suite([(doc, PROGRAMS)], [], keep=old)
    f = tmp_path / "syzbot-hangs.toml"
    f.write_text(text)
    m = matrix_file.load(f)
    assert m.reproducers == ["syz-0660ec96c45e", "syz-aaaa00000000"]  # bbbb hung otherwise: not in the suite
    assert {(c.kernel, c.reproducer): c.expect for c in m.cells if c.expect != "any"} == {
        ("debian:6.1.170", "syz-aaaa00000000"): "vulnerable", ("debian:6.17.8", "syz-0660ec96c45e"): "not_reproduced"}
    assert "# kept by hand: why" in text and "#   debian:6.12.118: not reproduced (120 s; reached: open)" in text
    assert m.kernels == ["debian:6.1.170", "debian:6.12.118", "debian:6.17.8"]  # 7.3.4 ran nothing
    # made again from itself: the generated entries are made anew, not kept as by hand
    f.write_text(text.replace("reproduced (title) 2/3", "x"))
    doc.write_text(doc.read_text().replace("reproduced (title) 2/3", "not reproduced (120 s; reached: open)"))
    again = syzbot_suite.suite([(doc, PROGRAMS)], [], keep=f)
    assert "syz-aaaa00000000" not in again and "# kept by hand: why" in again  # aaaa no longer hangs anywhere
    # an entry the script wrote from a state since gone (no source here measured its bug) stays as written
    gone = text.replace('syzbot = "aaaa00000000', 'syzbot = "cccc00000000')
    gone = gone.replace("syz-aaaa00000000", "syz-cccc00000000")
    f.write_text(gone)
    kept = syzbot_suite.suite([(doc, PROGRAMS)], [], keep=f)
    assert 'syzbot = "cccc00000000' in kept and "syz-cccc00000000" in kept


def test_a_fix_hunts_finding_stays_in_the_suite_when_its_bisection_has_gone(tmp_path):
    """bisect.json goes with the machine that ran the hunt: the suite written
    again without it keeps the first fixed version, its changelog line and the
    not_reproduced it makes; a new hunt over the same line replaces it."""
    state = tmp_path / "state"
    bug = "aaaa0000000000000001"
    tries(state, bug, "debian:6.1.170", "m")
    tries(state, bug, "debian:6.1.192", "c")
    hunts = tmp_path / "hunts" / "20261203-bisect"
    hunts.mkdir(parents=True)

    def hunt(first: str, text: str, flavour: str = "") -> None:
        (hunts / "bisect.json").write_text(json.dumps({
            "reproducer": f"syz:{PROGRAMS / 'pipe_hang.c'}", "direction": "fix", "first_new": first,
            "flavour_suffix": flavour, "fix_entries": {"text": text, "entries": []}}))

    hunt("6.1.176", "the record names no fix; none of 9 entries names it")
    f = tmp_path / "syzbot-hangs.toml"
    f.write_text(first := syzbot_suite.suite([(state, PROGRAMS)], [tmp_path / "hunts"]))
    assert syzbot_suite.suite([(state, PROGRAMS)], [], keep=f) == first  # the hunt's directory gone
    assert matrix_file.load(f).about["syz-aaaa00000000"] == {"fixed_in": ["debian:6.1.176"]}
    hunt("6.1.180", "the record names no fix; none of 4 entries names it")
    again = syzbot_suite.suite([(state, PROGRAMS)], [tmp_path / "hunts"], keep=f)
    assert 'fixed_in = ["debian:6.1.180"]' in again and "6.1.176" not in again
    assert "#   fixed in debian:6.1.180: the record names no fix; none of 4 entries" in again
    # another flavour's hunt is another line's: arm64's rt does not replace amd64's rt
    hunt("6.1.176", "amd64 rt", "-rt")
    f.write_text(syzbot_suite.suite([(state, PROGRAMS)], [tmp_path / "hunts"]))
    hunt("6.1.190", "arm64 rt", "-rt-arm64")
    both = syzbot_suite.suite([(state, PROGRAMS)], [tmp_path / "hunts"], keep=f)
    assert 'fixed_in = ["debian:6.1.176-rt", "debian:6.1.190-rt-arm64"]' in both
