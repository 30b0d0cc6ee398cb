# SPDX-License-Identifier: GPL-2.0
"""One resolved case: a verify reads the reproducer's files (its data file,
signatures, record and calibration) once, however many stages, attempts or
samples follow; a matrix reads each reproducer once for all its cells."""
from __future__ import annotations

from collections import Counter

import pytest

from harness.analysis import bug_record, classify, pmiss
from harness.base import reproducers
from harness.drivers import case, verify
from harness.drivers.options import Options

pytestmark = pytest.mark.e2e

READERS = ((reproducers, "from_file"), (classify, "load_signatures"), (pmiss, "load_files"), (bug_record, "of"))


@pytest.fixture
def reads(monkeypatch) -> Counter:
    counts: Counter = Counter()
    for module, name in READERS:
        real = getattr(module, name)

        def counted(*args, _real=real, _name=name, **kw):
            counts[_name] += 1
            return _real(*args, **kw)
        monkeypatch.setattr(module, name, counted)
    return counts


def test_a_verify_reads_the_reproducers_files_once(tmp_path, reads):
    res = verify.verify("debian:6.16.12", "perf-refresh", Options(results_root=tmp_path), lambda m: None)
    assert res.verdict.verdict == "VULNERABLE", res.verdict.reason  # a hang: debugger, classifier, decide all ran
    # its own data file, its signatures (kstall's: perf-refresh keeps none of its own), record, calibrations
    assert reads == Counter(from_file=1, load_signatures=1, of=1, load_files=1), reads


def test_a_loaded_reproducer_is_read_no_more_by_the_runs_that_use_it(tmp_path, reads):
    loaded = case.load("signal-malloc", lambda m: None)
    before = Counter(reads)
    for _ in range(2):
        verify.verify("debian:6.16.12", loaded, Options(results_root=tmp_path), lambda m: None)
    assert reads == before, reads - before
