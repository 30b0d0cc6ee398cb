# SPDX-License-Identifier: GPL-2.0
"""The verdict predicted from a bug's published record and a package's
changelog (harness/analysis/bug_record.py, images/kernels/changelog.py): the records
are the kernel CVE team's, the changelog an excerpt of Debian 6.1.192-2's."""
import gzip

import pytest
from recorded import FIXTURES

from harness.analysis import bug_record
from harness.analysis.bug_record import AFFECTED, FIXED, NOT_INTRODUCED, UNKNOWN, BugRecord
from harness.base import reproducers
from images.kernels import changelog

EXCERPT = FIXTURES / "changelogs" / "linux-image-6.1.0-56-amd64_6.1.192-2.excerpt"
# CVE-2024-42239.dyad: bpf_timer callbacks cancelling each other; no fix on 6.1.y
BPF_TIMER = BugRecord("CVE-2024-42239", "bpf: Fail bpf_timer_cancel when callback is being cancelled", "",
                      BugRecord.parse_lines(["5.15:b00628b1c7d5:6.6.41:936983051868",
                                             "5.15:b00628b1c7d5:6.9.10:3e4e8178a866",
                                             "5.15:b00628b1c7d5:6.10:d4523831f07a"], "test"))
# CVE-2025-37747.dyad: the culprit backported to 6.1.103 with no fix there
SIGTRAP = BugRecord("CVE-2025-37747", "perf: Fix hang while freeing sigtrap event", "",
                    BugRecord.parse_lines(["6.11:3a5465418f5f:6.12.24:fa1827fa968c",
                                           "6.11:3a5465418f5f:6.15:56799bc03565",
                                           "6.1.103:ed2c202dac55:0:0", "6.6.44:104e258a0040:0:0"], "test"))


def test_perf_refresh_record_predicts_what_verify_measures():
    rec = bug_record.of(reproducers.load("perf-refresh").record, "perf-refresh")
    assert rec and rec.cve == "CVE-2025-40327"
    expect = {"6.12.107": NOT_INTRODUCED, "6.16.3": NOT_INTRODUCED, "6.16.12": AFFECTED, "6.17.7": AFFECTED,
              "6.17.8": FIXED, "6.18.15": FIXED, "7.3.4": FIXED}
    assert {v: bug_record.predict(rec, v, None).status for v in expect} == expect
    p = bug_record.predict(rec, "6.16.12", None)
    assert any("6.16.8 (b2de0c9ce8e5)" in r for r in p.reasons) and any("no fix on 6.16.y" in r for r in p.reasons)


def test_changelog_subjects_wrapped_and_without_their_cve_trailers():
    lines = changelog.parse(EXCERPT.read_text())
    assert lines[0].version == "6.1.192+2" and lines[-1].version == "6.1.190-1"
    found = changelog.find(lines, "bpf: Fail bpf_timer_cancel when callback is being cancelled")
    assert found and found.line.version == "6.1.192-1" and found.reverted is None
    assert found.line.text.endswith("(CVE-2024-42239)")  # it was wrapped onto a second line
    assert changelog.find(lines, "PERF: fix hang while  freeing sigtrap event")  # case and spaces
    assert changelog.find(lines, "perf: Fix the POLL_HUP delivery breakage") is None


def test_a_distro_backport_the_record_does_not_know_turns_affected_into_fixed(tmp_path):
    gz = tmp_path / "changelog.gz"
    gz.write_bytes(gzip.compress(EXCERPT.read_bytes()))
    log = changelog.load(gz)
    assert bug_record.predict(BPF_TIMER, "6.1.192", None).status == AFFECTED  # the record alone
    p = bug_record.predict(BPF_TIMER, "6.1.192", log)
    assert p.status == FIXED and any("lists the fix" in r and "6.1.192-1" in r for r in p.reasons)
    assert bug_record.predict(SIGTRAP, "6.1.192", log).status == FIXED
    assert bug_record.predict(SIGTRAP, "6.1.190", []).status == AFFECTED  # a changelog without the fix
    assert bug_record.predict(SIGTRAP, "6.1.100", []).status == NOT_INTRODUCED  # before the 6.1.103 backport
    assert bug_record.predict(SIGTRAP, "6.12.43", []).status == FIXED
    assert bug_record.predict(BPF_TIMER, "6.12.43", None).status == FIXED  # mainline 6.10 has the fix


def test_a_reverted_fix_is_not_a_fix_and_a_culprit_backport_is_affected():
    text = ("linux (6.1.200-1) bookworm; urgency=medium\n\n  * New upstream stable update:\n"
            "    - Revert \"bpf: Fail bpf_timer_cancel when callback is being cancelled\"\n\n"
            " -- A <a@b>  Mon, 01 Jan 2027 00:00:00 +0000\n\n" + EXCERPT.read_text())
    p = bug_record.predict(BPF_TIMER, "6.1.200", changelog.parse(text))
    assert p.status == AFFECTED and any("was reverted" in r for r in p.reasons)
    culprit = BugRecord("CVE-0000-0001", "x: the fix", "bpf: Defer work in bpf_timer_cancel_and_free",
                        BugRecord.parse_lines(["6.5:aaaaaaaaaaaa:6.6:bbbbbbbbbbbb"], "test"))
    p = bug_record.predict(culprit, "6.1.192", changelog.parse(EXCERPT.read_text()))
    assert p.status == AFFECTED and any("carries the culprit" in r for r in p.reasons)


def test_unknowns_and_bad_records():
    assert bug_record.predict(None, "6.1.192", None).status == UNKNOWN
    assert bug_record.predict(BPF_TIMER, None, None).status == UNKNOWN
    with pytest.raises(bug_record.RecordError, match="bad record line"):
        BugRecord.parse_lines(["6.1:abc:6.2"], "x")
    with pytest.raises(bug_record.RecordError, match="lacks 'fix'"):
        BugRecord.from_doc({"cve": "CVE-1-2", "lines": ["6.1:a:0:0"]}, "x")


def test_a_cve_from_a_vulns_clone(tmp_path):
    d = tmp_path / "cve" / "published" / "2024"
    d.mkdir(parents=True)
    (d / "CVE-2024-42239.dyad").write_text("# dyad\n5.15:b00628b1c7d595ae:6.10:d4523831f07a267a\n")
    (d / "CVE-2024-42239.mbox").write_text("Subject: CVE-2024-42239: bpf: Fail bpf_timer_cancel when callback "
                                           "is being cancelled\n")
    rec = BugRecord.from_vulns(tmp_path, "CVE-2024-42239")
    assert rec.fix_subject.startswith("bpf: Fail") and rec.branches[0].culprit == "b00628b1c7d5"
    with pytest.raises(bug_record.RecordError, match="no CVE-2024-99999.dyad"):
        BugRecord.from_vulns(tmp_path, "CVE-2024-99999")
    assert bug_record.agreement(AFFECTED, "VULNERABLE") == "agrees"
    assert bug_record.agreement(FIXED, "VULNERABLE") == "disagrees"
    assert bug_record.agreement(UNKNOWN, "VULNERABLE") == ""


def test_a_matrix_cell_expecting_the_record_disagrees_as_its_own_status():
    from harness.analysis.expect import FAILING, Cell, judge_cell
    c = Cell("debian:6.1.192", "bpf-timer", expect="record")
    assert judge_cell(c, "NOT_REPRODUCED", {"status": FIXED}) == "pass"
    assert judge_cell(c, "VULNERABLE", {"status": AFFECTED}) == "pass"
    assert judge_cell(c, "VULNERABLE", {"status": NOT_INTRODUCED}) == "disagrees" and "disagrees" in FAILING
    assert judge_cell(c, "NOT_REPRODUCED", {"status": AFFECTED}) == "disagrees"
    assert judge_cell(c, "VULNERABLE", {"status": UNKNOWN}) == "pass"  # nothing predicted: anything but ERROR
    assert judge_cell(c, "ERROR", {"status": AFFECTED}) == "error"
    assert judge_cell(Cell("k", "r", expect="vulnerable"), "NOT_REPRODUCED", {"status": FIXED}) == "unexpected-pass"


def test_the_record_puts_a_version_bisection_s_change_within_a_line_or_at_a_line_crossing():
    refresh = bug_record.of(reproducers.load("perf-refresh").record, "perf-refresh")
    within = bug_record.expected_change(refresh, ["6.12.107", "6.12.118", "6.16.3", "6.16.12"])
    assert (within.last_old, within.first_new, within.crosses_line) == ("6.16.3", "6.16.12", False)
    assert "first affected: 6.16.12" in within.text() and "6.16.8 (b2de0c9ce8e5)" in within.text()
    # the 6.16 line never got the fix: the change is where the range leaves it
    crossing = bug_record.expected_change(refresh, ["6.16.12", "6.17.8", "6.17.13"])
    assert (crossing.last_old, crossing.first_new, crossing.crosses_line) == ("6.16.12", "6.17.8", True)
    assert "no fix on 6.16.y" in crossing.text() and "6.17.8 (6b8c51281164)" in crossing.text()
    # by the record alone 6.1.y is never fixed; Debian's 6.1.192 is (its changelog says so, not the record)
    sigtrap = bug_record.expected_change(SIGTRAP, ["6.1.190", "6.1.192", "6.12.43"])
    assert (sigtrap.first_new, sigtrap.crosses_line) == ("6.12.43", True)
    same = bug_record.expected_change(SIGTRAP, ["6.12.43", "6.12.118"])
    assert not same.first_new and "no change from 6.12.43 (fixed) to 6.12.118 (fixed)" in same.text()


RPM_CHANGELOG = """\
* Mon Nov 10 2025 Fedora Kernel Team <kernel-team@fedoraproject.org> [6.17.8-300]
- perf/core: Fix system hang caused by cpu-clock usage (Peter Zijlstra)
- Linux v6.17.8

* Fri Oct 24 2025 Fedora Kernel Team <kernel-team@fedoraproject.org> - 6.16.12-200
- Linux v6.16.12
- perf: Fix the POLL_HUP delivery breakage (Peter Zijlstra)
"""


def test_an_rpm_changelog_is_read_with_its_authors_left_out():
    lines = changelog.parse_rpm(RPM_CHANGELOG)
    assert [(l.version, l.subject) for l in lines] == [
        ("6.17.8-300", "perf/core: Fix system hang caused by cpu-clock usage"), ("6.17.8-300", "Linux v6.17.8"),
        ("6.16.12-200", "Linux v6.16.12"), ("6.16.12-200", "perf: Fix the POLL_HUP delivery breakage")]
    rec = bug_record.of(reproducers.load("perf-refresh").record, "perf-refresh")
    p = bug_record.predict(rec, "6.17.8", lines)
    assert p.status == FIXED and any('lists the fix "perf/core: Fix system hang caused by cpu-clock usage' in r
                                     for r in p.reasons)


def test_an_rpm_kernel_keeps_its_packages_changelog(tmp_path):
    import shutil
    import subprocess
    from images.kernels import cached, rpm
    from images.kernels.kernel import Kernel
    if not shutil.which("rpmbuild"):
        pytest.skip("rpmbuild is not installed")
    spec = tmp_path / "k.spec"
    spec.write_text("Name: kernel-core\nVersion: 6.17.8\nRelease: 300\nSummary: s\nLicense: GPL\nBuildArch: noarch\n"
                    "%description\nd\n%files\n%changelog\n" + RPM_CHANGELOG)
    subprocess.run(["rpmbuild", "-bb", "--quiet", "--define", f"_topdir {tmp_path / 'top'}", str(spec)],
                   check=True, capture_output=True, timeout=120)
    package = next((tmp_path / "top" / "RPMS").rglob("*.rpm"))
    d = tmp_path / "kernel"
    d.mkdir()
    k = Kernel("rpm:x", "rpm:6.17.8", d / "vmlinuz", "0", upstream="6.17.8", origin={"files": [str(package)]})
    cached.write_meta(d, k)
    path = rpm.changelog_of(k)
    assert path == d / "changelog.rpm" and changelog.load(path)[0].subject.startswith("perf/core: Fix system hang")
    assert cached.load_meta(d, "rpm:x").changelog == path  # kept: the next explain reads no package


def test_a_debian_package_without_a_changelog_is_not_fetched_again_to_find_out(tmp_path, monkeypatch):
    from images.kernels import cached, debian
    from images.kernels.kernel import Kernel

    def no_fetch(*args, **kwargs):
        raise AssertionError("fetched the package again")
    monkeypatch.setattr(debian, "fetch_file", no_fetch)
    d = tmp_path / "kernel"
    d.mkdir()
    k = Kernel("debian:x", "debian:6.18.15+deb13-amd64", d / "vmlinuz", "0", upstream="6.18.15",
               origin={"image_package": "linux-image-6.18.15+deb13-amd64"})
    cached.write_meta(d, k)
    (d / debian.NO_CHANGELOG).write_text("no changelog in linux-image-6.18.15+deb13-amd64\n")
    assert debian.changelog_of(k) is None


def test_a_changelog_is_parsed_once_and_again_when_it_changes(tmp_path, monkeypatch):
    gz = tmp_path / "changelog.gz"
    gz.write_bytes(gzip.compress(EXCERPT.read_bytes()))
    first = changelog.load(gz)
    parsed = []
    real = changelog.parse
    monkeypatch.setattr(changelog, "parse", lambda text: parsed.append(1) or real(text))
    assert changelog.load(gz) == first and parsed == []  # the parsed copy beside it
    gz.write_bytes(gzip.compress(EXCERPT.read_bytes() + b"\n"))
    assert changelog.load(gz) == first and parsed == [1]  # a changed file is read again


def test_a_changelog_answers_a_subject_from_its_memo_until_it_changes(tmp_path, monkeypatch):
    gz = tmp_path / "changelog.gz"
    gz.write_bytes(gzip.compress(EXCERPT.read_bytes()))
    subject = "bpf: Fail bpf_timer_cancel when callback is being cancelled"
    expected = changelog.find(changelog.load(gz), subject)
    assert expected and changelog.find(changelog.Lookup(gz), subject) == expected
    assert changelog.find(changelog.Lookup(gz), "perf: Fix the POLL_HUP delivery breakage") is None
    loads = []
    real = changelog.load
    monkeypatch.setattr(changelog, "load", lambda path: loads.append(1) or real(path))
    again = changelog.Lookup(gz)
    assert again.find(subject) == expected and again.find("perf: Fix the POLL_HUP delivery breakage") is None
    assert loads == []  # both answers (one of them "not listed") from the memo
    gz.write_bytes(gzip.compress(EXCERPT.read_bytes().replace(b"being cancelled", b"being canceled")))
    assert changelog.Lookup(gz).find(subject) is None and loads == [1]  # a changed changelog is read again
