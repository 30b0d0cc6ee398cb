# SPDX-License-Identifier: GPL-2.0
"""Matrix files, cell selection and judgement, and the four reports, on a
recorded real run (no guest boots here)."""
import json
import re
from pathlib import Path

import pytest
from lxml import etree
from recorded import FIXTURES, kcidb_validator

from harness.analysis import console, expect as matrix
from harness.drivers import matrix as matrix_file
from harness.analysis.expect import judge
from harness.analysis.ktap import Ktap
from harness.analysis.record import RunRecord
from harness.reports import formats, html, markdown, matrix_doc, text, views

REPO = Path(__file__).resolve().parents[2]


def test_default_matrix_covers_the_issue_kernels():
    m = matrix_file.load(REPO / "ci" / "matrix.toml")
    kernels = {c.kernel for c in m.cells}
    assert {"debian:6.12.107", "debian:6.16.12", "debian:6.17.8"} <= kernels
    assert any(k.startswith("debian:6.18.") for k in kernels) and any(k.startswith("debian:6.19.") for k in kernels)
    assert any(k.startswith("debian:7.") for k in kernels)
    assert len(m.cells) == len(m.kernels) * len(m.reproducers)
    expected = {c.id: c.expect for c in m.cells}  # every cell, not one per kernel
    assert len(expected) == len(m.cells)
    assert {i: e for i, e in expected.items() if i.startswith("debian:6.16.12/")} == {
        "debian:6.16.12/perf-refresh": "vulnerable", "debian:6.16.12/bpf-ringbuf": "vulnerable",
        "debian:6.16.12/bpf-timer": "not_reproduced", "debian:6.16.12/perf-sigtrap": "not_reproduced",
        "debian:6.16.12/signal-malloc": "vulnerable"}
    assert expected["debian:6.17.8/perf-refresh"] == "not_reproduced"
    assert expected["debian:6.12.107/bpf-ringbuf"] == "not_reproduced"


@pytest.mark.parametrize("text,error", [
    ('[[kernel]]\nspec="debian:6.16.12"\n', "at least one"),
    ('[[reproducer]]\nname="nope"\n[[kernel]]\nspec="debian:6.16.12"\n', "unknown reproducer"),
    ('[[reproducer]]\nname="perf-refresh"\n[[kernel]]\nspec="debian:6.16.12"\nexpect={perf-refresh="broken"}\n',
     "expect must be"),
    ('[[reproducer]]\nname="perf-refresh"\n[[kernel]]\nspec="debian:6.16.12"\nskip={other="x"}\n',
     "not a [[reproducer]]"),
])
def test_bad_matrix_files_are_rejected_clearly(tmp_path, text, error):
    p = tmp_path / "m.toml"
    p.write_text(text)
    with pytest.raises(matrix.MatrixError, match=re.escape(error)):
        matrix_file.load(p)


def test_every_matrix_file_in_ci_loads_with_an_expectation_per_cell():
    """The templates run them: each must load, and say what each cell should give."""
    files = [f for f in sorted((REPO / "ci").glob("*.toml")) if "[[kernel]]" in f.read_text()]
    assert {"matrix.toml", "family.toml", "syzbot-hangs.toml"} <= {f.name for f in files}
    for f in files:
        m = matrix_file.load(f)
        assert m.cells and all(c.expect for c in m.cells), f


def test_shards_partition_the_cells():
    cells = matrix_file.load(REPO / "ci" / "matrix.toml").cells
    for n in (1, 2, 3, 4):
        shards = [matrix.select(cells, (i, n)) for i in range(1, n + 1)]
        ids = [c.id for s in shards for c in s]
        assert sorted(ids) == sorted(c.id for c in cells) and len(ids) == len(set(ids))
    assert {c.kernel for c in matrix.select(cells, only=["debian:6.16.*"])} == \
        {"debian:6.16.12", "debian:6.16.12-arm64"}
    assert [c.reproducer for c in matrix.select(cells, only=["*/bpf-ringbuf"])] == ["bpf-ringbuf"] * len(
        {c.kernel for c in cells})
    left = matrix.select(cells, exclude=["*6.16.12/perf-refresh"])
    assert "debian:6.16.12/perf-refresh" not in {c.id for c in left} and len(left) == len(cells) - 1
    with pytest.raises(matrix.MatrixError):
        matrix.parse_shard("3/2")


def test_judgement():
    assert judge("vulnerable", "VULNERABLE") == "pass"
    assert judge("not_reproduced", "VULNERABLE") == "regression"
    assert judge("not_reproduced", "CRASHED") == "regression"
    assert judge("vulnerable", "NOT_REPRODUCED") == "unexpected-pass"
    assert judge("vulnerable", "INCONCLUSIVE") == "mismatch"
    assert judge("any", "ERROR") == "error" and judge("any", "INCONCLUSIVE") == "pass"
    assert judge("not_reproduced", "VULNERABLE", xfail="known") == "xfail"
    assert judge("vulnerable", "VULNERABLE", xfail="known") == "xpass"
    assert judge("vulnerable", None, skip="no PMU") == "skip"
    assert judge("vulnerable", None) == "not-run"


def recorded_doc(expect="not_reproduced", console_log=None):
    """A matrix document around the recorded 6.16.12 hang (a real run.json),
    with the console reports of a recorded console if one is named."""
    run = json.loads((FIXTURES / "perf-refresh-6.16.12-4cpu" / "run.json").read_text())
    if console_log:
        text = (FIXTURES / "consoles" / console_log).read_text(errors="replace")
        run["evidence"]["console_reports"] = [r.to_json() for r in console.scan(text)]
    cell = matrix.Cell("debian:6.16.12", "perf-refresh", expect=expect)
    other = matrix.Cell("debian:6.17.8", "perf-refresh", expect="not_reproduced", skip="not today")
    results = [matrix.CellResult(cell, matrix.judge_cell(cell, run["verdict"]), RunRecord.from_json(run), None, 7.5),
               matrix.CellResult(other, "skip")]
    m = matrix.Matrix(Path("ci/matrix.toml"), ["debian:6.16.12", "debian:6.17.8"], ["perf-refresh"], [cell, other])
    return matrix_doc.matrix_doc(m, results, Path("."), "test-run", None, 0.0, 2, 2)


def test_a_regression_is_named_in_all_four_reports(tmp_path):
    doc = recorded_doc()
    assert doc["exit_code"] == 1 and doc["failing"] == ["debian:6.16.12/perf-refresh"]
    formats.write_all(tmp_path, doc)
    junit = etree.parse(str(tmp_path / "junit.xml"))
    schema = etree.XMLSchema(etree.parse(str(FIXTURES / "junit.xsd")))
    assert schema.validate(junit), schema.error_log
    failure = junit.find(".//testcase[@name='debian:6.16.12']/failure")
    assert failure.get("type") == "regression" and "hrtimer_cancel+0x28" in failure.text
    assert junit.find(".//testcase[@name='debian:6.17.8']/skipped") is not None
    md = (tmp_path / "summary.md").read_text()
    assert "**VULNERABLE** (REGRESSION, expected not_reproduced)" in md and "debian:6.16.12/perf-refresh" in md
    html = (tmp_path / "report.html").read_text()
    assert 'class="cell verdict-vulnerable status-regression"' in html
    assert not re.search(r'(src|href)\s*=\s*"', html), "report.html must be self-contained"
    assert json.loads((tmp_path / "matrix.json").read_text())["failing"] == doc["failing"]
    ktap = (tmp_path / "matrix.ktap").read_text().splitlines()
    assert ktap[0] == "KTAP version 1" and "1..2" in ktap
    assert "not ok 1 debian:6.16.12/perf-refresh" in ktap
    assert "ok 2 debian:6.17.8/perf-refresh # SKIP not today" in ktap
    # what kstall's own KTAP reader makes of it (the agent's reproducer output parser)
    k = Ktap()
    for line in ktap:
        k.feed(line)
    assert [(r["ok"], r["directive"]) for r in k.results] == [(False, ""), (True, "SKIP")]
    # LAVA's test cases (ci/lava/kstall-matrix.yaml): names without ':' or '/', LAVA's results
    assert (tmp_path / "lava-cases.txt").read_text().splitlines() == [
        "debian_6.16.12_perf-refresh fail 7.5", "debian_6.17.8_perf-refresh skip 0.0"]


def test_passing_doc_exits_zero_and_merge_is_a_union():
    ok = recorded_doc(expect="vulnerable")
    assert ok["exit_code"] == 0
    a = dict(ok, cells=ok["cells"][:1], shards=["1/2"])
    b = dict(ok, cells=ok["cells"][1:], shards=["2/2"])
    merged = matrix_doc.merge([a, b])
    assert [c["id"] for c in merged["cells"]] == [c["id"] for c in ok["cells"]]
    assert merged["shards"] == ["1/2", "2/2"] and merged["exit_code"] == 0
    assert "debian:6.16.12" in text.matrix_table(merged)



def test_kernel_report_titles_reach_every_report(tmp_path):
    doc = recorded_doc(console_log="6.16.12-2cpu-perf-freeze.log")
    cell = doc["cells"][0]
    assert cell["console_titles"][0] == {"title": "INFO: rcu detected stall in perf_ioctl", "kind": "stall",
                                         "count": 3}
    formats.write_all(tmp_path, doc)
    said = "BUG: soft lockup in smp_call_function (x5)"
    assert said in (tmp_path / "summary.md").read_text()
    assert said in (tmp_path / "report.html").read_text()
    assert said in (tmp_path / "matrix.ktap").read_text()
    assert said in etree.parse(str(tmp_path / "junit.xml")).find(".//failure").text



def test_kcidb_json_validates_and_maps_verdicts(tmp_path):
    doc = recorded_doc(console_log="6.16.12-2cpu-perf-freeze.log")
    formats.write_all(tmp_path, doc)
    data = json.loads((tmp_path / "kcidb.json").read_text())
    errors = [e.message for e in kcidb_validator().iter_errors(data)]
    assert errors == []
    assert data["version"] == {"major": 4, "minor": 5}
    by_status = {t["misc"]["matrix_status"]: t for t in data["tests"]}
    hung = by_status["regression"]
    assert hung["status"] == "FAIL" and hung["path"] == "kstall.perf-refresh"
    assert hung["misc"]["signature"] == doc["cells"][0]["signature"] and hung["misc"]["count"] == 0
    assert hung["misc"]["console_titles"][0]["title"] == "INFO: rcu detected stall in perf_ioctl"
    assert "hrtimer_cancel" in hung["log_excerpt"] and hung["environment"]["misc"]["cpus"] == 4
    assert by_status["skip"]["status"] == "SKIP"
    assert {b["id"] for b in data["builds"]} == {t["build_id"] for t in data["tests"]}
    assert {c["id"] for c in data["checkouts"]} == {b["checkout_id"] for b in data["builds"]}


@pytest.mark.parametrize("verdict,accel,want", [
    ("VULNERABLE", "tcg", "FAIL"), ("CRASHED", "tcg", "FAIL"), ("NOT_REPRODUCED", "tcg", "PASS"),
    ("ERROR", "tcg", "MISS"),
    ("INCONCLUSIVE", "none", "SKIP"),  # nothing booted: the config or the architecture lacks what the path needs
    ("INCONCLUSIVE", "tcg", "ERROR"), (None, "", "MISS")])
def test_kcidb_status_mapping(verdict, accel, want):
    from harness.reports import kcidb
    assert kcidb.status({"status": "pass", "verdict": verdict, "vm": {"accel": accel}}) == want


def test_a_wrong_kcidb_document_fails_the_schema():
    from harness.reports import kcidb
    good = kcidb.from_matrix(recorded_doc())
    v = kcidb_validator()
    assert v.is_valid(good)
    wrong = [
        {**good, "version": {"major": 3, "minor": 0}},
        {**good, "tests": [{**good["tests"][0], "status": "VULNERABLE"}]},
        {**good, "tests": [{**good["tests"][0], "id": "no-origin-prefix"}]},
        {**good, "builds": [{k: v for k, v in good["builds"][0].items() if k != "checkout_id"}]},
        {**good, "tests": [{**good["tests"][0], "log_excerpt": "x" * 16385}]},
        {**good, "tests": [{**good["tests"][0], "misc": None}]},
        {**good, "extra": []},
    ]
    for doc in wrong:
        assert not v.is_valid(doc)


def test_a_merge_that_lacks_a_shard_fails_naming_its_cells(tmp_path):
    """Three shards of a run whose cells are a/x, a/y, b/x; the third shard
    (b/x) is lost: the merge of the other two names it as missing and fails."""
    ok = recorded_doc(expect="vulnerable")
    cell = ok["cells"][0]
    ids = ["debian:6.16.12/perf-refresh", "debian:6.17.8/perf-refresh", "debian:7.3.4/perf-refresh"]
    shard = lambda i: dict(ok, cells=[dict(cell, id=ids[i], kernel=ids[i].split("/")[0])], shards=[f"{i + 1}/3"],
                           kernels=[i.split("/")[0] for i in ids], selected=ids)  # noqa: E731
    merged = matrix_doc.merge([shard(0), shard(1)])
    missing = [c for c in merged["cells"] if c["status"] == "missing"]
    assert [c["id"] for c in missing] == ["debian:7.3.4/perf-refresh"] and merged["exit_code"] == 1
    assert "no merged shard ran this cell (merged shards: 1/3, 2/3)" in missing[0]["reason"]
    formats.write_all(tmp_path, merged)
    assert "MISSING: debian:7.3.4/perf-refresh" in text.matrix_table(merged)
    assert "not ok 3 debian:7.3.4/perf-refresh" in (tmp_path / "matrix.ktap").read_text()
    assert "debian_7.3.4_perf-refresh fail 0.0" in (tmp_path / "lava-cases.txt").read_text()
    assert matrix_doc.merge([shard(0), shard(1), shard(2)])["exit_code"] == 0


def test_a_cell_an_interrupted_shard_never_reached_fails_its_merge(tmp_path):
    """A shard that its CI job's timeout interrupted (SIGINT) marks its
    unstarted cells not-run: a merge of it fails, naming them, in every format."""
    ok = recorded_doc(expect="vulnerable")
    cell = ok["cells"][0]
    ran = dict(cell, id="debian:6.16.12/perf-refresh")
    unrun = dict(cell, id="debian:6.17.8/perf-refresh", kernel="debian:6.17.8", status="not-run", verdict=None,
                 line=None, reason="", failing=True)
    doc = dict(ok, cells=[ran, unrun], kernels=["debian:6.16.12", "debian:6.17.8"], interrupted=True,
               selected=[ran["id"], unrun["id"]])
    merged = matrix_doc.merge([doc])
    assert merged["exit_code"] == 1 and merged["failing"] == ["debian:6.17.8/perf-refresh"]
    formats.write_all(tmp_path, merged)
    assert "not ok 2 debian:6.17.8/perf-refresh" in (tmp_path / "matrix.ktap").read_text()
    assert "debian_6.17.8_perf-refresh fail" in (tmp_path / "lava-cases.txt").read_text()
    junit = etree.parse(str(tmp_path / "junit.xml"))
    assert junit.xpath("//testcase[@name='debian:6.17.8']/error") and not junit.xpath("//skipped")
    assert matrix.judge("vulnerable", None) == "not-run" and "not-run" in matrix.FAILING


def test_a_directory_of_syzkaller_reproducers_is_a_matrix_of_bugs(tmp_path):
    progs = REPO / "tests" / "fixtures" / "syzkaller-programs"
    with pytest.raises(matrix.MatrixError, match="--kernel"):
        matrix_file.load(progs)
    m = matrix_file.load(progs, kernels=["debian:6.1.170", "debian:7.3.4"], duration=30)
    assert m.reproducers == ["syz-bbbb00000000", "syz-afaf00000000", "syz-adad00000000", "syz-aeae00000000",
                             "syz-ffff00000000", "syz-a2a200000000", "syz-dddd00000000", "syz-cccc00000000",
                             "syz-acac00000000", "syz-a1a100000000", "syz-abab00000000", "syz-aaaa00000000",
                             "syz-eeee00000000", "syz-a0a000000000"]
    assert len(m.cells) == 28 and all(c.duration == 30 and c.spec.endswith(".c") for c in m.cells)
    f = tmp_path / "m.toml"
    f.write_text(f'[[reproducer]]\ndir = "{progs}"\nstatus = ["open"]\nbugs = ["aaaa", "dddd"]\n'
                 '[[kernel]]\nspec = "debian:6.1.170"\n')
    assert matrix_file.load(f).reproducers == ["syz-dddd00000000", "syz-aaaa00000000"]
    f.write_text(f'[[reproducer]]\ndir = "{progs}"\nbugs = ["9999"]\n[[kernel]]\nspec = "debian:6.1.170"\n')
    with pytest.raises(matrix.MatrixError, match="no syzkaller reproducer"):
        matrix_file.load(f)
    # one row per bug in the reports, each kernel's answer as a maintainer asks it
    doc = matrix_doc.matrix_doc(m, [], tmp_path, "id", None, 0.0, 1, 1)
    assert doc["bugs"]["syz-aaaa00000000"]["title"] == "INFO: task hung in pipe_write"
    doc["cells"] = [{"kernel": "debian:6.1.170", "reproducer": "syz-aaaa00000000", "verdict": "VULNERABLE",
                     "status": "pass", "failing": False, "line": "", "title": "INFO: task hung in pipe_write",
                     "syzbot": {"matched": {"how": "title", "ours": "INFO: task hung in pipe_write"}}},
                    {"kernel": "debian:7.3.4", "reproducer": "syz-aaaa00000000", "verdict": "VULNERABLE",
                     "status": "pass", "failing": False, "line": "", "title": "INFO: task hung in anon_pipe_write",
                     "syzbot": {"matched": None}},
                    {"kernel": "debian:6.1.170", "reproducer": "syz-cccc00000000", "verdict": "INCONCLUSIVE",
                     "status": "pass", "failing": False, "line": "",
                     "needs": ["socket family 12 (AF_DECnet): no module of this kernel answers net-pf-12"]},
                    {"kernel": "debian:7.3.4", "reproducer": "syz-cccc00000000", "verdict": "INCONCLUSIVE",
                     "status": "pass", "failing": False, "line": "",
                     "needs": ["/dev/raw-gadget: the program opens it; this kernel's config leaves it out "
                               "(CONFIG_USB_RAW_GADGET is not set); a test device kstall could not build for it: "
                               "its headers package is gone"]},
                    {"kernel": "debian:6.1.170", "reproducer": "syz-bbbb00000000", "verdict": "NOT_REPRODUCED",
                     "status": "pass", "failing": False, "line": "", "duration_s": 300.2}]
    table = text.matrix_table(doc | {"totals": {"pass": 4}, "wall_s": 1})
    assert "INFO: task hung in pipe_write  [https://syzkaller.appspot.com/bug?extid=aaaa0000000000000001]" in table
    assert "  debian:6.1.170: reproduced: INFO: task hung in pipe_write" in table and \
        "  debian:7.3.4: different: INFO: task hung in anon_pipe_write" in table
    # a need says its kind: an answer about the kernel, or a test device kstall could not build
    assert "not in the kernel: socket family 12 (AF_DECnet)" in table and "not reproduced (clean, 300 s)" in table
    assert "test device not built: /dev/raw-gadget" in table
    assert "debian:6.1.170: reproduced 1, not reproduced 1, not in the kernel 1" in table


def test_syzbots_table_says_starved_weaker_and_the_record_beside_each_cell(tmp_path):
    """One table a kernel team reads at a glance: a run the OOM killer starved
    is never 'not reproduced', a weaker clean run says why, and a reproduced
    bug whose fix the changelog lists says that the two disagree."""
    progs = REPO / "tests" / "fixtures" / "syzkaller-programs"
    m = matrix_file.load(progs, kernels=["debian:6.1.170", "debian:6.12.118"], duration=120)
    doc = matrix_doc.matrix_doc(m, [], tmp_path, "id", None, 0.0, 1, 1)
    base = matrix_doc.cell_doc(matrix.CellResult(matrix.Cell("k", "r"), "pass"), tmp_path) | {"line": ""}
    starved = {"mostly": True, "why": "starved for 150 of 193 s",
               "events": ["the OOM killer killed 520 tasks (in 150 s)"]}
    doc["cells"] = [
        base | {"kernel": "debian:6.1.170", "reproducer": "syz-aaaa00000000", "verdict": "INCONCLUSIVE",
                "health": starved, "id": "a1"},
        base | {"kernel": "debian:6.12.118", "reproducer": "syz-aaaa00000000", "verdict": "NOT_REPRODUCED",
                "duration_s": 120.4, "id": "a2", "prediction": {"status": "unknown"},
                "health": {"mostly": False, "events": ["the OOM killer killed 3 tasks (in 2 s)"]}},
        base | {"kernel": "debian:6.1.170", "reproducer": "syz-bbbb00000000", "verdict": "VULNERABLE",
                "id": "b1", "prediction": {"status": "fixed"}, "tries": "3/3",
                "syzbot": {"matched": {"how": "stack", "ours": "INFO: task hung in do_rmdir"}}}]
    table = text.matrix_table(doc | {"totals": {"pass": 3}, "wall_s": 1})
    assert "debian:6.1.170: starved (starved for 150 of 193 s: the OOM killer killed 520 tasks (in 150 s))" in table
    assert "debian:6.12.118: not reproduced (weaker: the OOM killer killed 3 tasks (in 2 s), 120 s) " \
        "[record: unknown]" in table
    assert "reproduced: INFO: task hung in do_rmdir (stack) 3/3 [record: fixed] (disagrees: the changelog " \
        "lists the fix)" in table
    assert "debian:6.1.170: reproduced 1, starved 1" in table and "debian:6.12.118: not reproduced 1" in table
    md = markdown.render(doc | {"totals": {"pass": 3}, "wall_s": 1})
    assert "- debian:6.1.170: reproduced 1, starved 1" in md and "| starved (starved for 150" in md
    page = html.render(doc | {"totals": {"pass": 3}, "wall_s": 1, "started": "", "finished": "",
                              "host": {"cores": 2, "jobs": 1}})
    assert 'id="syzbot"' in page and 'data-outcome="starved"' in page and 'id="grid"' not in page


def test_summary_md_shows_titles_and_program_text_as_written_never_as_markup(tmp_path):
    """A syzbot title, a reason or a kernel's name is text from outside:
    a '|' in it split its table row, and '<b>' or '[x](y)' rendered."""
    progs = REPO / "tests" / "fixtures" / "syzkaller-programs"
    m = matrix_file.load(progs, kernels=["debian:6.1.170"], duration=30)
    doc = matrix_doc.matrix_doc(m, [], tmp_path, "id", None, 0.0, 1, 1)
    doc["bugs"]["syz-aaaa00000000"] |= {"title": "INFO: task hung in a|b <img src=x> [x](javascript:y)",
                                         "link": "javascript:alert(1)"}
    base = matrix_doc.cell_doc(matrix.CellResult(matrix.Cell("k", "r"), "pass"), tmp_path) | {"line": ""}
    doc["cells"] = [base | {"kernel": "debian:6.1.170", "reproducer": "syz-aaaa00000000", "verdict": "VULNERABLE",
                            "id": "a|1`", "status": "regression", "failing": True, "expect": "NOT_REPRODUCED",
                            "line": "VULNERABLE: a different hang: x | y\n| forged | row |",
                            "syzbot": {"matched": None}}]
    md = markdown.render(doc | {"totals": {"regression": 1}, "wall_s": 1})
    row = next(l for l in md.splitlines() if l.startswith("| [aaaa"))
    assert len(re.findall(r"(?<!\\)\|", row)) == 4, row  # bug, title, one kernel: no cell split by its text
    assert "a\\|b \\<img src=x\\> \\[x\\](javascript:y)" in row and "](javascript" not in row.split(" | ")[0]
    assert "| forged | row |" not in md and "`a|1'`" in md


def test_each_kernel_has_a_page_its_open_syzbot_hangs_first(tmp_path):
    """A kernel team's question, per kernel: which of syzbot's hangs are
    still open here (each line with the bug's id and "open", its evidence
    and what the record says of the fix), which other hangs came, which did
    not come back, and what could not be run, and why."""
    progs = REPO / "tests" / "fixtures" / "syzkaller-programs"
    # 7.3.4: a kernel whose cells the run left out (--only, a shard) has no answer, not "none open"
    m = matrix_file.load(progs, kernels=["debian:6.1.170", "debian:6.12.118", "debian:7.3.4"], duration=120)
    doc = matrix_doc.matrix_doc(m, [], tmp_path, "id", None, 0.0, 1, 1)
    base = matrix_doc.cell_doc(matrix.CellResult(matrix.Cell("k", "r"), "pass"), tmp_path) | {"line": ""}
    doc["cells"] = [
        base | {"kernel": "debian:6.1.170", "reproducer": "syz-aaaa00000000", "verdict": "VULNERABLE", "id": "a1",
                "syzbot": {"matched": {"how": "title", "ours": "INFO: task hung in pipe_write"}},
                "console_titles": [{"title": "INFO: task hung in pipe_write", "count": 3}],
                "prediction": {"status": "affected", "reasons": ["changelog: does not list the fix \"pipe: x\""]}},
        base | {"kernel": "debian:6.12.118", "reproducer": "syz-aaaa00000000", "verdict": "NOT_REPRODUCED",
                "id": "a2", "duration_s": 120.0},
        base | {"kernel": "debian:6.1.170", "reproducer": "syz-a1a100000000", "verdict": "INCONCLUSIVE", "id": "b1",
                "needs": ["/dev/sequencer: the program opens it; this kernel's config leaves it out "
                          "(CONFIG_SND_SEQUENCER_OSS is not set)"]}]
    pages = dict(views.per_kernel(doc | {"totals": {"pass": 3}, "wall_s": 1}))
    [line] = pages["debian:6.1.170"]["open"]
    assert line.startswith("aaaa00000000 open: INFO: task hung in pipe_write (reproduced: INFO: task hung in "
                           "pipe_write; kernel reported: INFO: task hung in pipe_write (x3); record: affected, "
                           "changelog: does not list the fix"), line
    assert pages["debian:6.1.170"]["not run"] == ["a1a100000000: INFO: task hung in snd_seq_oss_kstall_test: "
                                                  "not in the kernel: /dev/sequencer"]
    assert pages["debian:6.12.118"]["open"] == [] and pages["debian:6.12.118"]["not reproduced"]
    md = markdown.render(doc | {"totals": {"pass": 3}, "wall_s": 1})
    assert "#### debian:6.1.170\n\n- aaaa00000000 open: INFO: task hung in pipe" in md
    assert "#### debian:6.12.118\n\n- no syzbot hang open here\n- not reproduced (1): aaaa00000000" in md
    assert "#### debian:7.3.4\n\n- none of syzbot's bugs ran here in this run" in md
    only_unanswered = {s: [] for s in views.PAGE_SECTIONS} | {"not run": ["a1a100000000: ERROR"]}
    assert views.nothing_open(only_unanswered) == "no syzbot bug ran to an answer here"
    page = html.render(doc | {"totals": {"pass": 3}, "wall_s": 1, "started": "", "finished": "",
                              "host": {"cores": 2, "jobs": 1}})
    assert '<li class="open">aaaa00000000 open: INFO: task hung in pipe_write' in page


def test_a_kernel_page_says_which_bugs_its_release_line_fixed_and_where(tmp_path):
    """A bug that hung an older kernel of a release line and not a newer one
    is fixed there: in the version the matrix file's fixed_in names (a
    bisection's answer), else between the two kernels. An open one names the
    upstream fix syzbot's record gives, the change a backport would take."""
    progs = REPO / "tests" / "fixtures" / "syzkaller-programs"
    kernels = ["debian:6.1.170", "debian:6.1.192", "debian:6.12.118", "debian:6.12.95"]
    m = matrix_file.load(progs, kernels=kernels, duration=120)
    m.about["syz-aaaa00000000"] = {"fixed_in": ["debian:6.12.100"], "fix": "pipe: wake the writer"}
    doc = matrix_doc.matrix_doc(m, [], tmp_path, "id", None, 0.0, 1, 1)
    base = matrix_doc.cell_doc(matrix.CellResult(matrix.Cell("k", "r"), "pass"), tmp_path) | {"line": ""}
    hung = {"verdict": "VULNERABLE", "syzbot": {"matched": {"how": "title", "ours": "INFO: task hung in pipe_write"},
                                                 "record": {"fix-commits": [{"title": "pipe: wake the writer"}]}}}
    clean = {"verdict": "NOT_REPRODUCED", "duration_s": 120.0}
    doc["cells"] = [base | {"kernel": k, "reproducer": "syz-aaaa00000000", "id": k} | (hung if k in hangs else clean)
                    for hangs in [("debian:6.1.170", "debian:6.12.95")] for k in kernels]
    doc |= {"totals": {"pass": 4}, "wall_s": 1}
    pages = dict(views.per_kernel(doc))
    assert "upstream fix: pipe: wake the writer (a backport candidate)" in pages["debian:6.1.170"]["open"][0]
    assert pages["debian:6.1.192"]["fixed"] == ["aaaa00000000 fixed: INFO: task hung in pipe_write (hung on "
                                                "debian:6.1.170, not here: fixed in between, unless a clean run "
                                                "(no P(miss)) missed it)"]
    assert pages["debian:6.12.118"]["fixed"] == ["aaaa00000000 fixed: INFO: task hung in pipe_write (fixed in "
                                                 "debian:6.12.100: pipe: wake the writer)"]
    assert pages["debian:6.12.95"]["open"] and not pages["debian:6.12.95"]["fixed"]
    assert "- aaaa00000000 fixed: INFO: task hung in pipe_write (fixed in debian:6.12.100" in markdown.render(doc)
    from harness.reports import formats, kcidb
    assert json.loads(formats.render("matrix.json", doc))["per_kernel"]["debian:6.1.192"]["fixed"]
    pages_said = {t["misc"]["syzbot_page"] for t in kcidb.from_matrix(doc)["tests"]}
    assert pages_said == {"open", "fixed"}


def test_a_clean_kernel_between_two_that_hung_is_not_fixed_nor_a_fixed_in_a_later_hang_contradicts(tmp_path):
    progs = REPO / "tests" / "fixtures" / "syzkaller-programs"
    kernels = ["debian:6.1.170", "debian:6.1.176", "debian:6.1.192", "debian:6.19.14-rt"]
    m = matrix_file.load(progs, kernels=kernels, duration=120)
    m.about["syz-aaaa00000000"] = {"fixed_in": ["debian:6.1.100", "debian:6.19.10"]}
    doc = matrix_doc.matrix_doc(m, [], tmp_path, "id", None, 0.0, 1, 1)
    base = matrix_doc.cell_doc(matrix.CellResult(matrix.Cell("k", "r"), "pass"), tmp_path) | {"line": ""}
    hung = {"verdict": "VULNERABLE", "syzbot": {"matched": {"how": "title", "ours": "INFO: task hung in pipe_write"}}}
    clean = {"verdict": "NOT_REPRODUCED", "duration_s": 120.0}
    doc["cells"] = [base | {"kernel": k, "reproducer": "syz-aaaa00000000", "id": k}
                    | (hung if k in ("debian:6.1.170", "debian:6.1.192") else clean) for k in kernels]
    pages = dict(views.per_kernel(doc | {"totals": {"pass": 4}, "wall_s": 1}))
    # 6.1.192 hung again: 6.1.176's clean run fixed nothing; 6.1.100 is no fix when 6.1.170 hung
    assert not pages["debian:6.1.176"]["fixed"] and pages["debian:6.1.176"]["not reproduced"]
    assert pages["debian:6.1.192"]["open"]
    # the -rt flavour is a line of its own: a generic kernel's fixed_in is not its
    assert views.line_version("debian:6.19.14-rt") == ("6.19-rt", (6, 19, 14))
    assert views.line_version("debian:6.1.176-rt-arm64") == ("6.1-rt-arm64", (6, 1, 176))
    assert not pages["debian:6.19.14-rt"]["fixed"]


def test_a_matrix_files_words_on_a_bug_reach_its_reports(tmp_path):
    """[[reproducer]] fixed_in and fix: checked, and carried into matrix.json."""
    f = tmp_path / "m.toml"
    f.write_text('[[reproducer]]\nname = "perf-refresh"\nfixed_in = ["debian:6.1.176"]\nfix = "perf: x"\n'
                 '[[kernel]]\nspec = "debian:6.1.170"\n')
    m = matrix_file.load(f)
    assert m.about == {"perf-refresh": {"fixed_in": ["debian:6.1.176"], "fix": "perf: x"}}
    assert matrix_doc.matrix_doc(m, [], tmp_path, "id", None, 0.0, 1, 1)["about"] == m.about
    f.write_text(f.read_text().replace('["debian:6.1.176"]', '"debian:6.1.176"'))
    with pytest.raises(matrix.MatrixError, match="fixed_in is a list"):
        matrix_file.load(f)
