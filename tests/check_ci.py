#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0
"""`make check-ci`: the jobs of the CI templates a project adopts, run as
their CI systems would run them, in the clean bookworm root that stands for
their Debian container, and compared with `make run`. Not part of `make test`
(the matrix runs four times); root only.

  1. `make deb`; `make run` (the default matrix, in one piece): the baseline.
  2. GitHub: the project's file (ci/github-actions.yml) calls the reusable
     workflow with its inputs, and `deb` the package just built. Every job, and
     every shard of the job matrix, runs its `run:` steps with bash -eo
     pipefail in the root, in a workspace of its own, kstall purged first (a
     new container). The actions it uses are done as they would be: checkout
     (the project's files), upload and download-artifact (a store), cache
     (the host's kstall cache, bound where it would be restored).
  3. GitLab: gitlab-ci-local expands the project's .gitlab-ci.yml with the
     template and its inputs; each job, every parallel index, runs its
     before_script and script in one bash -eo pipefail, its needs' artifacts
     in its project directory.
  4. LAVA: run.sh as LAVA writes it (the parameters, `set -e`, the steps),
     run by /bin/sh -e with LAVA's own lava-test-case (lava-dispatcher's);
     its test-case signals are read back.
  5. Every cell has the same status and verdict in both merged results as in
     the baseline, and LAVA has one test case per cell with the baseline's
     pass, fail or skip.
  6. GitHub again with shard 1 alone, its `kstall matrix` step cancelled
     (SIGINT) halfway through the time it took above, as a job's timeout
     cancels it: the merge must fail, naming the cells the shard never ran.

Prints each job's time and the comparison; exit 1 on any difference.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import ci_templates as ct  # noqa: E402
from clean_root import REPO, bound, build_deb, mounted, step  # noqa: E402
from harness.base import paths  # noqa: E402
from harness.reports import lava  # noqa: E402
from rehearsal import github, gitlab  # noqa: E402
from rehearsal import lava as lava_run  # noqa: E402
from rehearsal.shell import HOST, INSIDE, JOB_TIMEOUT, merged_dir  # noqa: E402


def cells(doc: dict) -> dict[str, tuple[str, str]]:
    return {c["id"]: (c["status"], c.get("verdict") or "") for c in doc["cells"]}


def compare(base: dict, name: str, other: dict) -> list[str]:
    a, b = cells(base), cells(other)
    diffs = [f"{name}: {i}: make run {a.get(i)}, {name} {b.get(i)}" for i in sorted(set(a) | set(b))
             if a.get(i) != b.get(i)]
    print(f"{'ok  ' if not diffs else 'FAIL'} {name}: {len(b)} cells, {len(diffs)} differ from make run's "
          f"({other['totals']}; shards {', '.join(other['shards']) or 'none'})")
    return diffs


def main() -> int:
    ap = argparse.ArgumentParser(description="the CI templates' jobs rehearsed in a clean root, against make run")
    ap.add_argument("--baseline", type=Path, help="a results directory of `make run` to compare with (default: "
                    "run it now)")
    ap.add_argument("--interrupt-only", type=float, metavar="S",
                    help="only step 6, shard 1's matrix step cancelled after S seconds")
    args = ap.parse_args()
    # a SIGTERM unwinds like Ctrl-C: the root's mounts are let go
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if os.geteuid() != 0:
        print("check-ci: skipped: a clean root and its mounts take root")
        return 0
    if ct.npm_tools() is None:
        print("check-ci: no gitlab-ci-local: run ci/install-npm-tools")
        return 1
    t_all = time.monotonic()
    if args.interrupt_only is not None:
        deb = build_deb()
        with mounted():
            HOST.mkdir(parents=True, exist_ok=True)
            shutil.copy2(deb, HOST / deb.name)
            with bound(paths.cache_dir(), "/root/.cache/kstall"):
                cut = interrupted_shard(f"file://{INSIDE}/{deb.name}", project_files(), args.interrupt_only)
        return 1 if cut else 0
    base = json.loads((args.baseline / "matrix.json").read_text()) if args.baseline else None
    deb = build_deb()
    # kept after the check (the baseline's results, the scratch GitLab project) to look into
    work = paths.cache_dir() / "check-ci" / "work"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    if base is None:
        t0 = time.monotonic()
        # make's own exit is 2 when the matrix's is 1 (a failing cell): compared below all the same
        step("make run (the baseline: the default matrix in one piece)",
             ["make", "--no-print-directory", "-C", str(REPO), "run"], ok=(0, 2), timeout=JOB_TIMEOUT,
             env={**os.environ, "KSTALL_RESULTS": str(work / "baseline")})
        base = json.loads((merged_dir(work / "baseline") / "matrix.json").read_text())
        print(f"     {base['totals']} in {time.monotonic() - t0:.0f}s")
    project = project_files()
    with mounted():
        HOST.mkdir(parents=True, exist_ok=True)
        shutil.copy2(deb, HOST / deb.name)
        deb_url = f"file://{INSIDE}/{deb.name}"
        with bound(paths.cache_dir(), "/root/.cache/kstall"):
            gh_doc = json.loads((github.rehearse(deb_url, project) / "matrix.json").read_text())
            gl_doc = json.loads((gitlab.rehearse(deb_url, project, work) / "matrix.json").read_text())
            lava_cases = lava_run.rehearse(deb_url, project)
            cut = interrupted_shard(deb_url, project)
    diffs = compare(base, "github", gh_doc) + compare(base, "gitlab", gl_doc)
    want = {lava.case_name(c["id"]): lava.result(c["status"]) for c in base["cells"]}
    got = {k: v for k, v in lava_cases.items() if k in want or k not in ("kstall-doctor", "kstall-matrix-run")}
    lava_diffs = [f"lava: {k}: make run {want.get(k)}, lava {got.get(k)}" for k in sorted(set(want) | set(got))
                  if want.get(k) != got.get(k)]
    lava_diffs += [f"lava: {k} {lava_cases.get(k)}" for k in ("kstall-doctor", "kstall-matrix-run")
                   if lava_cases.get(k) != "pass"]
    print(f"{'ok  ' if not lava_diffs else 'FAIL'} lava: {len(got)} cell test cases, {len(lava_diffs)} differ")
    for d in diffs + lava_diffs:
        print(f"     {d}")
    print(f"check-ci: {time.monotonic() - t_all:.0f}s in all")
    return 1 if diffs or lava_diffs or cut else 0


SHARD, STEP = "shard-1", "Run the shard"


def project_files() -> dict[str, str]:
    """The project: its matrix file, where its CI files say it is."""
    return {"ci/matrix.toml": (REPO / "ci" / "matrix.toml").read_text()}


def interrupted_shard(deb_url: str, project: dict[str, str], after: float | None = None) -> list[str]:
    """Shard 1 cancelled halfway (or after that many seconds); what is wrong
    with its merge ([] if nothing)."""
    half = after if after is not None else github.TOOK[SHARD][STEP] / 2
    merged = github.rehearse(deb_url, project, cancel=(SHARD, STEP, half))
    doc = json.loads((merged / "matrix.json").read_text())
    unrun = sorted(c["id"] for c in doc["cells"] if c["status"] == "not-run")
    merge = github.JOBS.get("merge", {})
    said = merge.get("outputs", {}).get("failing", "").split()
    wrong = ([] if merge.get("result") == "failure" else ["the merge job did not fail"]) + \
        ([] if unrun else ["no cell is marked not-run (the shard ran to its end in half its time?)"]) + \
        [f"{i} not named by the merge's failing output" for i in unrun if i not in said]
    print(f"{'ok  ' if not wrong else 'FAIL'} github, shard 1 cancelled after {half:.0f}s: merge "
          f"{merge.get('result')}, {len(unrun)} cells not run ({', '.join(unrun[:4])}"
          f"{', ...' if len(unrun) > 4 else ''}), {len(doc['cells'])} in all")
    for w in wrong:
        print(f"     {w}")
    return wrong


if __name__ == "__main__":
    sys.exit(main())
