# SPDX-License-Identifier: GPL-2.0
"""The reproducers kstall knows: repro/<name>.toml next to their C sources."""
from __future__ import annotations

import tomllib
from dataclasses import dataclass

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
    # path -> (threshold in ms, the reproducer's argument that sets it);
    # empty: the reproducer measures no latencies
    stall_paths: tuple[tuple[str, float, str], ...] = ()
    min_stalls: int = 1
    needs: KernelNeeds = KernelNeeds("")
    # "kernel": a hang is read from the vCPUs (GDB on QEMU's gdbstub);
    # "process": from the stuck reproducer's threads (GDB on its core)
    hang: str = "kernel"

    def stall_thresholds(self) -> dict[str, float]:
        return {path: ms for path, ms, _ in self.stall_paths}


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
    with open(path, "rb") as f:
        d = tomllib.load(f)
    return Reproducer(name=d["name"], binary=d["binary"], summary=d["summary"], count_name=d["count_name"],
                      min_count=int(d["min_count"]), count_arg=d["count_arg"], duration_arg=d["duration_arg"],
                      max_seconds=float(d["max_seconds"]), stuck_after_s=float(d["stuck_after_s"]),
                      default_cpus=int(d["default_cpus"]), default_args=tuple(d.get("default_args", ())),
                      nmi_rate=float(d.get("nmi", {}).get("rate", 0)),
                      stall_paths=tuple((path, float(p["threshold_ms"]), p["arg"])
                                        for path, p in d.get("stall", {}).get("paths", {}).items()),
                      min_stalls=int(d.get("stall", {}).get("min_stalls", 1)),
                      needs=KernelNeeds.from_doc(d["name"], d), hang=d.get("hang", "kernel"))
