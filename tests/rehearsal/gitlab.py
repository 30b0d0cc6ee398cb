# SPDX-License-Identifier: GPL-2.0
"""GitLab CI: gitlab-ci-local expands the project's .gitlab-ci.yml with the
template and its inputs; each job, every parallel index, runs its
before_script and script in one shell, with its needs' artifacts in its
project directory and its cache paths bound to the host's kstall cache."""
from __future__ import annotations

import contextlib
import re
import shutil
import time
from pathlib import Path

import yaml

import ci_templates as ct
from clean_root import bound
from harness.base import paths
from rehearsal.shell import HOST, INSIDE, copy_project, fresh_container, in_needs_order, merged_dir, needs_of, \
    run_script

def gl_expand(var: str, env: dict) -> str:
    return re.sub(r"\$\{?(\w+)\}?", lambda m: env.get(m.group(1), m.group(0)), var)


def rehearse(deb_url: str, project: dict[str, str], work: Path) -> Path:
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
        if job.get("when", "on_success") != "always" and not all(results[n] for n in needs_of(job)):
            results[name] = False
            continue
        total = job.get("parallel")
        results[name] = all([gl_job(name, job, project, i, total) for i in range(1, (total or 1) + 1)])
    print("     gitlab: jobs " + ", ".join(f"{n} {'success' if ok else 'failure'}" for n, ok in results.items()))
    return merged_dir(HOST / "gl" / "kstall-report-1" / "kstall-merged")


def gl_job(name: str, job: dict, project: dict[str, str], index: int, total: int | None) -> bool:
    tag = f"{name}-{index}"
    pdir = HOST / "gl" / tag
    shutil.rmtree(pdir, ignore_errors=True)
    copy_project(pdir, project)
    inside = f"{INSIDE}/gl/{tag}"
    for need in needs_of(job):   # artifacts of every instance of each job it needs
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
    with contextlib.ExitStack() as restored:   # a cache path, restored: the host's kstall cache bound there
        for c in caches if isinstance(caches, list) else [caches]:
            for p in c.get("paths", []):
                restored.enter_context(bound(paths.cache_dir(), f"{inside}/{p.rstrip('/')}"))
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
