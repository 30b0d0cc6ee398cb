# SPDX-License-Identifier: GPL-2.0
"""arm64 guests, booted for real (qemu-system-aarch64 under TCG on this
host): Debian's arm64 kernels with the perf REFRESH freeze and its fix, a
user's C file cross-built, an executable of the wrong architecture, kernels
told arm64 by their package and image header, the NMI path that cannot run
there, and a bisection over arm64 versions."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

import distro_assets
from helpers import REPO, calibrated_p_miss, kstall, kstall_processes, verify_json, verify_past_the_other_arm64_perf_bug

pytestmark = pytest.mark.e2e
PROGRAMS = REPO / "tests" / "programs"


@pytest.fixture(autouse=True)
def no_leftover_processes():
    yield
    assert kstall_processes() == [], "a qemu or gdb outlived its run"


def verify_fixed(tmp_path, *args: str) -> tuple[int, dict, str]:
    return verify_past_the_other_arm64_perf_bug(tmp_path, "NOT_REPRODUCED", *args)


def culprits(doc: dict) -> list[dict]:
    return [c for c in doc["cpus"] if c["role"] == "culprit"]


def test_6_16_12_arm64_freezes_in_the_hrtimer_cancel_loop_and_names_the_other_cpu(tmp_path):
    rc, doc, err = verify_json(tmp_path, "debian:6.16.12", "perf-refresh", "--arch", "arm64")
    assert rc == 1 and doc["verdict"] == "VULNERABLE", err[-2000:]
    assert doc["kernel"]["arch"] == "aarch64" and doc["vm"]["arch"] == "aarch64"
    assert doc["signature"] == "hrtimer_cancel_self_deadlock"
    (culprit,) = culprits(doc)
    assert any(f.lstrip("? ").startswith("hrtimer_cancel+") for f in culprit["frames"]), culprit["frames"]
    other = next(c for c in doc["cpus"] if c["cpu"] != culprit["cpu"])
    assert other["class"] != "unknown" and "csd" not in other["signature"]  # said by what it does


def test_6_17_8_arm64_is_not_reproduced_with_a_p_miss_calibrated_on_arm64(tmp_path):
    rc, doc, err = verify_fixed(tmp_path, "debian:6.17.8", "perf-refresh", "--arch", "arm64")
    assert rc == 0 and doc["verdict"] == "NOT_REPRODUCED", err[-2000:]
    if (pm := calibrated_p_miss(doc)) is not None:
        assert pm["p_miss"] is not None and pm["p_miss"] <= 1e-6, pm
        assert pm["calibration"].endswith("perf-refresh.aarch64.toml") and "arm64" in pm["method"], pm


def test_a_users_c_file_is_cross_built_and_gives_the_same_verdicts(tmp_path):
    rc, doc, err = verify_json(tmp_path, "debian:6.16.12", str(PROGRAMS / "other_refresh.c"), "--arch", "arm64")
    assert rc == 1 and doc["signature"] == "hrtimer_cancel_self_deadlock", err[-2000:]
    rc, doc, err = verify_fixed(tmp_path, "debian:6.17.8", str(PROGRAMS / "other_refresh.c"), "--arch", "arm64")
    assert rc == 0 and doc["verdict"] == "NOT_REPRODUCED", err[-2000:]


def test_an_x86_64_executable_on_an_arm64_guest_is_a_usage_error_naming_both(tmp_path):
    exe = REPO / "build" / "guest" / "x86_64" / "perf-refresh"
    p = kstall("verify", "debian:6.17.8", str(exe), "--arch", "arm64", "--results", str(tmp_path))
    assert p.returncode == 2, p.stderr[-2000:]
    assert "x86_64 executable" in p.stderr and "aarch64" in p.stderr


def test_an_arm64_deb_and_an_arm64_image_file_boot_as_arm64_untold(tmp_path):
    debs = distro_assets.debian_debs("6.16.12-arm64")
    rc, doc, err = verify_json(tmp_path, "deb:" + ",".join(map(str, debs)), "perf-refresh")
    assert rc == 1 and doc["kernel"]["arch"] == "aarch64", err[-2000:]
    image = Path(doc["kernel"]["vmlinuz"])
    rc, doc, err = verify_json(tmp_path, f"file:{image}", "perf-refresh")
    assert rc == 1 and doc["kernel"]["arch"] == "aarch64" and doc["vm"]["arch"] == "aarch64", err[-2000:]


def test_the_bpf_ringbuf_nmi_path_is_inconclusive_before_boot_naming_the_missing_nmi(tmp_path):
    rc, doc, err = verify_json(tmp_path, "debian:6.16.12", "bpf-ringbuf", "--arch", "arm64")
    assert rc == 3 and doc["verdict"] == "INCONCLUSIVE", err[-2000:]
    assert "no NMI" in doc["reason"] and doc["timings"].get("boot_s") is None


def test_bisect_over_arm64_versions_names_the_boundary(tmp_path):
    p = kstall("bisect", "debian", "--arch", "arm64", "--old", "6.12.118", "--new", "6.16.12", "perf-refresh",
               "--results", str(tmp_path), timeout=1200)
    assert p.returncode in (0, 1), p.stderr[-3000:]
    done = [d for d in tmp_path.glob("*-bisect-debian-*") if not d.name.startswith(".")]
    doc = json.loads((done[0] / "bisect.json").read_text())
    assert doc["status"] == "done" and doc["direction"] == "regression", doc
    states = {s["candidate"]: s["state"] for s in doc["steps"]}
    assert states[doc["last_old"]] == "clean" and states[doc["first_new"]] == "reproduces"
    assert doc["old"].endswith("-arm64") and doc["new"].endswith("-arm64")


def test_a_host_command_on_an_arm64_guest_is_a_usage_error_naming_both(tmp_path):
    p = kstall("verify", "debian:6.17.8", "run:true", "--arch", "arm64", "--results", str(tmp_path))
    assert p.returncode == 2, p.stderr[-2000:]
    assert "x86_64" in p.stderr and "aarch64 guest cannot run them" in p.stderr
