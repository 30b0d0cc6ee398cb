# SPDX-License-Identifier: GPL-2.0
"""The reproducers kstall knows: repro/<name>.toml next to their C sources."""
from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path

from harness.base import paths

REPRO_DIR = paths.data_file("repro")


@dataclass(frozen=True)
class KernelNeeds:
    """Kernel config options something needs ([kernel] in its data file), and
    the module behind each tristate one."""
    owner: str
    options: tuple[str, ...] = ()
    modules: tuple[tuple[str, str], ...] = ()  # (option, module name)

    @staticmethod
    def from_doc(owner: str, doc: dict) -> "KernelNeeds":
        k = doc.get("kernel", {})
        return KernelNeeds(owner, tuple(k.get("options", ())), tuple(k.get("modules", {}).items()))


@dataclass(frozen=True)
class StallPath:
    """A code path the reproducer times itself ([stall.paths.NAME])."""
    name: str
    title: str          # "NMI reserve"
    progress: str       # the prefix of its fields in progress lines (nmi_max_ns, nmi_over)
    threshold_ms: float  # slower than this is a stall
    arg: str            # the reproducer's argument that sets the threshold


@dataclass(frozen=True)
class StallSpec:
    """A reproducer that measures latencies ([stall]): one measurement past its
    path's threshold is a stall, min_stalls of them a VULNERABLE verdict."""
    paths: tuple[StallPath, ...]
    min_stalls: int = 1
    measure: str = "measurement"   # what one measurement is: "3 reserves >= 50 ms"
    count_field: str = "count"     # the stats field that counts measurements
    title: str = "latency"         # what the chart shows
    signature: str = "latency-stall"  # the verdict's signature when a path stalls

    def thresholds(self) -> dict[str, float]:
        return {p.name: p.threshold_ms for p in self.paths}

    def titles(self) -> dict[str, str]:
        return {p.name: p.title for p in self.paths}

    @staticmethod
    def from_doc(doc: dict) -> "StallSpec | None":
        if not doc.get("paths"):
            return None
        paths = tuple(StallPath(name, p.get("title", name), p.get("progress", name), float(p["threshold_ms"]), p["arg"])
                      for name, p in doc["paths"].items())
        known = {k: doc[k] for k in ("measure", "count_field", "title", "signature") if k in doc}
        return StallSpec(paths, int(doc.get("min_stalls", 1)), **known)


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
    default_args: tuple[str, ...] = ()
    nmi_rate: float = 0.0          # NMIs/s the host injects when the guest asks
    stall: StallSpec | None = None  # None: the reproducer measures no latencies
    needs: KernelNeeds = KernelNeeds("")
    # "kernel": a hang is read from the vCPUs (GDB on QEMU's gdbstub);
    # "process": from the stuck reproducer's threads (GDB on its core)
    hang: str = "kernel"

    def stall_thresholds(self) -> dict[str, float]:
        return self.stall.thresholds() if self.stall else {}


AGENT = "agent"  # repro/agent.toml: the guest agent's needs, not a reproducer


def agent_needs() -> KernelNeeds:
    with open(REPRO_DIR / f"{AGENT}.toml", "rb") as f:
        return KernelNeeds.from_doc(AGENT, tomllib.load(f))


def names() -> list[str]:
    return sorted(p.stem for p in REPRO_DIR.glob("*.toml") if p.stem != AGENT)


def load(name: str) -> Reproducer:
    path = REPRO_DIR / f"{name}.toml"
    if name == AGENT or not path.is_file():
        raise KeyError(f"unknown reproducer {name!r}; known: {', '.join(names())}")
    return from_file(path)


def from_file(path: Path) -> Reproducer:
    """A reproducer's data file (repro/NAME.toml, or one kept elsewhere)."""
    with open(path, "rb") as f:
        d = tomllib.load(f)
    return Reproducer(name=d["name"], binary=d["binary"], summary=d["summary"], count_name=d["count_name"],
                      min_count=int(d["min_count"]), count_arg=d["count_arg"], duration_arg=d["duration_arg"],
                      max_seconds=float(d["max_seconds"]), stuck_after_s=float(d["stuck_after_s"]),
                      default_cpus=int(d["default_cpus"]), default_args=tuple(d.get("default_args", ())),
                      nmi_rate=float(d.get("nmi", {}).get("rate", 0)), stall=StallSpec.from_doc(d.get("stall", {})),
                      needs=KernelNeeds.from_doc(d["name"], d), hang=d.get("hang", "kernel"))
