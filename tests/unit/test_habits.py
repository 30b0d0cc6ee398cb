# SPDX-License-Identifier: GPL-2.0
"""The house's habits, checked on every run: a linter and a type checker
whose finding counts (tests/habits.toml) may fall and never grow, one
line width, and a front page that shows each figure once."""
import re
import subprocess
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
LIMITS = tomllib.loads((REPO / "tests" / "habits.toml").read_text())
CODE = ["harness", "images", "gdbscripts"]


def _python_files() -> list[str]:
    out = subprocess.run(["git", "ls-files", "*.py"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    return [f for f in out.split() if not f.startswith("tests/fixtures/")]


def _run(cmd: list[str]) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300)
    except FileNotFoundError:
        raise AssertionError(f"{cmd[0]} is not installed: `make deps` installs it (ci/debian-packages.txt)") from None


def test_pyflakes_finds_no_more_than_recorded():
    p = _run(["pyflakes3", *CODE, "tests"])
    found = [l for l in p.stdout.splitlines() if l.strip() and "tests/fixtures/" not in l]
    assert len(found) <= LIMITS["pyflakes"], "\n".join(found)


def test_mypy_finds_no_more_errors_than_recorded():
    p = _run(["mypy", "--python-executable", "/usr/bin/python3", "--ignore-missing-imports",
              "--cache-dir", str(REPO / "build" / "mypy-cache"), *CODE])
    errors = [l for l in p.stdout.splitlines() if re.search(r": error: ", l)]
    print(f"mypy: {len(errors)} errors (recorded: {LIMITS['mypy']})")
    assert errors or p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    assert len(errors) <= LIMITS["mypy"], "\n".join(errors)


def test_no_line_is_wider_than_the_house_width():
    width = LIMITS["line_width"]
    wide = [f"{f}:{n}" for f in _python_files()
            for n, line in enumerate((REPO / f).read_text().splitlines(), 1) if len(line) > width]
    assert wide == [], f"lines over {width} characters:\n" + "\n".join(wide)


def test_the_front_pages_measured_table_has_one_row_per_figure_and_how_to_take_it():
    """A newcomer wants today's figures: the latest of each, once, with the
    command that takes it again; the dated history is tests/bench/MEASUREMENTS.md."""
    text = (REPO / "README.md").read_text()
    table = text.split("## Measured", 1)[1].split("\n## ", 1)[0]
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in table.splitlines()
            if line.startswith("| ") and not line.startswith("| figure")]
    figures = [r[0] for r in rows]
    assert rows and len(figures) == len(set(figures)), figures
    assert all(len(r) == 3 and r[2] for r in rows), rows
    assert (REPO / "tests" / "bench" / "MEASUREMENTS.md").is_file()
