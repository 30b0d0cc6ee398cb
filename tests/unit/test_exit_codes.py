# SPDX-License-Identifier: GPL-2.0
"""An error kstall did not foresee is never a verdict: every command exits 4
(ERROR), and bisect-step 128, which stops `git bisect run` (its 1-127 mean
"bad")."""
import pytest

from harness import cli


class Injected(RuntimeError):
    pass


def boom(*args, **kwargs):
    raise Injected("injected for the test")


@pytest.mark.parametrize("target,argv,want", [
    ("harness.drivers.verify.verify", ["verify", "debian:7.3.4", "perf-refresh"], 4),
    ("harness.drivers.matrix.Runner.run", ["matrix", "ci/matrix.toml"], 4),
    ("harness.drivers.bisect.git.bisect_step", ["bisect-step", "perf-refresh"], 128),
    ("harness.drivers.threads.examine", ["threads", "1"], 4),
    ("harness.base.leftovers.sweep", ["verify", "debian:7.3.4", "perf-refresh"], 4),
])
def test_an_internal_error_is_an_error_exit(monkeypatch, tmp_path, capsys, target, argv, want):
    monkeypatch.setattr(target, boom)
    monkeypatch.chdir(cli.paths.REPO)
    assert cli.main([*argv, *(["--results", str(tmp_path)] if argv[0] in ("verify", "matrix") else [])]) == want
    err = capsys.readouterr().err
    assert "internal error: Injected: injected for the test" in err and "Traceback" in err
