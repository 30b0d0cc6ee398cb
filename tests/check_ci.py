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

Prints each job's time and the comparison; exit 1 on any difference.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import yaml  # noqa: E402

import ci_templates as ct  # noqa: E402
from clean_root import REPO, ROOT, bound, build_deb, mounted, step  # noqa: E402
from harness.base import paths  # noqa: E402
from harness.reports import lava  # noqa: E402

INSIDE = "/ci"                    # the rehearsal's directory, as the root sees it
HOST = ROOT / INSIDE.lstrip("/")
BASE_ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root",
            "LANG": "C.UTF-8", "CI": "true"}
JOB_TIMEOUT = 3600


def run_script(script: str, cwd: str, env: dict, log: Path, shell=("bash", "--noprofile", "--norc", "-eo",
                                                                   "pipefail")) -> int:
    """One script in the root, in cwd (as the root sees it), with only env;
    its output appended to log."""
    fd, path = tempfile.mkstemp(dir=HOST, suffix=".sh")
    with os.fdopen(fd, "w") as f:
        f.write(script + "\n")
    inside = f"{INSIDE}/{Path(path).name}"
    try:
        with log.open("a") as out:
            out.write(f"$ {script}\n")
            out.flush()
            p = subprocess.run(["chroot", str(ROOT), "env", "--ignore-environment", f"--chdir={cwd}",
                                *[f"{k}={v}" for k, v in {**BASE_ENV, **env}.items()], *shell, inside],
                               stdout=out, stderr=subprocess.STDOUT, timeout=JOB_TIMEOUT)
        return p.returncode
    finally:
        os.unlink(path)


def fresh_container(log: Path) -> None:
    """A new job's container has no kstall installed."""
    run_script("dpkg --purge kstall >/dev/null 2>&1 || true", "/", {}, log)


def copy_project(dest: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        (dest / rel).write_text(text)


# --- GitHub Actions -------------------------------------------------------

_TOKEN = re.compile(r"\s*(?:('(?:[^']|'')*')|(&&|\|\||==|!=|!|\(|\)|,)|(\d+(?:\.\d+)?)|([A-Za-z_][\w.*-]*))")


def gh_eval(expr: str, contexts: dict, funcs: dict):
    """A GitHub expression, for the operators and functions the templates
    use: contexts, 'strings', numbers, true/false/null, ==, !=, !, &&, || (which
    give an operand, as GitHub's do), calls."""
    py, pos, expr = [], 0, expr.strip()
    while pos < len(expr):
        m = _TOKEN.match(expr, pos)
        if not m:
            raise ValueError(f"rehearsal: cannot read the expression {expr!r} at {pos}")
        string, op, num, name = m.groups()
        pos = m.end()
        if string:
            py.append(repr(string[1:-1].replace("''", "'")))
        elif op:
            py.append({"&&": " and ", "||": " or ", "!": " not "}.get(op, op))
        elif num:
            py.append(num)
        elif name in ("true", "false", "null"):
            py.append({"true": "True", "false": "False", "null": "None"}[name])
        elif expr[pos:].lstrip().startswith("("):
            py.append(f"F[{name!r}]")
        else:
            py.append(f"C({name!r})")

    def lookup(path: str):
        v = contexts
        for part in path.split("."):
            v = v.get(part) if isinstance(v, dict) else None
        return v
    return eval("".join(py), {"__builtins__": {}}, {"F": funcs, "C": lookup})  # noqa: S307 - our own translation


def gh_text(v) -> str:
    return {True: "true", False: "false", None: ""}.get(v, v) if isinstance(v, (bool, type(None))) else \
        str(int(v)) if isinstance(v, float) and v.is_integer() else str(v)


def gh_sub(value, contexts: dict, funcs: dict):
    """${{ }} in a string; a string that is one expression keeps its type
    (a job matrix's list, a number input)."""
    if not isinstance(value, str):
        return value
    whole = re.fullmatch(r"\s*\$\{\{((?:(?!\}\}).)*)\}\}\s*", value)
    if whole:
        return gh_eval(whole.group(1), contexts, funcs)
    return re.sub(r"\$\{\{(.*?)\}\}", lambda m: gh_text(gh_eval(m.group(1), contexts, funcs)), value)


def gh_outputs(text: str) -> dict:
    """$GITHUB_OUTPUT: name=value lines and name<<DELIMITER blocks."""
    out, lines, i = {}, text.splitlines(), 0
    while i < len(lines):
        line = lines[i]
        if "<<" in line and ("=" not in line or line.index("<<") < line.index("=")):
            name, delim = line.split("<<", 1)
            end = lines.index(delim, i + 1)
            out[name] = "\n".join(lines[i + 1:end])
            i = end + 1
            continue
        if "=" in line:
            name, value = line.split("=", 1)
            out[name] = value
        i += 1
    return out


def gh_uses(action: str, with_: dict, ws: Path, store: Path, project: dict[str, str]) -> bool:
    name = action.split("@")[0]
    if name == "actions/checkout":
        if with_.get("repository"):
            raise SystemExit("rehearsal: checking out kstall's source (building the .deb) is not rehearsed")
        copy_project(ws / with_.get("path", ""), project)
    elif name == "actions/upload-artifact":
        src = ws / with_["path"]
        if not (src.exists() and any(src.rglob("*"))):
            return with_.get("if-no-files-found", "warn") != "error"
        shutil.copytree(src, store / with_["name"], dirs_exist_ok=True)
    elif name == "actions/download-artifact":
        dest = ws / with_.get("path", ".")
        if "name" in with_:
            if not (store / with_["name"]).is_dir():
                return False
            shutil.copytree(store / with_["name"], dest, dirs_exist_ok=True)
        for art in sorted(store.glob(with_.get("pattern", "\0"))):
            shutil.copytree(art, dest / art.name, dirs_exist_ok=True)
    elif name != "actions/cache":   # the host's kstall cache is bound in the root for the whole rehearsal
        raise SystemExit(f"rehearsal: the action {action} is not rehearsed")
    return True


def gh_job(name: str, job: dict, contexts: dict, store: Path, project: dict[str, str], tag: str) -> dict:
    """One job instance in a new workspace: its result and outputs."""
    ws = HOST / "gh" / tag
    shutil.rmtree(ws, ignore_errors=True)
    (ws / ".tmp").mkdir(parents=True)
    log = HOST / "gh" / f"{tag}.log"
    log.write_text("")
    fresh_container(log)
    contexts = {**contexts, "steps": {}, "github": {"workspace": f"{INSIDE}/gh/{tag}"},
                "runner": {"temp": f"{INSIDE}/gh/{tag}/.tmp", "os": "Linux"}}
    ok = True
    funcs = {"success": lambda: ok, "failure": lambda: not ok, "always": lambda: True, "fromJSON": json.loads,
             "hashFiles": lambda *p: "rehearsal"}
    t0 = time.monotonic()
    for i, st in enumerate(job["steps"]):
        if not gh_eval(str(st.get("if", "success()")).replace("${{", "").replace("}}", ""), contexts, funcs):
            continue
        if "uses" in st:
            good = gh_uses(st["uses"], {k: gh_sub(v, contexts, funcs) for k, v in st.get("with", {}).items()},
                           ws, store, project)
        else:
            out, summary = ws / ".tmp" / f"out{i}", ws / ".tmp" / f"summary{i}"
            env = {k: gh_text(gh_sub(v, contexts, funcs)) for k, v in st.get("env", {}).items()}
            inside = f"{INSIDE}/gh/{tag}"
            env |= {"GITHUB_WORKSPACE": inside, "RUNNER_TEMP": f"{inside}/.tmp", "GITHUB_ACTIONS": "true",
                    "GITHUB_OUTPUT": f"{inside}/.tmp/out{i}", "GITHUB_STEP_SUMMARY": f"{inside}/.tmp/summary{i}"}
            out.touch()
            summary.touch()
            cwd = f"{inside}/{st['working-directory']}" if "working-directory" in st else inside
            good = run_script(gh_sub(st["run"], contexts, funcs), cwd, env, log) == 0
            if "id" in st:
                contexts["steps"][st["id"]] = {"outputs": gh_outputs(out.read_text())}
        ok = ok and good
    outputs = {k: gh_text(gh_sub(v, contexts, funcs)) for k, v in job.get("outputs", {}).items()}
    print(f"{'ok  ' if ok else 'FAIL'} github job {tag}: {time.monotonic() - t0:.1f}s (log {log})", flush=True)
    return {"result": "success" if ok else "failure", "outputs": outputs}


def in_needs_order(jobs: dict) -> list[str]:
    order: list[str] = []
    while len(order) < len(jobs):
        ready = [n for n, j in jobs.items() if n not in order and all(d in order for d in _needs(j))]
        if not ready:
            raise SystemExit("rehearsal: the jobs' needs make a circle")
        order += ready
    return order


def _needs(job: dict) -> list[str]:
    needs = job.get("needs", [])
    return [n if isinstance(n, str) else n["job"] for n in ([needs] if isinstance(needs, str) else needs)]


def rehearse_github(deb_url: str, project: dict[str, str]) -> Path:
    caller = yaml.safe_load(ct.GITHUB_CALLER.read_text())
    (call,) = caller["jobs"].values()
    workflow = yaml.safe_load(ct.WORKFLOW.read_text())
    declared = workflow[True]["workflow_call"]["inputs"]   # YAML 1.1 reads `on` as true
    inputs = {k: v.get("default") for k, v in declared.items()} | call.get("with", {}) | {"deb": deb_url}
    store = HOST / "gh" / "artifacts"
    shutil.rmtree(HOST / "gh", ignore_errors=True)
    store.mkdir(parents=True)
    needs: dict[str, dict] = {}
    for name in in_needs_order(workflow["jobs"]):
        job = workflow["jobs"][name]
        contexts = {"inputs": inputs, "needs": {n: needs[n] for n in _needs(job)}}
        deps_ok = all(needs[n]["result"] == "success" for n in _needs(job))
        funcs = {"success": lambda: deps_ok, "always": lambda: True, "failure": lambda: not deps_ok}
        if not gh_eval(str(job.get("if", "success()")), contexts, funcs):
            needs[name] = {"result": "skipped", "outputs": {}}
            continue
        axes = {k: gh_sub(v, contexts, {"fromJSON": json.loads})
                for k, v in job.get("strategy", {}).get("matrix", {}).items()}
        combos = [{}] if not axes else [{k: v} for k, vs in axes.items() for v in vs]
        runs = [gh_job(name, job, {**contexts, "matrix": m}, store, project,
                       f"{name}{''.join(f'-{v}' for v in m.values())}") for m in combos]
        needs[name] = {"result": "success" if all(r["result"] == "success" for r in runs) else "failure",
                       "outputs": {k: v for r in runs for k, v in r["outputs"].items()}}
    print("     github: jobs " + ", ".join(f"{n} {r['result']}" for n, r in needs.items()))
    return merged_dir(HOST / "gh" / "merge" / "merged")


# --- GitLab CI --------------------------------------------------------------

def gl_expand(var: str, env: dict) -> str:
    return re.sub(r"\$\{?(\w+)\}?", lambda m: env.get(m.group(1), m.group(0)), var)


def rehearse_gitlab(deb_url: str, project: dict[str, str], work: Path) -> Path:
    caller = yaml.safe_load(ct.GITLAB_CALLER.read_text())
    for inc in caller["include"]:
        inc.setdefault("inputs", {})["deb"] = deb_url
    with_deb = work / "gitlab-ci.yml"
    with_deb.write_text(yaml.safe_dump(caller, sort_keys=False))
    code, expanded = ct.gitlab_expand(work, caller=with_deb)
    if code:
        raise SystemExit(f"rehearsal: gitlab-ci-local refused the pipeline: {expanded}")
    doc = yaml.safe_load(expanded)
    jobs = {k: v for k, v in doc.items() if isinstance(v, dict) and "script" in v and not k.startswith(".")}
    shutil.rmtree(HOST / "gl", ignore_errors=True)
    results: dict[str, bool] = {}
    for name in in_needs_order(jobs):
        job = jobs[name]
        if job.get("when", "on_success") != "always" and not all(results[n] for n in _needs(job)):
            results[name] = False
            continue
        total = job.get("parallel")
        results[name] = all([gl_job(name, job, jobs, project, i, total) for i in range(1, (total or 1) + 1)])
    print("     gitlab: jobs " + ", ".join(f"{n} {'success' if ok else 'failure'}" for n, ok in results.items()))
    return merged_dir(HOST / "gl" / "kstall-report-1" / "kstall-merged")


def gl_job(name: str, job: dict, jobs: dict, project: dict[str, str], index: int, total: int | None) -> bool:
    tag = f"{name}-{index}"
    pdir = HOST / "gl" / tag
    shutil.rmtree(pdir, ignore_errors=True)
    copy_project(pdir, project)
    inside = f"{INSIDE}/gl/{tag}"
    for need in _needs(job):   # artifacts of every instance of each job it needs
        for art in sorted((HOST / "gl" / "artifacts").glob(f"{need}-*")):
            shutil.copytree(art, pdir, dirs_exist_ok=True)
    env = {"GITLAB_CI": "true", "CI_PROJECT_DIR": inside, "CI_JOB_NAME": name}
    if total:
        env |= {"CI_NODE_INDEX": str(index), "CI_NODE_TOTAL": str(total)}
    for k, v in job.get("variables", {}).items():
        env[k] = gl_expand(str(v), env)
    log = HOST / "gl" / f"{tag}.log"
    log.write_text("")
    fresh_container(log)
    t0 = time.monotonic()
    caches = job.get("cache", [])
    with _bound_caches(caches if isinstance(caches, list) else [caches], inside):
        ok = run_script("\n".join(job.get("before_script", []) + job["script"]), inside, env, log) == 0
        if job.get("after_script"):
            run_script("\n".join(job["after_script"]), inside, env, log)
    arts = job.get("artifacts", {})
    if arts and (ok or arts.get("when") == "always"):
        for pattern in arts.get("paths", []):
            for hit in pdir.glob(pattern.rstrip("/")):
                dest = HOST / "gl" / "artifacts" / tag / hit.relative_to(pdir)
                shutil.copytree(hit, dest, dirs_exist_ok=True) if hit.is_dir() else shutil.copy2(hit, dest)
    print(f"{'ok  ' if ok else 'FAIL'} gitlab job {tag}: {time.monotonic() - t0:.1f}s (log {log})", flush=True)
    return ok


class _bound_caches:
    """A job's cache paths, restored: the host's kstall cache bound there."""

    def __init__(self, caches: list[dict], inside: str):
        self.paths = [f"{inside}/{p.rstrip('/')}" for c in caches for p in c.get("paths", [])]
        self.stack: list = []

    def __enter__(self):
        for p in self.paths:
            cm = bound(paths.cache_dir(), p)
            cm.__enter__()
            self.stack.append(cm)

    def __exit__(self, *exc):
        for cm in reversed(self.stack):
            cm.__exit__(*exc)


# --- LAVA -------------------------------------------------------------------

def lava_helpers() -> str:
    """LAVA's own lava-test-case and lava-common-functions, from Debian's
    lava-dispatcher (downloaded, not installed: it brings a whole dispatcher),
    in the root; their directory as the root sees it."""
    cache = paths.cache_dir() / "check-ci" / "lava-dispatcher"
    debs = sorted(cache.glob("lava-dispatcher_*.deb"))
    if not debs:
        cache.mkdir(parents=True, exist_ok=True)
        step("apt-get download lava-dispatcher", ["apt-get", "download", "lava-dispatcher"], cwd=cache)
        debs = sorted(cache.glob("lava-dispatcher_*.deb"))
    unpacked = cache / "unpacked"
    shutil.rmtree(unpacked, ignore_errors=True)
    subprocess.run(["dpkg-deb", "--extract", str(debs[-1]), str(unpacked)], check=True)
    shell = next(unpacked.rglob("lava_test_shell"))
    bindir = HOST / "lava" / "bin"
    bindir.mkdir(parents=True, exist_ok=True)
    for tool in ("lava-test-case", "lava-common-functions"):
        # LAVA puts the interpreter line in when it deploys them
        (bindir / tool).write_text("#!/bin/sh\n" + (shell / tool).read_text())
        (bindir / tool).chmod(0o755)
    return f"{INSIDE}/lava/bin"


def rehearse_lava(deb_url: str, project: dict[str, str]) -> dict[str, str]:
    definition = yaml.safe_load(ct.LAVA.read_text())
    ct.lava_validate(definition)
    shutil.rmtree(HOST / "lava", ignore_errors=True)
    repo = HOST / "lava" / "repo"
    copy_project(repo, project)
    log = HOST / "lava" / "run.log"
    log.write_text("")
    fresh_container(log)
    bindir = lava_helpers()
    params = {**definition.get("params", {}), "MATRIX": "ci/matrix.toml", "DEB": deb_url}
    script = "".join(f"{k}='{v}'\n" for k, v in params.items()) + "set -e\n" + \
        "\n".join(definition["run"]["steps"])
    t0 = time.monotonic()
    code = run_script(script, f"{INSIDE}/lava/repo",
                      {"PATH": f"{bindir}:{BASE_ENV['PATH']}", "LAVA_RESULT_DIR": f"{INSIDE}/lava/results"},
                      log, shell=("/bin/sh", "-e"))
    cases = dict(re.findall(r"<LAVA_SIGNAL_TESTCASE TEST_CASE_ID=(\S+) RESULT=(\w+)", log.read_text()))
    print(f"{'ok  ' if code == 0 else 'FAIL'} lava run.sh: exit {code}, {len(cases)} test cases, "
          f"{time.monotonic() - t0:.1f}s (log {log})", flush=True)
    return cases


# --- the comparison -----------------------------------------------------------

def merged_dir(parent: Path) -> Path:
    found = sorted(parent.glob("*/matrix.json"))
    if not found:
        raise SystemExit(f"rehearsal: no merged matrix.json under {parent}")
    return found[-1].parent


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
    # the project: its matrix file, where its CI files say it is
    project = {"ci/matrix.toml": (REPO / "ci" / "matrix.toml").read_text()}
    with mounted():
        HOST.mkdir(parents=True, exist_ok=True)
        shutil.copy2(deb, HOST / deb.name)
        deb_url = f"file://{INSIDE}/{deb.name}"
        with bound(paths.cache_dir(), "/root/.cache/kstall"):
            github = json.loads((rehearse_github(deb_url, project) / "matrix.json").read_text())
            gitlab = json.loads((rehearse_gitlab(deb_url, project, work) / "matrix.json").read_text())
            lava_cases = rehearse_lava(deb_url, project)
    diffs = compare(base, "github", github) + compare(base, "gitlab", gitlab)
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
    return 1 if diffs or lava_diffs else 0


if __name__ == "__main__":
    sys.exit(main())
