"""The reproducers kstall knows: repro/<name>.toml next to their C sources."""
from __future__ import annotations

import tomllib
from dataclasses import dataclass

from harness import paths

REPRO_DIR = paths.data_file("repro")


@dataclass(frozen=True)
class Reproducer:
    name: str
    binary: str
    summary: str
    count_name: str
    min_count: int
    count_arg: str
    duration_arg: str
    max_seconds: float
    stuck_after_s: float
    default_cpus: int


def names() -> list[str]:
    return sorted(p.stem for p in REPRO_DIR.glob("*.toml"))


def load(name: str) -> Reproducer:
    path = REPRO_DIR / f"{name}.toml"
    if not path.is_file():
        raise KeyError(f"unknown reproducer {name!r}; known: {', '.join(names())}")
    with open(path, "rb") as f:
        d = tomllib.load(f)
    return Reproducer(name=d["name"], binary=d["binary"], summary=d["summary"], count_name=d["count_name"],
                      min_count=int(d["min_count"]), count_arg=d["count_arg"], duration_arg=d["duration_arg"],
                      max_seconds=float(d["max_seconds"]), stuck_after_s=float(d["stuck_after_s"]),
                      default_cpus=int(d["default_cpus"]))
