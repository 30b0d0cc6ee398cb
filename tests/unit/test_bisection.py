# SPDX-License-Identifier: GPL-2.0
"""The bisection search, the git bisect glue and build: specs, without boots
or builds (the search is driven by a table of states; git output is recorded)."""
import subprocess
from pathlib import Path

import pytest

from harness.base import reproducers
from harness.drivers.bisect import git as bisect_git
from harness import cli
from harness.commands import bisect as bisect_cmd
from harness.drivers.bisect.search import CLEAN, REPRODUCES, SKIP, Bisection, Step, TooManyErrors
from images.kernels import build as kbuild
from images.kernels.kernel import SpecError

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "git-bisect"


def table(states: dict[str, str]):
    tested = []

    def test(c: str) -> Step:
        tested.append(c)
        st = states[c]
        return Step(c, st, {"reproduces": "VULNERABLE", "clean": "NOT_REPRODUCED"}.get(st, "ERROR"),
                    error=st == SKIP)
    return test, tested


def versions(n):
    return [f"v{i}" for i in range(n)]


def test_regression_found_in_log_steps():
    c = versions(17)
    test, tested = table({v: CLEAN if i < 11 else REPRODUCES for i, v in enumerate(c)})
    out = Bisection(c, test).run()
    assert (out.direction, out.last_old, out.first_new) == ("regression", "v10", "v11")
    assert len(tested) <= 2 + 4  # both ends + ceil(log2 15)


def test_fix_hunt_uses_the_old_end_as_the_reproducing_term():
    c = versions(9)
    test, _ = table({v: REPRODUCES if i < 5 else CLEAN for i, v in enumerate(c)})
    out = Bisection(c, test).run()
    assert (out.direction, out.last_old, out.first_new) == ("fix", "v4", "v5")


def test_a_version_change_where_two_stable_lines_meet_names_no_first_version():
    from harness.drivers.bisect import debian as bisect_debian
    from harness.drivers.bisect.search import Outcome
    crossed = Outcome("fix", "6.16.12", "6.17.8")
    assert "crosses from the 6.16 line (last: 6.16.12) to the 6.17 line (first: 6.17.8)" in \
        bisect_debian.summary_line(crossed)
    assert "no first fixed version is named" in bisect_debian.crossing(crossed)
    within = Outcome("regression", "6.16.3", "6.16.12")
    assert not bisect_debian.crossing(within)
    assert bisect_debian.summary_line(within).startswith("last version without the hang: 6.16.3")


def test_ends_that_agree_stop_the_search():
    c = versions(5)
    test, tested = table({v: CLEAN for v in c})
    out = Bisection(c, test).run()
    assert out.direction == "none" and "both ends agree" in out.message and tested == ["v0", "v4"]


def test_a_skipped_step_is_stepped_around():
    c = versions(9)
    states = {v: CLEAN if i < 6 else REPRODUCES for i, v in enumerate(c)}
    states["v4"] = SKIP
    test, tested = table(states)
    out = Bisection(c, test, max_errors=5).run()
    assert (out.last_old, out.first_new) == ("v5", "v6") and "v4" in tested


def test_skips_next_to_the_boundary_leave_it_ambiguous():
    c = versions(5)
    states = {"v0": CLEAN, "v1": CLEAN, "v2": SKIP, "v3": REPRODUCES, "v4": REPRODUCES}
    test, _ = table(states)
    out = Bisection(c, test, max_errors=5).run()
    assert (out.last_old, out.first_new, out.skipped_between) == ("v1", "v3", ["v2"])


def test_too_many_errors_stop_with_the_reason():
    c = versions(9)
    states = {v: SKIP for v in c}
    states["v0"], states["v8"] = CLEAN, REPRODUCES
    test, _ = table(states)
    with pytest.raises(TooManyErrors, match="3 steps ended in ERROR"):
        Bisection(c, test, max_errors=3).run()


def test_resume_does_not_test_recorded_steps_again():
    c = versions(9)
    states = {v: CLEAN if i < 3 else REPRODUCES for i, v in enumerate(c)}
    test, tested = table(states)
    done = {v: Step(v, states[v], "x") for v in ("v0", "v8", "v4")}
    out = Bisection(c, test, done=done).run()
    assert (out.last_old, out.first_new) == ("v2", "v3") and not set(tested) & set(done)


def test_a_killed_debian_bisection_resumes_from_its_kept_directory_with_what_it_was_asked(tmp_path):
    import dataclasses
    import json
    from harness.drivers.bisect.debian import Resumed
    done = tmp_path / "20261126-bisect-debian-6.12.107-6.16.12-perf-refresh"
    done.mkdir()
    steps = [dataclasses.asdict(Step("6.16.12", REPRODUCES, "VULNERABLE")),
             dataclasses.asdict(Step("6.12.107", CLEAN, "NOT_REPRODUCED"))]
    (done / "bisect.json").write_text(json.dumps({"old": "6.12.107", "new": "6.16.12", "reproducer": "perf-refresh",
                                                  "steps": steps}))
    r = Resumed.load(tmp_path / f".{done.name}.incomplete")  # the name the sweep keeps a killed one under
    assert (r.directory, r.old, r.new, r.reproducer) == (done, "6.12.107", "6.16.12", "perf-refresh")
    assert set(r.steps) == {"6.16.12", "6.12.107"} and r.steps["6.16.12"].state == REPRODUCES
    with pytest.raises(FileNotFoundError, match="no bisect.json"):
        Resumed.load(tmp_path)


def test_a_bisections_runs_are_named_from_its_directory_and_found_after_its_rename(tmp_path):
    # bisect.json is written while the directory is .NAME.incomplete: a name
    # from / would point into a directory gone once the bisection ends
    import json
    from harness.drivers.bisect.debian import Resumed
    work = tmp_path / ".20261204-bisect-debian-6.1.170-6.1.192-syz-42986aeeddfd.incomplete"
    run = work / "runs" / "20261204-debian-6.1.0-47-amd64-syz-42986aeeddfd-6711"
    step = Step("6.1.170", REPRODUCES, "VULNERABLE", runs=[str(run), "/elsewhere/run-kept-by-hand"])
    saved = step.to_json(work)
    assert saved["runs"] == ["runs/20261204-debian-6.1.0-47-amd64-syz-42986aeeddfd-6711", "/elsewhere/run-kept-by-hand"]
    done = tmp_path / work.name[1:-len(".incomplete")]
    done.mkdir()
    (done / "bisect.json").write_text(json.dumps({"old": "6.1.170", "new": "6.1.192", "reproducer": "x.c",
                                                  "steps": [saved]}))
    assert Resumed.load(done).steps["6.1.170"].runs == [str(done / "runs" / run.name), "/elsewhere/run-kept-by-hand"]


def test_a_bisections_runs_are_found_through_a_symlinked_root_an_older_record_and_a_git_resume(tmp_path):
    import json
    real = tmp_path / "real"
    work = real / ".20261204-bisect-git-linux-a-b-x.incomplete"
    (work / "runs").mkdir(parents=True)
    (tmp_path / "link").symlink_to(real)
    seen = tmp_path / "link" / work.name  # the driver's name; a step process resolves its own
    step = Step("abc", CLEAN, "NOT_REPRODUCED", runs=[str(work / "runs" / "R1")])
    assert step.to_json(seen)["runs"] == ["runs/R1"]
    done = real / work.name[1:-len(".incomplete")]
    # a record written before its runs were named from the bisection's directory
    assert Step.from_json(step.to_json(), done).runs == [str(done / "runs" / "R1")]
    work.rename(done)
    (done / "bisect.json").write_text(json.dumps({"kind": "git", "steps": [step.to_json(work)]}))
    # a resumed git bisection goes on in a new directory: the old runs keep their place
    assert bisect_git.load(done)["steps"][0]["runs"] == [str(done / "runs" / "R1")]


def test_git_output_found_and_ambiguous():
    sha, amb = bisect_git.parse_result((FIXTURES / "found-fix-terms.txt").read_text())
    assert len(sha) == 40 and amb == []
    sha, amb = bisect_git.parse_result((FIXTURES / "ambiguous.txt").read_text())
    assert sha is None and len(amb) == 3 and all(len(a) == 40 for a in amb)


def test_step_exit_codes_follow_the_old_term():
    assert bisect_git.exit_for(Step("a", CLEAN, "NOT_REPRODUCED"), CLEAN) == 0
    assert bisect_git.exit_for(Step("a", REPRODUCES, "VULNERABLE"), CLEAN) == 1
    assert bisect_git.exit_for(Step("a", REPRODUCES, "VULNERABLE"), REPRODUCES) == 0
    assert bisect_git.exit_for(Step("a", CLEAN, "NOT_REPRODUCED"), REPRODUCES) == 1
    assert bisect_git.exit_for(Step("a", SKIP, "BUILD_FAILED"), CLEAN) == 125


def test_bisect_git_hands_its_options_on_to_every_step():
    a = cli.parse_args(["bisect", "git", "/tmp", "--old", "a", "--new", "b", "perf-refresh", "--cpus", "4",
                      "--debuginfo", "--config", "x.config", "--step-pmiss", "0.01", "--", "--threads", "3"])
    assert (a.tree, a.reproducer, a.kind) == (Path("/tmp"), "perf-refresh", "git")
    fwd = bisect_cmd.forwarded_args(a)
    assert fwd[:2] == ["--cpus", "4"] and "--debuginfo" in fwd and fwd[-3:] == ["--", "--threads", "3"]
    assert fwd[fwd.index("--config") + 1] == str(Path("x.config").resolve())
    s = cli.parse_args(["bisect-step", "perf-refresh", *fwd])
    assert (s.cpus, s.debuginfo, s.step_pmiss, s.repro_args) == (4, True, 0.01, ["--threads", "3"])
    v = cli.parse_args(["verify", "debian:6.16.12", "perf-refresh", "--cpus", "4", "--", "--no-bystander"])
    assert (v.cpus, v.repro_args) == (4, ["--no-bystander"])


def test_fragments_base_then_reproducer_then_user_then_debuginfo(tmp_path):
    mine = tmp_path / "mine.config"
    mine.write_text("CONFIG_LOCKDEP=y\n")
    ringbuf, refresh = reproducers.load("bpf-ringbuf").needs, reproducers.load("perf-refresh").needs
    files = kbuild.BuildOptions(needs=ringbuf, fragments=[mine], debuginfo=True).config_files()
    assert [f.name for f in files] == ["base.config", "bpf-ringbuf.config", "mine.config", "debuginfo.config"]
    assert kbuild.BuildOptions(needs=refresh).key() != kbuild.BuildOptions(needs=ringbuf).key()
    assert "CONFIG_BPF_JIT=y" in files[1].read_text() and "CONFIG_BPF_EVENTS=y" in files[1].read_text()
    with pytest.raises(SpecError, match="does not exist"):
        kbuild.BuildOptions(fragments=[tmp_path / "nope.config"]).config_files()


def test_config_mismatches_name_what_olddefconfig_dropped(tmp_path):
    frag = tmp_path / "f.config"
    frag.write_text("CONFIG_A=y\nCONFIG_B=y\n# CONFIG_C is not set\nCONFIG_D=64\n")
    cfg = tmp_path / ".config"
    cfg.write_text("CONFIG_A=y\n# CONFIG_B is not set\nCONFIG_D=8\n")
    assert kbuild.config_mismatches(cfg, [frag]) == ["CONFIG_B=y (got n)", "CONFIG_D=64 (got 8)"]


def test_build_spec_needs_a_kernel_tree_and_a_commit(tmp_path):
    with pytest.raises(SpecError, match="not a kernel source tree"):
        kbuild.parse(str(tmp_path))
    (tmp_path / "Makefile").write_text("")
    (tmp_path / "Kconfig").write_text("")
    assert kbuild.parse(f"{tmp_path}@HEAD~1") == (tmp_path.resolve(), "HEAD~1")
    assert kbuild.parse(str(tmp_path)) == (tmp_path.resolve(), None)
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    with pytest.raises(SpecError, match="is not a commit"):
        kbuild.identify(tmp_path, "nosuchrev")


def test_bisect_git_refuses_a_tree_already_bisected(tmp_path):
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t", "PATH": "/usr/bin:/bin"}
    run = lambda *a: subprocess.run(["git", "-C", str(tmp_path), *a], check=True, capture_output=True, env=env)
    run("init", "-q")
    for n in range(3):
        (tmp_path / "Makefile").write_text(str(n))
        (tmp_path / "Kconfig").write_text("")
        run("add", "-A")
        run("commit", "-qm", f"c{n}")
    with pytest.raises(bisect_git.GitBisectError, match="not an ancestor"):
        bisect_git.check_tree(tmp_path, "HEAD", "HEAD~2")
    old, new, head = bisect_git.check_tree(tmp_path, "HEAD~2", "HEAD")
    assert head.startswith("refs/heads/")
    run("bisect", "start", "--no-checkout", "HEAD", "HEAD~2")
    with pytest.raises(bisect_git.GitBisectError, match="already being bisected"):
        bisect_git.check_tree(tmp_path, "HEAD~2", "HEAD")


def test_an_end_that_ends_in_error_gets_one_more_go():
    c = versions(5)
    seen: list[str] = []

    def flaky_new_end(v: str) -> Step:  # an emulator fault in every attempt of the first go
        seen.append(v)
        if v == "v4" and seen.count("v4") == 1:
            return Step(v, SKIP, "ERROR", "emulator fault", error=True)
        return Step(v, CLEAN if v < "v3" else REPRODUCES, "x")
    out = Bisection(c, flaky_new_end).run()
    assert (out.last_old, out.first_new) == ("v2", "v3") and seen.count("v4") == 2
    test, tested = table({"v0": CLEAN, "v1": CLEAN, "v2": SKIP, "v3": SKIP, "v4": SKIP})
    out = Bisection(c, test, max_errors=5).run()  # one that fails its second go too stops the bisection
    assert "the new end v4 could not be judged" in out.message and tested.count("v4") == 2


def test_a_bisection_ended_by_a_signal_is_interrupted_and_by_anything_else_an_error_with_its_text():
    from harness.base.procs import Interrupted
    from harness.drivers.bisect.search import ending
    assert ending(KeyboardInterrupt()) == ending(Interrupted("SIGTERM")) == {"status": "interrupted"}
    assert ending(OSError(28, "No space left on device")) == \
        {"status": "error", "error": "OSError: [Errno 28] No space left on device"}


def _step_runs(monkeypatch, shares: list[float | None], count: int = 400, reproducer: str = "perf-refresh",
               **step):
    """run_step over recorded perf-refresh runs made NOT_REPRODUCED, each of
    count passes with its vCPUs waiting shares[i] of the run; calibrated at 10
    hangs in 10 runs of 20 passes (a rate 400 passes reach 1e-3 with)."""
    import copy
    import json
    from recorded import FIXTURES
    from harness.analysis import pmiss
    from harness.analysis.record import RunRecord
    from harness.drivers import verify
    from harness.drivers.bisect import steps
    from harness.drivers.options import Options
    base = json.loads((FIXTURES / "perf-refresh-6.16.12-4cpu" / "run.json").read_text())
    docs = []
    for i, share in enumerate(shares):
        d = copy.deepcopy(base)
        d["id"], d["verdict"], d["line"] = f"run-{i}", "NOT_REPRODUCED", f"run {i}: not reproduced"
        if share == "hangs":
            d["verdict"], share = "VULNERABLE", 0.5
        d["evidence"]["count"] = count
        d["timings"]["vcpu_host_wait_share"] = share
        docs.append(d)
    made = iter(docs)

    class Result:
        held = None

        def __init__(self, doc):
            self.record = RunRecord.from_json(doc)
    monkeypatch.setattr(verify, "verify", lambda *a, **k: Result(next(made)))
    cal = pmiss.Calibration(reproducer="perf-refresh", kernel="debian:6.16.12", cpus=4, confidence=0.95,
                            measured="", runs=[{"verdict": "VULNERABLE", "count": 20, "seconds": 1}] * 10)
    said = []
    policy = steps.StepPolicy(reproducer, Options(), cal=cal if reproducer == "perf-refresh" else None)
    step, recs = steps.run_step("debian:6.16.12", "step 1", policy, said.append, **step)
    return step, len(recs), said


def test_a_step_does_not_count_the_passes_of_a_run_the_host_starved(monkeypatch):
    """The e2e fix hunt once called affected debian:6.19.14-rt clean, "P(miss)
    3e-07 over 407 passes", beside make test's other half: a busy run's passes
    are not counted, so the step runs again, and a quiet run decides it."""
    step, runs, said = _step_runs(monkeypatch, [0.55, 0.1])
    assert step.state == CLEAN and runs == 2
    assert "running again" in said[0] and "waiting 55% of the run" in said[0]
    assert step.p_miss.startswith("P(miss) ") and "over 400 passes (and 400 on a busy host) in 2 run(s)" in step.p_miss


def test_a_step_on_a_host_busy_every_time_is_clean_after_every_run_with_its_p_miss_unknown(monkeypatch):
    step, runs, said = _step_runs(monkeypatch, [0.5, 0.6, 0.45, 0.52])
    assert step.state == CLEAN and runs == 4 and len(said) == 3
    assert step.p_miss == ("P(miss) unknown (the host kept the vCPUs waiting 60% of the run: a calibrated rate holds "
                           "up to 30%) over 1600 passes in 4 run(s)")


def test_a_quiet_step_is_decided_by_its_one_run(monkeypatch):
    step, runs, said = _step_runs(monkeypatch, [0.12])
    assert step.state == CLEAN and runs == 1 and not said and "over 400 passes in 1 run(s)" in step.p_miss


def test_a_step_a_search_confirms_later_counts_a_busy_run_and_is_unsure(monkeypatch):
    step, runs, said = _step_runs(monkeypatch, [0.55], provisional=True)
    assert step.state == CLEAN and step.unsure and runs == 1 and not said
    assert step.p_miss.startswith("P(miss) unknown (the host kept the vCPUs waiting 55%")
    quiet, runs, said = _step_runs(monkeypatch, [0.1], provisional=True)
    assert quiet.state == CLEAN and not quiet.unsure and quiet.p_miss.startswith("P(miss) ")


def test_confirming_an_unsure_step_goes_on_from_its_runs(monkeypatch):
    """An unsure step of one busy run gets up to 3 more; a hang among them
    makes it reproduce, and a host busy to the end leaves it clean, sure."""
    unsure = Step("6.19.14", CLEAN, "NOT_REPRODUCED", p_miss="P(miss) unknown", runs=["r0"], count=400, unsure=True)
    step, runs, said = _step_runs(monkeypatch, [0.6, "hangs"], after=unsure)
    assert step.state == REPRODUCES and runs == 2 and len(said) == 1
    step, runs, said = _step_runs(monkeypatch, [0.6, 0.6, 0.6], after=unsure)
    assert step.state == CLEAN and not step.unsure and runs == 3 and len(step.runs) == 1
    assert "over 1600 passes in 4 run(s)" in step.p_miss and "unknown" in step.p_miss


def test_a_syzkaller_programs_clean_step_is_one_run_of_its_time_unsure_until_one_more_confirms_it(monkeypatch):
    """syzbot's programs run for their time and have no P(miss): a clean
    step is one clean run, never four, and the search confirms the one its
    answer rests on with one more run (a hang there makes it reproduce)."""
    from recorded import FIXTURES
    prog = str(FIXTURES / "syzkaller-programs" / "pipe_hang.c")
    step, runs, said = _step_runs(monkeypatch, [0.1], reproducer=prog, provisional=True)
    assert step.state == CLEAN and step.unsure and runs == 1 and not said
    assert step.p_miss.startswith("1 clean run(s) of its time") and "no P(miss)" in step.p_miss
    again, runs, _ = _step_runs(monkeypatch, [0.1], reproducer=prog, after=step)
    assert again.state == CLEAN and not again.unsure and runs == 1 and again.p_miss.startswith("2 clean run(s)")
    assert again.p_miss.endswith("confirmed")
    hung, runs, _ = _step_runs(monkeypatch, ["hangs"], reproducer=prog, after=step)
    assert hung.state == REPRODUCES
    # with no search to confirm it later (git bisect, bisect-step), the step takes its two runs at once
    alone, runs, said = _step_runs(monkeypatch, [0.1, 0.1], reproducer=prog)
    assert alone.state == CLEAN and not alone.unsure and runs == 2 and "running again" in said[0]
    assert alone.p_miss.startswith("2 clean run(s)") and alone.p_miss.endswith("confirmed")


def test_a_boundary_whose_confirming_run_could_not_be_judged_says_it_rests_on_one_run():
    c = versions(5)
    states = {**{v: REPRODUCES for v in c[:3]}, **{v: CLEAN for v in c[3:]}, "v3": "unsure"}
    first, confirm, tested, confirmed = _unsure_table(states, {"v3": SKIP})
    out = Bisection(c, first, confirm=confirm).run()
    assert (out.direction, out.last_old, out.first_new) == ("fix", "v2", "v3") and confirmed == ["v3"]
    assert "the clean step next to the boundary, v3, rests on one run" in out.message, out.message


def _unsure_table(states: dict[str, str], truly: dict[str, str]):
    """A table search whose "unsure" steps are clean, and confirmed as truly says."""
    test, tested = table({c: CLEAN if st == "unsure" else st for c, st in states.items()})
    confirmed = []

    def first(c: str) -> Step:
        s = test(c)
        s.unsure = states[c] == "unsure"
        return s

    def confirm(s: Step) -> Step:
        confirmed.append(s.candidate)
        return Step(s.candidate, truly[s.candidate], "X")
    return first, confirm, tested, confirmed


def test_a_fix_hunt_confirms_the_clean_side_of_its_boundary_and_moves_it_if_that_reproduces():
    c = versions(9)
    # the fix is in v6; v4 and v6 came out clean on a busy host, v4 wrongly
    states = {**{v: REPRODUCES for v in c[:6]}, **{v: CLEAN for v in c[6:]}, "v4": "unsure", "v6": "unsure"}
    first, confirm, tested, confirmed = _unsure_table(states, {"v4": REPRODUCES, "v6": CLEAN})
    out = Bisection(c, first, confirm=confirm).run()
    assert (out.direction, out.last_old, out.first_new) == ("fix", "v5", "v6")
    assert confirmed == ["v4", "v6"] and tested == ["v0", "v8", "v4", "v2", "v3", "v6", "v5"]


def test_clean_ends_one_of_them_unsure_are_confirmed_before_they_agree():
    c = versions(5)
    states = {**{v: REPRODUCES for v in c[:3]}, **{v: CLEAN for v in c[3:]}, "v0": "unsure"}
    first, confirm, tested, confirmed = _unsure_table(states, {"v0": REPRODUCES})
    out = Bisection(c, first, confirm=confirm).run()
    assert (out.direction, out.last_old, out.first_new) == ("fix", "v2", "v3") and confirmed == ["v0"]
    first, confirm, tested, confirmed = _unsure_table({**states, "v0": "unsure"}, {"v0": CLEAN})
    assert "both ends agree" in Bisection(c, first, confirm=confirm).run().message


def test_a_regression_whose_clean_old_end_reproduces_when_confirmed_has_nothing_to_find():
    c = versions(5)
    states = {"v0": "unsure", **{v: REPRODUCES for v in c[1:]}}
    first, confirm, tested, confirmed = _unsure_table(states, {"v0": REPRODUCES})
    assert "both ends agree" in Bisection(c, first, confirm=confirm).run().message and confirmed == ["v0"]
