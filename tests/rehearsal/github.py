# SPDX-License-Identifier: GPL-2.0
"""GitHub Actions: the project's file calls the reusable workflow; every job,
and every entry of its job matrix, runs its `run:` steps in a new workspace,
and the actions it uses are done as they would be (checkout: the project's
files; upload and download-artifact: a store; cache: the host's kstall cache,
which check_ci binds in the root)."""
from __future__ import annotations

import itertools
import json
import re
import shutil
import time
from pathlib import Path

import yaml

import ci_templates as ct
from rehearsal.shell import HOST, INSIDE, copy_project, fresh_container, in_needs_order, merged_dir, needs_of, \
    run_script

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


def gh_job(job: dict, contexts: dict, store: Path, project: dict[str, str], tag: str,
           cancel: tuple[str, float] | None = None) -> dict:
    """One job instance in a new workspace: its result, outputs and each
    named step's time. cancel: (step name, seconds): that step is cancelled
    then, as a runner cancels a job that ran out of time."""
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
    took: dict[str, float] = {}
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
            t_step = time.monotonic()
            after = cancel[1] if cancel and st.get("name") == cancel[0] else None
            good = run_script(gh_sub(st["run"], contexts, funcs), cwd, env, log, interrupt_after=after) == 0
            took[str(st.get("name", i))] = time.monotonic() - t_step
            if "id" in st:
                contexts["steps"][st["id"]] = {"outputs": gh_outputs(out.read_text())}
        ok = ok and good
    outputs = {k: gh_text(gh_sub(v, contexts, funcs)) for k, v in job.get("outputs", {}).items()}
    print(f"{'ok  ' if ok else 'FAIL'} github job {tag}: {time.monotonic() - t0:.1f}s (log {log})", flush=True)
    return {"result": "success" if ok else "failure", "outputs": outputs, "took": took}


# the last rehearsal's: each job instance's named steps' times; each job's result and outputs
TOOK: dict[str, dict[str, float]] = {}
JOBS: dict[str, dict] = {}


def rehearse(deb_url: str, project: dict[str, str], cancel: tuple[str, str, float] | None = None) -> Path:
    """The workflow's jobs in order; their merged results' directory.
    cancel: (job instance, step name, seconds): that instance alone runs of
    its job's matrix, and its step is cancelled then."""
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
        contexts = {"inputs": inputs, "needs": {n: needs[n] for n in needs_of(job)}}
        deps_ok = all(needs[n]["result"] == "success" for n in needs_of(job))
        funcs = {"success": lambda: deps_ok, "always": lambda: True, "failure": lambda: not deps_ok}
        if not gh_eval(str(job.get("if", "success()")), contexts, funcs):
            needs[name] = {"result": "skipped", "outputs": {}}
            continue
        axes = {k: gh_sub(v, contexts, {"fromJSON": json.loads})
                for k, v in job.get("strategy", {}).get("matrix", {}).items()}
        combos = [dict(zip(axes, values)) for values in itertools.product(*axes.values())]
        tags = [f"{name}{''.join(f'-{v}' for v in m.values())}" for m in combos]
        if cancel and cancel[0] in tags:
            combos, tags = [m for m, t in zip(combos, tags) if t == cancel[0]], [cancel[0]]
        runs = [gh_job(job, {**contexts, "matrix": m}, store, project, tag,
                       (cancel[1], cancel[2]) if cancel and tag == cancel[0] else None)
                for m, tag in zip(combos, tags)]
        TOOK.update({tag: r["took"] for tag, r in zip(tags, runs)})
        needs[name] = {"result": "success" if all(r["result"] == "success" for r in runs) else "failure",
                       "outputs": {k: v for r in runs for k, v in r["outputs"].items()}}
    JOBS.clear()
    JOBS.update(needs)
    print("     github: jobs " + ", ".join(f"{n} {r['result']}" for n, r in needs.items()))
    return merged_dir(HOST / "gh" / "merge" / "merged")
