# SPDX-License-Identifier: GPL-2.0
"""LAVA: run.sh as LAVA writes it (the parameters, `set -e`, the steps), run
by /bin/sh -e with LAVA's own lava-test-case; its test-case signals read back."""
from __future__ import annotations

import re
import shutil
import subprocess
import time

import yaml

import ci_templates as ct
from clean_root import step
from harness.base import paths
from rehearsal.shell import BASE_ENV, HOST, INSIDE, copy_project, fresh_container, run_script

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


def rehearse(deb_url: str, project: dict[str, str]) -> dict[str, str]:
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
