# SPDX-License-Identifier: GPL-2.0
"""`kstall bisect git` and `kstall bisect-step`: bisect a kernel git tree.

The driver verifies both ends (built from the tree), works out the direction,
then hands the search to git: `git bisect start --no-checkout` (the user's
work tree is never touched; the candidate is BISECT_HEAD, built in a shared
clone) and `git bisect run kstall bisect-step`. A fix hunt uses the terms
vulnerable/fixed. Whatever happens, `git bisect reset` runs at the end.

bisect-step answers git for one candidate: build it (a build failure is a
skip, 125), verify it under the step policy, exit 0 for the old state, 1 for
the new one, 125 when it can not be judged, 128 to abort (too many ERRORs,
an internal error). It works under a user's own `git bisect run` too, with
or without --no-checkout. With --state FILE it reads the policy the driver
set (direction, P(miss) target, the bad end's reproduction counts) and
appends every step; a step already in the file is answered from it, which is
how --resume replays an interrupted bisection without running it again.
"""
from __future__ import annotations

import dataclasses
import fcntl
import json
import math
import os
import re
import signal
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

from harness.analysis.record import RunRecord
from harness.base import paths, procs, rundir as results
from harness.drivers.bisect.steps import StepPolicy, run_step
from harness.drivers.bisect.search import CLEAN, REPRODUCES, SKIP, Step, ending
from images.kernels import build as kbuild
from images.kernels.build import git
from images.kernels.kernel import SpecError
from images.kernels.schemes import resolve

SCHEMA = "kstall.bisect/1"
EXIT_OLD, EXIT_NEW, EXIT_SKIP, EXIT_ABORT = 0, 1, 125, 128
FIX_TERMS = ("vulnerable", "fixed")
Echo = Callable[[str], None]


class GitBisectError(SpecError):
    """The tree, the revisions or git bisect itself stopped the bisection."""


def bisecting(tree: Path) -> bool:
    return Path(tree, git(tree, "rev-parse", "--git-path", "BISECT_START")).exists()


def candidate(tree: Path) -> str:
    """The commit under test: BISECT_HEAD with --no-checkout, else HEAD."""
    for ref in ("BISECT_HEAD", "HEAD"):
        sha = kbuild.commit_of(tree, ref)
        if sha:
            return sha
    raise GitBisectError(f"{tree} has no commit checked out")


# -- state shared by the driver and its bisect-step children -----------------

@contextmanager
def locked_state(path: Path) -> Iterator[dict]:
    """The state file, read under a lock and written back atomically."""
    with open(path.with_name(path.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        state = json.loads(path.read_text()) if path.exists() else {}
        yield state
        paths.write_atomic(path, json.dumps(state, indent=2) + "\n")


def policy_from(state: dict, reproducer: str, opts, pmiss_target: float) -> StepPolicy:
    p = state.get("policy", {})
    policy = StepPolicy(reproducer, opts, pmiss_target=p.get("pmiss_target", pmiss_target))
    policy.bad_end_runs = list(p.get("bad_end_runs", []))
    return policy


def exit_for(step: Step, old_state: str) -> int:
    if step.state == SKIP:
        return EXIT_SKIP
    return EXIT_OLD if step.state == old_state else EXIT_NEW


def test_commit(tree: Path, sha: str, policy: StepPolicy, build: kbuild.BuildOptions,
                echo: Echo) -> tuple[Step, list[RunRecord]]:
    """Build and verify one commit: its Step (which also says how the build
    went) and every run's record."""
    label = sha[:12]
    subject = git(tree, "log", "-1", "--format=%s", sha)
    spec = f"build:{tree}@{sha}"
    t0 = time.monotonic()
    try:
        kernel = resolve(spec, progress=echo, build_options=dataclasses.replace(build, needs=policy.loaded.spec.needs))
    except kbuild.BuildError as e:
        echo(f"{label}: build failed, skipping: {str(e).splitlines()[0]}")
        took = round(time.monotonic() - t0, 1)
        return Step(label, SKIP, "BUILD_FAILED", f"build failed: {e}", "", took, commit=sha, subject=subject,
                    build_s=took, build_cached=False), []
    built = kernel.origin.get("build_s") if not kernel.origin.get("cached") else 0.0
    opts = dataclasses.replace(policy.opts, kernel=dataclasses.replace(policy.opts.kernel, build=build))
    step, recs = run_step(spec, label, dataclasses.replace(policy, opts=opts), echo)
    step.commit, step.subject = sha, subject
    step.build_s, step.build_cached = built, bool(kernel.origin.get("cached"))
    step.seconds = round(time.monotonic() - t0, 1)
    return step, recs


def bisect_step(tree: Path, reproducer: str, opts, build: kbuild.BuildOptions, state_path: Path | None,
                old_state: str, pmiss_target: float, echo: Echo) -> int:
    """One `git bisect run` step; returns its exit status."""
    sha = candidate(tree)
    state: dict = json.loads(state_path.read_text()) if state_path and state_path.exists() else {}
    old_state = state.get("policy", {}).get("old_state", old_state)
    recorded = next((s for s in state.get("steps", []) if s.get("commit") == sha), None)
    if recorded:
        step = Step(**recorded)
        echo(f"{sha[:12]}: recorded earlier as {step.state} ({step.verdict}); not run again")
        return exit_for(step, old_state)
    errors = sum(1 for s in state.get("steps", []) if s.get("error"))
    max_errors = state.get("policy", {}).get("max_errors", 3)
    if errors >= max_errors:
        echo(f"{errors} steps already ended in ERROR: aborting the bisection")
        return EXIT_ABORT
    policy = policy_from(state, reproducer, opts, pmiss_target)
    if state_path:
        policy.opts.results_root = state_path.parent / "runs"
    step, _ = test_commit(tree, sha, policy, build, echo)
    if state_path:
        with locked_state(state_path) as st:
            st.setdefault("steps", []).append(step.to_json())
    code = exit_for(step, old_state)
    echo(f"{sha[:12]} {step.subject[:50]!r}: {step.state} ({step.verdict}, {step.seconds:.0f}s) -> exit {code}")
    if step.error and errors + 1 >= max_errors:
        echo(f"{errors + 1} steps ended in ERROR (last: {step.line}): aborting the bisection")
        return EXIT_ABORT
    return code


# -- the driver ---------------------------------------------------------------

def check_tree(tree: Path, old: str, new: str) -> tuple[str, str, str]:
    """(old sha, new sha, where HEAD is) after the checks a user would want first."""
    if not tree.is_dir():
        raise GitBisectError(f"{tree}: no such directory")
    if git(tree, "rev-parse", "--is-inside-work-tree", check=False) != "true":
        raise GitBisectError(f"{tree} is not a git work tree")
    kbuild.parse(str(tree))  # a kernel tree?
    if bisecting(tree):
        raise GitBisectError(f"{tree} is already being bisected: finish it or run `git -C {tree} bisect reset`")
    shas = []
    for name, rev in (("--old", old), ("--new", new)):
        sha = kbuild.commit_of(tree, rev)
        if not sha:
            raise GitBisectError(f"{name} {rev}: not a commit in {tree}")
        shas.append(sha)
    if shas[0] == shas[1]:
        raise GitBisectError("--old and --new are the same commit")
    if subprocess.run(["git", "-C", str(tree), "merge-base", "--is-ancestor", shas[0], shas[1]]).returncode:
        raise GitBisectError(f"--old {old} is not an ancestor of --new {new}")
    head = git(tree, "symbolic-ref", "-q", "HEAD", check=False) or git(tree, "rev-parse", "HEAD")
    return shas[0], shas[1], head


def parse_result(output: str) -> tuple[str | None, list[str]]:
    """(first new commit, or None and the commits git could not tell apart)."""
    m = re.search(r"^([0-9a-f]{40}) is the first \w+ commit", output, re.M)
    if m:
        return m.group(1), []
    m = re.search(r"could be any of:\n((?:[0-9a-f]{40}\n?)+)", output)
    return None, (m.group(1).split() if m else [])


def _run_git_bisect(tree: Path, cmd: list[str], timeout: float, log, echo: Echo) -> str:
    """`git bisect run`, streamed to the log and our stderr, in its own process
    group: on Ctrl-C or any exception the steps get SIGINT (they clean up
    their guests and builds), then TERM, then KILL."""
    proc = subprocess.Popen(["git", "-C", str(tree), "bisect", "run", *cmd], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True,
                            preexec_fn=procs.die_with_parent)
    out: list[str] = []

    def pump() -> None:  # keeps draining while we wait for the group to exit
        assert proc.stdout is not None
        for line in proc.stdout:
            line = line if line.endswith("\n") else line + "\n"
            out.append(line)
            log.write(line)
            log.flush()
            sys.stderr.write(line)
            sys.stderr.flush()

    reader = threading.Thread(target=pump, name="kstall-git-bisect-output", daemon=True)
    reader.start()
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        raise GitBisectError(f"git bisect run took longer than {timeout:.0f}s") from None
    finally:
        # git dies at the SIGINT at once; the step it ran gets it too and needs
        # time to stop its own make or QEMU: wait for the whole group, not git
        for sig, grace in ((signal.SIGINT, 90), (signal.SIGTERM, 15), (signal.SIGKILL, 5)):
            if not _group_alive(proc):
                break
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                break
            end = time.monotonic() + grace
            while _group_alive(proc) and time.monotonic() < end:
                time.sleep(0.2)
        reader.join(10)
    return "".join(out)


def _group_alive(proc: subprocess.Popen) -> bool:
    proc.poll()  # reap git itself, or its zombie keeps the group alive
    try:
        os.killpg(proc.pid, 0)
        return True
    except ProcessLookupError:
        return False


class _GitBisection:
    """One `kstall bisect git`: its record (bisect.json), the state file the
    steps share (state.json) and its log, in the run directory out."""

    def __init__(self, tree: Path, old_sha: str, new_sha: str, reproducer: str, policy: StepPolicy,
                 build: kbuild.BuildOptions, out: results.RunDir, echo: Echo, resumed: dict | None,
                 max_errors: int) -> None:
        self.tree, self.old_sha, self.new_sha = tree, old_sha, new_sha
        self.reproducer, self.policy, self.build, self.out, self.echo = reproducer, policy, build, out, echo
        self.state_path = out.work / "state.json"
        self.doc: dict = {}
        if resumed:  # what the earlier bad end measured still calibrates the clean steps
            policy.bad_end_runs = list(resumed.get("policy", {}).get("bad_end_runs", []))
        state = {"policy": {"pmiss_target": policy.pmiss_target, "max_errors": max_errors,
                            "bad_end_runs": policy.bad_end_runs}, "steps": (resumed or {}).get("steps", [])}
        paths.write_atomic(self.state_path, json.dumps(state, indent=2) + "\n")
        self.log = open(out.work / "bisect.log", "a")

    def save(self) -> None:
        st = json.loads(self.state_path.read_text())
        self.doc["steps"] = [Step(**s).to_json(self.out.work) for s in st.get("steps", [])]
        self.doc["policy"] = st.get("policy", {})
        paths.write_atomic(self.out.work / "bisect.json", json.dumps(self.doc, indent=2) + "\n")

    def end(self, sha: str, name: str) -> Step:
        """One end of the range, built and verified (or as recorded before a --resume)."""
        with locked_state(self.state_path) as st:
            rec = next((s for s in st["steps"] if s.get("commit") == sha), None)
        if rec:
            self.echo(f"{name} end {sha[:12]}: recorded earlier as {rec['state']}")
            return Step(**rec)
        self.echo(f"{name} end {sha[:12]} ({git(self.tree, 'log', '-1', '--format=%s', sha)}): build and verify")
        s, recs = test_commit(self.tree, sha, self.policy, self.build, self.echo)
        if s.state == REPRODUCES and recs:
            self.policy.learn_from_bad_end(recs[-1])
        with locked_state(self.state_path) as st:
            st["steps"].append(s.to_json())
            st["policy"]["bad_end_runs"] = self.policy.bad_end_runs
        self.log.write(f"{name} end {sha}: {s.state} {s.verdict} {s.line}\n")
        self.save()
        return s

    def search(self, direction: str, old_state: str, step_args: list[str], count: int) -> tuple[str | None, list[str]]:
        """git bisect run over the range; (culprit, commits git could not tell apart)."""
        with locked_state(self.state_path) as st:
            st["policy"]["old_state"] = old_state
        terms = [] if direction == "regression" else [f"--term-old={FIX_TERMS[0]}", f"--term-new={FIX_TERMS[1]}"]
        git(self.tree, "bisect", "start", "--no-checkout", *terms, self.new_sha, self.old_sha)
        cmd = [sys.executable, str(paths.REPO / "harness" / "kstall"), "bisect-step", self.reproducer,
               "--tree", str(self.tree), "--state", str(self.state_path), *step_args]
        per_step = self.build.timeout + 900
        output = _run_git_bisect(self.tree, cmd, (math.ceil(math.log2(max(count, 2))) + 6) * per_step, self.log,
                                 self.echo)
        (self.out.work / "git-bisect.log").write_text(git(self.tree, "bisect", "log", check=False) + "\n")
        return parse_result(output)

    def errors(self) -> list[dict]:
        return [s for s in json.loads(self.state_path.read_text())["steps"] if s.get("error")]


def run(tree: Path, old: str, new: str, reproducer: str, policy: StepPolicy, build: kbuild.BuildOptions,
        out: results.RunDir, echo: Echo, step_args: list[str], resumed: dict | None = None,
        max_errors: int = 3, argv: list[str] | None = None) -> dict:
    """The whole bisection; resumed: an earlier bisect.json whose steps stand."""
    tree = tree.resolve()
    old_sha, new_sha, head = check_tree(tree, old, new)
    count = int(git(tree, "rev-list", "--count", f"{old_sha}..{new_sha}"))
    started = time.time()
    b = _GitBisection(tree, old_sha, new_sha, reproducer, policy, build, out, echo, resumed, max_errors)
    doc = b.doc
    doc.update({"schema": SCHEMA, "kind": "git", "id": out.id, "tree": str(tree), "old": old_sha, "new": new_sha,
                "old_rev": old, "new_rev": new, "reproducer": reproducer, "commits": count,
                "pmiss_target": policy.pmiss_target, "config_fragments": [str(f) for f in build.config_files()],
                "debuginfo": build.debuginfo, "command": argv or [], "status": "running"})
    echo(f"{count} commits from {old_sha[:12]} to {new_sha[:12]} in {tree}; about "
         f"{math.ceil(math.log2(max(count, 2)))} steps after the two ends")
    culprit, ambiguous, direction, message, status = None, [], "none", "", "no result"
    started_bisect = False
    try:
        o, n = b.end(old_sha, "old"), b.end(new_sha, "new")
        if SKIP in (o.state, n.state):
            bad = o if o.state == SKIP else n
            message = f"the {'old' if bad is o else 'new'} end {bad.candidate} could not be judged: {bad.line}"
        elif o.state == n.state:
            what = "reproduces" if o.state == REPRODUCES else "does not reproduce"
            message = f"both ends agree: {old_sha[:12]} and {new_sha[:12]} {what}; nothing to bisect"
        else:
            direction = "regression" if o.state == CLEAN else "fix"
            started_bisect = True
            culprit, ambiguous = b.search(direction, o.state, step_args, count)
            errors = b.errors()
            if culprit:
                status = "done"
            elif ambiguous:
                message = "git could not tell these apart (skipped commits): " + ", ".join(a[:12] for a in ambiguous)
            elif len(errors) >= max_errors:
                message = f"stopped: {len(errors)} steps ended in ERROR (last: {errors[-1]['line']})"
                status = "errors"
            else:
                message = "git bisect run stopped without a result (see bisect.log)"
        doc["status"] = status
    except BaseException as e:
        doc.update(ending(e))
        raise
    finally:
        if started_bisect:
            git(tree, "bisect", "reset", check=False)
        now = git(tree, "symbolic-ref", "-q", "HEAD", check=False) or git(tree, "rev-parse", "HEAD", check=False)
        if now != head:
            echo(f"warning: {tree} HEAD is {now}, it was {head}")
        b.log.close()
        b.save()
        b.state_path.with_name(b.state_path.name + ".lock").unlink(missing_ok=True)
    doc.update({"direction": direction, "message": message, "ambiguous": ambiguous,
                "wall_s": round(time.time() - started, 1)})
    if culprit:
        c = git(tree, "log", "-1", "--format=%H%x00%s%x00%an <%ae>%x00%aI", culprit).split("\0")
        doc["culprit"] = {"commit": c[0], "subject": c[1], "author": c[2], "date": c[3]}
    doc["verifies"] = sum(1 for s in doc["steps"] if s.get("verdict") != "BUILD_FAILED")
    doc["summary"] = summary_line(doc)
    b.save()
    return doc


def summary_line(doc: dict) -> str:
    c = doc.get("culprit")
    if c:
        what = "introduced the hang" if doc["direction"] == "regression" else "fixed the hang"
        return f"first {'bad' if doc['direction'] == 'regression' else 'fixed'} commit: {c['commit'][:12]} " \
               f"\"{c['subject']}\" ({what})"
    return doc.get("message") or "no result"


def load(directory: Path) -> dict:
    """An earlier git bisection's bisect.json, for --resume."""
    p = directory / "bisect.json"
    if not p.is_file():
        raise FileNotFoundError(f"{directory}: no bisect.json to resume from")
    d = json.loads(p.read_text())
    if d.get("kind") != "git":
        raise FileNotFoundError(f"{directory} holds a {d.get('kind')} bisection, not a git one")
    # its steps go on in a new directory: their runs stay where they are, named from /
    d["steps"] = [Step.from_json(s, directory).to_json() for s in d.get("steps", [])]
    return d
