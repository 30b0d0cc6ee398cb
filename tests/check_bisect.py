#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0
"""`make check-bisect`: a git bisection over real kernel builds must name the
commit that brought the perf REFRESH hrtimer deadlock back.

The history is built from Debian's linux 6.17.8 upstream tarball (which has
the fix) in <cache>/check-bisect/linux: a first commit with that source, then
unrelated commits that touch compiled files, two of them leaving the build
broken, one commit that puts hrtimer_cancel() back in
perf_swevent_cancel_hrtimer(), and more unrelated commits. Dates and authors
are fixed, so the commits (and kstall's build cache) are the same on every
run. Then `kstall bisect git` runs on it and this script checks that it named
exactly that commit, skipped the broken build, left the tree on its branch
and left no qemu, gdb or make behind. Prints the build and bisection times.

--cold empties kstall's build cache and ccache first, for the cold-build figure.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from harness.base import paths  # noqa: E402
from images.kernels import debian_source  # noqa: E402

UPSTREAM = "6.17.8"
BROKEN = "int kstall_check_bisect_broken(void) { return kstall_no_such_symbol; }\n"


def comment(path: str, text: str):
    """An edit that adds a comment at the top of a compiled file."""
    def edit(tree: Path) -> None:
        p = tree / path
        p.write_text(f"/* {text} */\n" + p.read_text())
    return edit


def append(path: str, text: str):
    def edit(tree: Path) -> None:
        with open(tree / path, "a") as f:
            f.write(text)
    return edit


def unappend(path: str, text: str):
    def edit(tree: Path) -> None:
        p = tree / path
        p.write_text(p.read_text().replace(text, ""))
    return edit


def culprit_edit(tree: Path) -> None:
    p = tree / "kernel" / "events" / "core.c"
    src = p.read_text()
    fn = src.index("static void perf_swevent_cancel_hrtimer(")
    end = src.index("\n}\n", fn)
    body = src[fn:end]
    assert "hrtimer_try_to_cancel(&hwc->hrtimer);" in body, "6.17.8's perf_swevent_cancel_hrtimer changed"
    p.write_text(src[:fn] + body.replace("hrtimer_try_to_cancel(&hwc->hrtimer);", "hrtimer_cancel(&hwc->hrtimer);")
                 + src[end:])


# (subject, edit, role): oldest first, after the base commit
HISTORY = [
    ("docs: note the kstall check-bisect history", append("Documentation/admin-guide/README.rst",
                                                          "\n.. kstall check-bisect history\n"), "unrelated"),
    ("sched: comment on the run-queue lock order", comment("kernel/sched/core.c", "kstall: run-queue lock order"),
     "unrelated"),
    ("exit: add a helper (breaks the build)", append("kernel/exit.c", BROKEN), "broken"),
    ("mm/mmap: comment on the VMA walk", comment("mm/mmap.c", "kstall: VMA walk"), "broken"),
    ("exit: drop the broken helper (build fixed)", unappend("kernel/exit.c", BROKEN), "unrelated"),
    ("hrtimer: comment on the base lock", comment("kernel/time/hrtimer.c", "kstall: base lock"), "unrelated"),
    ("perf/core: cancel the swevent hrtimer synchronously", culprit_edit, "culprit"),
    ("fs/read_write: comment on rw_verify_area", comment("fs/read_write.c", "kstall: rw_verify_area"),
     "unrelated"),
    ("fork: comment on copy_process", comment("kernel/fork.c", "kstall: copy_process"), "unrelated"),
]


def git(tree: Path, *args: str, env: dict | None = None, timeout: float = 900) -> str:
    return subprocess.run(["git", "-C", str(tree), *args], check=True, capture_output=True, text=True,
                          env=env, timeout=timeout).stdout.strip()


def commit_env(n: int) -> dict:
    date = f"2025-11-{13 + n // 24:02d}T{n % 24:02d}:00:00+00:00"
    return {**os.environ, "GIT_AUTHOR_NAME": "kstall", "GIT_AUTHOR_EMAIL": "kstall@localhost",
            "GIT_COMMITTER_NAME": "kstall", "GIT_COMMITTER_EMAIL": "kstall@localhost",
            "GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date}


def make_history(work: Path) -> dict:
    """The test tree; returns {role or subject: sha}. Reuses the base commit."""
    tree = work / "linux"
    t0 = time.monotonic()
    if not (tree / ".git").is_dir() or subprocess.run(["git", "-C", str(tree), "rev-parse", "-q", "--verify",
                                                       "kstall-base"], capture_output=True).returncode:
        tarball = debian_source.orig_tarball(UPSTREAM, lambda m: print(f"check-bisect: {m}", flush=True))
        shutil.rmtree(tree, ignore_errors=True)
        tree.mkdir(parents=True)
        print(f"check-bisect: unpacking {tarball.name}", flush=True)
        subprocess.run(["tar", "-xJf", str(tarball), "-C", str(tree), "--strip-components=1"], check=True,
                       timeout=1800)
        git(tree, "init", "-q", "-b", "main")
        git(tree, "add", "-A")
        git(tree, "commit", "-q", "-m", f"Linux {UPSTREAM} (Debian's upstream tarball, with the perf fix)",
            env=commit_env(0))
        git(tree, "tag", "kstall-base")
        print(f"check-bisect: base commit in {time.monotonic() - t0:.0f}s", flush=True)
    subprocess.run(["git", "-C", str(tree), "bisect", "reset"], capture_output=True)
    git(tree, "checkout", "-q", "-f", "-B", "main", "kstall-base")
    git(tree, "clean", "-q", "-fdx")
    shas = {"base": git(tree, "rev-parse", "HEAD")}
    for n, (subject, edit, role) in enumerate(HISTORY, 1):
        edit(tree)
        git(tree, "commit", "-q", "-a", "-m", subject, env=commit_env(n))
        sha = git(tree, "rev-parse", "HEAD")
        if role == "broken":
            shas.setdefault("broken_all", []).append(sha)
        elif role == "culprit":
            shas["culprit"] = sha
    shas["new"] = git(tree, "rev-parse", "HEAD")
    shas["tree"] = str(tree)
    return shas


def leftovers() -> list[str]:
    out = subprocess.run(["ps", "-eo", "pid=,comm=,args="], capture_output=True, text=True).stdout
    return [l.strip() for l in out.splitlines()
            if re.match(r"\s*\d+\s+(qemu-system|gdb|make|cc1)\b", l) and "check-bisect" not in l]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cold", action="store_true", help="empty the build cache and ccache first")
    ap.add_argument("--setup-only", action="store_true", help="make the history and stop")
    a = ap.parse_args()
    work = paths.cache_dir() / "check-bisect"
    shas = make_history(work)
    tree = Path(shas["tree"])
    print(f"check-bisect: history in {tree}: base {shas['base'][:12]}, culprit {shas['culprit'][:12]}, "
          f"broken build {', '.join(s[:12] for s in shas['broken_all'])}, new {shas['new'][:12]}", flush=True)
    if a.setup_only:
        return 0
    if a.cold:
        for d in ("kernels/build", "build", "ccache"):
            shutil.rmtree(paths.cache_dir() / d, ignore_errors=True)
    before = leftovers()
    results = work / "results"
    failures: list[str] = []
    kstall = [sys.executable, str(REPO / "harness" / "kstall"), "bisect", "git"]
    t0 = time.monotonic()
    # 1: interrupted like Ctrl-C in a terminal once git bisect run has started its first step
    first = subprocess.Popen([*kstall, str(tree), "--old", shas["base"], "--new", shas["new"], "perf-refresh",
                              "--results", str(results)], start_new_session=True,
                             # a shell's background job inherits SIGINT ignored; a terminal's Ctrl-C does not
                             preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    state = None
    deadline = time.monotonic() + 3600
    while first.poll() is None and time.monotonic() < deadline:
        state = next(results.glob(".*-bisect-git-*.incomplete/state.json"), None)
        if state and state.exists() and len(json.loads(state.read_text()).get("steps", [])) >= 2:
            break
        time.sleep(1)
    time.sleep(8)   # into the first step's checkout and build
    busy = [l for l in leftovers() if l not in before]
    print(f"check-bisect: interrupting (SIGINT) with {len(busy)} build/guest processes running", flush=True)
    os.killpg(first.pid, signal.SIGINT)
    rc = first.wait(300)
    if rc != 130:
        failures.append(f"interrupted bisect exited {rc}, not 130")
    failures += tree_checks(tree, shas, before, "after the interrupt")
    runs = sorted(results.glob("*-bisect-git-*"), key=lambda d: d.stat().st_mtime)
    if not runs:
        failures.append("the interrupted bisection left no results directory")
        return report(failures, {}, shas, time.monotonic() - t0)
    # 2: resumed: the recorded ends are not built or run again
    p = subprocess.run([*kstall, "--resume", str(runs[-1]), "--results", str(results)], timeout=5400,
                       stderr=subprocess.PIPE, text=True)
    sys.stderr.write(p.stderr)
    total = time.monotonic() - t0
    if p.returncode != 0:
        failures.append(f"kstall bisect git --resume exited {p.returncode}")
    if p.stderr.count("recorded earlier") < 2:
        failures.append("the resumed bisection did not take the ends from the interrupted one")
    runs = sorted(results.glob("*-bisect-git-*"), key=lambda d: d.stat().st_mtime)
    doc = json.loads((runs[-1] / "bisect.json").read_text())
    culprit = (doc.get("culprit") or {}).get("commit", "")
    if culprit != shas["culprit"]:
        failures.append(f"culprit {culprit or 'none'} is not {shas['culprit']}")
    if not any(s.get("state") == "skip" and s.get("verdict") == "BUILD_FAILED" for s in doc.get("steps", [])):
        failures.append("no step was skipped for a build failure")
    failures += tree_checks(tree, shas, before, "at the end")
    return report(failures, doc, shas, total)


def tree_checks(tree: Path, shas: dict, before: list[str], when: str) -> list[str]:
    out = []
    if git(tree, "symbolic-ref", "HEAD") != "refs/heads/main" or git(tree, "rev-parse", "HEAD") != shas["new"]:
        out.append(f"{when}: the tree is not back on main at its original commit")
    if git(tree, "status", "--porcelain"):
        out.append(f"{when}: the tree has changes: " + git(tree, "status", "--porcelain")[:300])
    if Path(tree, git(tree, "rev-parse", "--git-path", "BISECT_START")).exists():
        out.append(f"{when}: the tree is still being bisected")
    left = [l for l in leftovers() if l not in before]
    if left:
        out.append(f"{when}: processes left: {left}")
    return out


def report(failures: list[str], doc: dict, shas: dict, total: float) -> int:
    steps = doc.get("steps", [])
    culprit = (doc.get("culprit") or {}).get("commit", "")
    builds = [s for s in steps if s.get("build_s") is not None]
    fresh = [s["build_s"] for s in builds if not s.get("build_cached")]
    print(f"check-bisect: {len(steps)} steps, {sum(1 for s in builds if s.get('build_cached'))} builds from "
          f"kstall's cache; build seconds per step: " + ", ".join(
              f"{s['candidate']}={s['build_s']}{'(cached)' if s.get('build_cached') else ''}" for s in builds))
    if fresh:
        later = f"; later builds median {statistics.median(fresh[1:]):.0f}s" if len(fresh) > 1 else ""
        print(f"check-bisect: first build {fresh[0]:.0f}s{later}")
    print(f"check-bisect: total {total:.0f}s; culprit {culprit[:12] or 'none'} "
          f"({(doc.get('culprit') or {}).get('subject', '')})")
    for f in failures:
        print(f"check-bisect: FAIL: {f}")
    print("check-bisect: PASS" if not failures else "check-bisect: FAILED")
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
