# SPDX-License-Identifier: GPL-2.0
"""Four kstall processes on one cold cache: the same kernels fetched, their
PVH ELFs decompressed (by two cells of one matrix, threads of one pid),
their symbols captured and their snapshots saved side by side. Every verdict
is right, none is an internal error, and nothing half-made is left."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from harness.base import paths
from images.guest import kselftest
from helpers import KSTALL, SERVES, kstall_processes, run_dirs_of, wait_for

pytestmark = pytest.mark.e2e


def test_four_processes_on_one_cold_cache_agree_and_leave_nothing_half_made_and_a_damaged_kernel_is_fetched_again(
        tmp_path):
    cache = tmp_path / "cache"
    env = dict(os.environ, KSTALL_CACHE=str(cache))
    matrix = tmp_path / "m.toml"
    matrix.write_text('[[reproducer]]\nname = "perf-refresh"\n\n[[reproducer]]\nname = "signal-malloc"\n\n'
                      '[[kernel]]\nspec = "debian:7.3.4"\n'
                      'expect = { perf-refresh = "not_reproduced", signal-malloc = "vulnerable" }\n')
    cmds = {"matrix": [*KSTALL, "matrix", str(matrix), "--json", "--results", str(tmp_path / "m")],
            "fixed": [*KSTALL, "verify", "debian:7.3.4", "bpf-ringbuf", "--json", "--results", str(tmp_path / "a")],
            "hung": [*KSTALL, "verify", "debian:6.16.12", "perf-refresh", "--json", "--results", str(tmp_path / "b")],
            "again": [*KSTALL, "verify", "debian:6.16.12", "perf-refresh", "--json", "--results", str(tmp_path / "c")]}
    procs = {k: subprocess.Popen(c, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
             for k, c in cmds.items()}
    outs = {k: p.communicate(timeout=1200) for k, p in procs.items()}
    docs = {k: json.loads(out) for k, (out, _) in outs.items()}
    said = {k: err for k, (_, err) in outs.items()}
    assert [c["status"] for c in docs["matrix"]["cells"]] == ["pass", "pass"], said["matrix"][-2000:]
    assert docs["fixed"]["verdict"] == "NOT_REPRODUCED", said["fixed"][-2000:]
    assert docs["hung"]["verdict"] == docs["again"]["verdict"] == "VULNERABLE", said["hung"][-1000:]
    assert not any("internal error" in err for err in said.values())
    assert [p.returncode for p in procs.values()] == [0, 0, 1, 1]
    # each package fetched once, whole; no temporary file or part left half-made
    fetched = [line.split(":")[1].strip() for err in said.values() for line in err.splitlines()
               if ": 100% of" in line]
    assert fetched and len(fetched) == len(set(fetched)), fetched
    leftovers = [p for p in cache.rglob("*") if p.name.endswith((".part", ".tmp")) or
                 (p.name.startswith(".") and p.is_file() and p.parent.name not in ("locks",))]
    assert leftovers == []
    assert len(list((cache / "kernels" / "debian").iterdir())) == 2
    assert wait_for(lambda: not kstall_processes(), 10) is not None
    assert run_dirs_of({p.pid for p in procs.values()}) == []  # their own, whatever another kstall keeps
    # a kernel damaged in the cache is known by its hash and fetched again
    vmlinuz = next((cache / "kernels" / "debian").glob("7.3.4*")) / "vmlinuz"
    vmlinuz.write_bytes(vmlinuz.read_bytes()[:1_000_000])
    p = subprocess.run([*KSTALL, "verify", "debian:7.3.4", SERVES, "--results", str(tmp_path / "d")],
                       capture_output=True, text=True, env=env, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "is damaged (vmlinuz sha256 mismatch (1000000 bytes)): fetching it again" in p.stderr
    assert "linux-binary-7.3.4+deb13-amd64: 100% of" in p.stderr  # 7.3.4's image is the linux-binary package


def test_a_fresh_clones_guest_is_built_once_by_processes_that_start_side_by_side(tmp_path):
    """A fresh clone's default matrix starts its cells side by side, and each
    cell's `make guest` used to write the same binaries: both cells ERROR."""
    repo = Path(__file__).resolve().parents[2]
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(repo), str(clone)], check=True, timeout=120)
    probe = ("import sys; sys.path.insert(0, '.'); from harness.drivers import case; "
             "case.ensure_guest(lambda m: print(m, flush=True))")
    cache = tmp_path / "cache"
    # the kernel's kselftest headers, which `make guest` takes from the cache: their fetch and
    # extraction from Debian's orig tarball (half a minute of xz) is not this race's
    headers = kselftest.headers().parents[2]  # where images/guest/kselftest.py keeps them
    shutil.copytree(headers, cache / headers.relative_to(paths.cache_dir()))
    env = dict(os.environ, KSTALL_CACHE=str(cache))
    procs = [subprocess.Popen([sys.executable, "-c", probe], cwd=clone, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(3)]
    outs = [p.communicate(timeout=600) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], [err[-2000:] for _, err in outs]
    assert sum("guest binaries" in out for out, _ in outs) == 1, outs
    assert (clone / "build" / "guest" / "x86_64" / "init").is_file()
