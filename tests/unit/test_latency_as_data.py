# SPDX-License-Identifier: GPL-2.0
"""A new latency reproducer is a data file and a program: nothing in Python
names bpf-ringbuf's paths. tests/fixtures/repro/io-latency.toml declares two
paths of a reproducer that does not exist; its lines are fed to the watch
as the agent would forward them, and the verdict and every report name its
paths, its measure and its signature."""
from pathlib import Path
from types import SimpleNamespace

from recorded import FIXTURES

from harness.analysis import expect, latency
from harness.analysis.outcome import Outcome
from harness.analysis.record import Evidence, RunRecord
from harness.analysis.decide import decide
from harness.analysis.findings import Findings
from harness.base import reproducers
from harness.drivers.plan import repro_arguments
from harness.drivers.options import Options
from harness.guest.watch import Limits, Watch
from harness.reports import formats, matrix_doc

REPRO = reproducers.from_file(FIXTURES / "repro" / "io-latency.toml")
LINES = ["KTAP version 1", "1..1",
         "# progress count=40 elapsed_ms=100 rd_max_ns=1200000 rd_over=0 wr_max_ns=3000000 wr_over=0 over=0",
         "# progress count=90 elapsed_ms=200 rd_max_ns=31000000 rd_over=1 wr_max_ns=95000000 wr_over=1 over=2"]


def watched() -> Watch:
    vm = SimpleNamespace(console=None, agent=None, syms=None, started_at=0.0, cfg=SimpleNamespace(cpus=2),
                         alive=lambda: True, stopped=lambda: False)
    w = Watch(vm, Limits(stalls=REPRO.stall.min_stalls, stall_measure=REPRO.stall.measure), patterns=None)
    w.agent.hello_at = w.agent.ready_at = w.go_at = 0.5  # past the gate
    for line in LINES:
        w.agent.feed(line, 1.0)
    return w


def test_the_data_file_declares_the_paths_and_their_arguments():
    assert REPRO.stall_thresholds() == {"read": 20.0, "write": 80.0}
    args = repro_arguments(REPRO, Options(), 100, 30)
    assert args[args.index("--read-stall-ms") + 1] == "20" and args[args.index("--write-stall-ms") + 1] == "80"


def test_the_watch_the_verdict_and_the_reports_pick_it_up(tmp_path):
    w = watched()
    out = w._hung(2.0)
    assert out.kind == "stall" and "2 request(s) past its stall threshold" in out.detail
    quiet = lambda path, ms: 1.0  # noqa: E731 - a host-wait gauge that read a quiet host
    stall = latency.evidence(REPRO.stall, w.agent.ktap.lines, w.agent.progress, quiet)
    assert [s["path"] for s in stall["stalled"]] == []  # one over each path: below min_stalls = 2
    w.agent.feed("# progress count=95 rd_max_ns=52000000 rd_over=3 wr_max_ns=95000000 wr_over=1 over=4", 1.5)
    stall = latency.evidence(REPRO.stall, w.agent.ktap.lines, w.agent.progress, quiet)
    assert [s["title"] for s in stall["stalled"]] == ["read request"]
    assert stall["text"] == "read request stalled 52.0 ms (3 requests >= 20 ms)"
    v = decide(Findings(Outcome("stall", out.detail, 2.0), REPRO, count=w.agent.count, stall=stall))
    assert v.verdict == "VULNERABLE" and v.signature == "io-request-stall" and v.summary == stall["text"]

    rec = RunRecord(id="t", verdict=v, outcome=Outcome("stall", out.detail, 2.0),
                    kernel={"canonical": "debian:7.3.4+deb13-amd64"}, reproducer={"name": REPRO.name}, vm={},
                    evidence=Evidence(count=w.agent.count, count_name=REPRO.count_name, stalls=stall))
    assert rec.stalled_by_measurement and rec.to_json()["evidence"]["stalls"]["titles"]["write"] == "write request"
    cell = expect.Cell("debian:7.3.4", REPRO.name, expect="not_reproduced")
    m = expect.Matrix(Path("m.toml"), [cell.kernel], [cell.reproducer], [cell])
    doc = matrix_doc.matrix_doc(m, [expect.CellResult(cell, expect.judge_cell(cell, v.verdict), rec)], tmp_path,
                                "t", None, 0.0, 1, 2)
    formats.write_all(tmp_path, doc)
    html = (tmp_path / "report.html").read_text()
    assert "read request stalled 52.0 ms (3 requests &gt;= 20 ms)" in html
    assert "read request stalled 52.0 ms" in (tmp_path / "summary.md").read_text()
    assert "io-request-stall" in (tmp_path / "kcidb.json").read_text()
    assert "not ok 1 debian:7.3.4/io-latency" in (tmp_path / "matrix.ktap").read_text()


def test_its_histograms_are_charted_with_its_titles():
    lines = ["# stats path=read cpu=0 requests=50 max_ns=25000000 over=3 sum_ns=90000000",
             "# hist path=read cpu=0 20=40 24=10",
             "# stats path=write cpu=1 requests=50 max_ns=2000000 over=0 sum_ns=40000000",
             "# hist path=write cpu=1 20=50"]
    data = latency.parse(lines, REPRO.stall)
    assert data["paths"]["read"]["requests"] == 50 and data["paths"]["read"]["mean_ns"] == 1800000
    chart = latency.svg(data, REPRO.stall_thresholds(), REPRO.stall.titles(), "io: request latency")
    assert "read request" in chart and "write request" in chart and "stall threshold 80 ms" in chart
