# SPDX-License-Identifier: GPL-2.0
"""kstall as an installed tool: its version and its doctor."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from harness.base import arch
from harness.base.paths import REPO
from harness.drivers import doctor


def test_the_version_is_the_trees():
    from harness import cli
    launcher = Path(cli.__file__).with_name("kstall")  # the tree under test's (KSTALL_TREE: an installed one)
    p = subprocess.run([sys.executable, str(launcher), "--version"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and re.fullmatch(r"kstall 0\.\d+\+g[0-9a-f]{12}(\.dirty)?\n", p.stdout), p.stdout


def test_the_doctor_names_what_a_verify_lacks_and_its_fix(monkeypatch):
    findings = doctor.examine(offline=True)
    text, code = doctor.report(findings, as_json=False)
    assert code == 0, text  # this host runs kstall
    assert {f"QEMU for {n}" for n in arch.names()} <= {f.what for f in findings}
    monkeypatch.setenv("KSTALL_QEMU", "/nonexistent/qemu")  # the host's QEMU gone
    text, code = doctor.report(doctor.examine(offline=True), as_json=False)
    host = arch.host()
    assert code == 1 and f"FAIL  QEMU for {host.name}" in text and f"fix: apt install {host.qemu_package}" in text


def test_the_doctor_names_the_packages_a_matrixs_architectures_need(monkeypatch):
    # what the CI templates install before a shard: the packages for the matrix's guests
    assert doctor.matrix_arches(REPO / "ci" / "matrix.toml") == {"x86_64", "aarch64", "ppc64le", "s390x", "riscv64"}
    monkeypatch.setenv("KSTALL_QEMU", "/nonexistent/qemu")
    host = arch.host()
    assert doctor.missing_packages(doctor.examine(offline=True)) == [host.qemu_package]
    both = doctor.missing_packages(doctor.examine(offline=True, needed={"x86_64", "aarch64"}))
    assert both == sorted(arch.get(n).qemu_package for n in ("x86_64", "aarch64"))
    from harness import cli
    p = subprocess.run([sys.executable, str(Path(cli.__file__).with_name("kstall")), "doctor", "--matrix",
                        str(REPO / "ci" / "matrix.toml"), "--packages"], capture_output=True, text=True, timeout=120)
    every = doctor.missing_packages(doctor.examine(offline=True, needed=set(arch.names())))
    assert p.returncode == 0 and p.stdout.split() == every, p.stdout + p.stderr


def test_the_man_page_has_every_command_help_has(tmp_path):
    from harness.cli import build_parser
    from harness.drivers.complete import _subcommands
    out = tmp_path / "kstall.1"
    p = subprocess.run(["argparse-manpage", "--module", "harness.cli", "--function", "build_parser",
                        "--project-name", "kstall", "--url", "https://kstall.invalid", "--output", str(out)],
                       capture_output=True, text=True, timeout=60, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin"})
    assert p.returncode == 0, p.stderr
    page = out.read_text()
    assert all(f"kstall {name}" in page for name in _subcommands(build_parser())), page[:2000]


def test_the_shell_completes_commands_options_and_debian_versions():
    script = (f"source {REPO / 'harness' / 'completion' / 'kstall'}\n"
              'try() { COMP_LINE="$1"; COMP_POINT=${#COMP_LINE}; read -ra COMP_WORDS <<< "$1"; _kstall;'
              ' echo "${COMPREPLY[*]}"; }\n'
              f"try '{REPO / 'harness' / 'kstall'} ver'\n"
              f"try '{REPO / 'harness' / 'kstall'} verify --vmc'\n"
              f"try '{REPO / 'harness' / 'kstall'} verify debian:6.16.12 perf-re'\n")
    p = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60)
    assert p.stdout.splitlines() == ["verify", "--vmcore", "perf-refresh"], p.stdout + p.stderr
    from harness.base import paths
    from harness.drivers import complete
    from harness.cli import build_parser
    specs = complete.candidates("kstall verify debian:6.16.", build_parser())
    assert all(s.startswith("debian:6.16.") for s in specs)  # from the index kstall keeps, when it has one
    if (paths.cache_dir() / "apt" / "kernels.json").is_file():
        p = subprocess.run(["bash", "-c", script.split("try '")[0] + f"try '{REPO / 'harness' / 'kstall'} verify "
                            "debian:6.16.'\n"], capture_output=True, text=True, timeout=60)
        assert "6.16.12" in p.stdout.split(), p.stdout  # bash completes after the colon it splits at


def test_an_installed_tree_gets_no_bytecode_written_into_it(tmp_path):
    """Run as root from a tree marked INSTALLED (as /usr/lib/kstall is), the
    launcher writes no __pycache__ beside the code; a checkout's does as usual."""
    from harness import cli
    real = Path(cli.__file__).parent
    tree = tmp_path / "lib" / "kstall"
    (tree / "harness").mkdir(parents=True)
    shutil.copy2(real / "kstall", tree / "harness" / "kstall")
    for p in real.iterdir():  # the rest of the package as it is, through links
        if p.name not in ("kstall", "__pycache__"):
            (tree / "harness" / p.name).symlink_to(p)
    for top in ("images", "gdbscripts", "repro", "build"):
        (tree / top).symlink_to(real.parent / top)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}

    def version() -> None:
        p = subprocess.run([sys.executable, str(tree / "harness" / "kstall"), "--version"], capture_output=True,
                           text=True, timeout=60, env=env)
        assert p.returncode == 0, p.stderr
    version()
    assert (tree / "harness" / "__pycache__").is_dir()  # a tree of one's own: as Python does
    shutil.rmtree(tree / "harness" / "__pycache__")
    (tree / "INSTALLED").write_text("")
    version()
    assert not (tree / "harness" / "__pycache__").exists()


def test_the_doctor_reads_every_rows_architecture_and_a_c_files_cross_compiler(tmp_path, monkeypatch):
    """A deb: or file: row that says arch = "arm64" is an arm64 guest (CI
    installs what this names before a shard); a matrix that builds a user's C
    file for it needs that architecture's cross compiler and C library."""
    (tmp_path / "mine.c").write_text("int main(void) { return 0; }\n")
    m = tmp_path / "m.toml"
    m.write_text('[[reproducer]]\nname = "mine"\npath = "mine.c"\n'
                 '[[kernel]]\nspec = "deb:/srv/linux-image-6.12.107-arm64.deb"\narch = "arm64"\n'
                 '[[kernel]]\nspec = "file:/boot/vmlinuz"\n')
    foreign = next(n for n in arch.names() if n != arch.host().name)
    assert doctor.matrix_arches(m) == {arch.host().name, foreign} and doctor.matrix_builds_c(m)
    a = arch.get(foreign)
    real_which = doctor.shutil.which
    monkeypatch.setattr(doctor.shutil, "which", lambda t: None if t == a.compiler() else real_which(t))
    missing = doctor.missing_packages(doctor.examine(offline=True, needed={foreign}, builds_c=True))
    assert a.table["cross_package"] in missing
    assert a.table["cross_package"] not in doctor.missing_packages(doctor.examine(offline=True, needed={foreign}))
