# SPDX-License-Identifier: GPL-2.0
"""Did the program run as intended? A run that hung nothing is evidence
that the kernel is fixed only if the kernel let the program do its work.
The guest agent's account (repro/agent/health.c, health_watch: "KSTALL health")
counts the seconds the kernel starved it, the OOM killer's kills and the
program's processes a signal ended; the kernel's count of its calls
(reach.py) says whether its forks failed for want of pids or memory.
Each event is named in the verdict; a run starved for most of its seconds
is INCONCLUSIVE, never NOT_REPRODUCED. The thresholds are data:
starvation.toml."""
from __future__ import annotations

import functools
import signal
import tomllib
from dataclasses import dataclass, field

from harness.analysis.reach import Reach
from harness.base import paths
from harness.base.untrusted import num

FORKS = ("clone", "clone3", "fork", "vfork")
FORK_ERRORS = ("EAGAIN", "ENOMEM")
# how the agent's program ended on its own, not killed: decide.py's FAILED judges those
CRASH_SIGNALS = frozenset({4, 5, 6, 7, 8, 11, 31})


@dataclass(frozen=True)
class Rules:
    lowmem_pct: int
    memstall_pct: int
    pids_pct: int
    mostly: float
    fork_failed: float
    busy_share: float
    own_share: float

    def go_param(self) -> str:
        """The GO line's health=L,P,M (repro/agent/health.c, health_start)."""
        return f"health={self.lowmem_pct},{self.pids_pct},{self.memstall_pct}"


@functools.lru_cache(maxsize=None)
def rules() -> Rules:
    with open(paths.data_file("harness", "analysis", "starvation.toml"), "rb") as f:
        d = tomllib.load(f)
    s, r = d["second"], d["run"]
    return Rules(int(s["lowmem_pct"]), int(s["memstall_pct"]), int(s["pids_pct"]), float(r["mostly"]),
                 float(r["fork_failed"]), float(r["busy_share"]), float(r["own_share"]))


@dataclass
class Starvation:
    seconds: int                 # the seconds the agent watched
    starved_s: int               # of them starved
    events: list[str] = field(default_factory=list)  # each named, with its count
    mostly: bool = False         # no evidence: INCONCLUSIVE
    why: str = ""                # the event that made it so

    def text(self) -> str:
        """'starved for 150 of 193 s: the OOM killer killed 520 tasks (in 150 s); ...'"""
        head = f"starved for {self.starved_s} of {self.seconds} s" if self.starved_s else "not starved by the second"
        return f"{head}: {'; '.join(self.events)}"

    def to_json(self) -> dict:
        return {"seconds": self.seconds, "starved_s": self.starved_s, "events": self.events,
                "mostly": self.mostly, "why": self.why}


def _signal_name(n: int) -> str:
    try:
        return signal.Signals(n).name
    except ValueError:
        return f"signal {n}"


def killed(text: str) -> dict[int, int]:
    """The agent's killed=9:520,15:2 (signal: processes), bounded."""
    out: dict[int, int] = {}
    for part in (text or "").split(",")[:64]:
        sig, _, count = part.partition(":")
        if (s := num(sig)) is not None and (c := num(count)) is not None and 0 < s < 65 and c > 0:
            out[s] = c
    return out


def forks_failed(r: Reach | None) -> tuple[int, int, dict[str, int]]:
    """The program's forks, those that failed for want of pids or memory, and by which error."""
    if r is None:
        return 0, 0, {}
    total, errors = 0, dict[str, int]()
    for name in FORKS:
        c = r.calls.get(name)
        if c is None:
            continue
        total += c.count
        for e in FORK_ERRORS:
            if c.errors.get(e):
                errors[e] = errors.get(e, 0) + c.errors[e]
    return total, sum(errors.values()), errors


def judge(health: dict | None, r: Reach | None = None, rules_: Rules | None = None, cpus: int = 1
          ) -> Starvation | None:
    """What the agent's account and the program's calls say of the run;
    None when the agent gave no account (an older agent, a frozen guest)."""
    rl = rules_ or rules()
    if not health:
        return None
    n = {k: num(v) or 0 for k, v in health.items() if k != "killed"}
    secs = n.get("secs", 0)
    st = Starvation(secs, min(n.get("starved_s", 0), secs))
    if n.get("oom_kills"):
        st.events.append(f"the OOM killer killed {n['oom_kills']} task{'s' * (n['oom_kills'] != 1)} "
                         f"(in {n.get('oom_s', 0)} s)")
    outside = {s: c for s, c in killed(health.get("killed", "")).items() if s not in CRASH_SIGNALS}
    for s, c in sorted(outside.items(), key=lambda x: -x[1]):
        st.events.append(f"{c} of its processes died of {_signal_name(s)} before its time was up")
    if n.get("lowmem_s"):
        st.events.append(f"its memory ran low for {n['lowmem_s']} s (under {rl.lowmem_pct}% available; "
                         f"least {n.get('min_avail_kb', 0) // 1024} MiB of {n.get('total_kb', 0) // 1024} MiB)")
    if n.get("memstall_s"):
        st.events.append(f"every task stalled on memory for over {rl.memstall_pct}% of {n['memstall_s']} s")
    if n.get("pids_s"):
        st.events.append(f"its tasks neared the kernel's limit for {n['pids_s']} s "
                         f"({n.get('max_tasks', 0)} of {n.get('task_limit', 0)})")
    total, failed, errors = forks_failed(r)
    if errors.get("ENOMEM") and not (n.get("oom_kills") or n.get("lowmem_s") or n.get("memstall_s")):
        # memory to spare: alloc_pid() fails ENOMEM in a pid namespace whose
        # init has exited (syzkaller's sandbox gave up, and its parent's
        # fork loop went on forking into the dead namespace), not for want
        # of memory; named for what it is, and counted all the same: the
        # program stopped running there, whatever stopped it
        dead = errors.pop("ENOMEM")
        st.events.append(f"{dead} of its {total} forks failed ENOMEM with memory to spare: the pid namespace "
                         "they forked into had lost its first process (its sandbox ended before its time)")
    if errors:
        st.events.append(f"{sum(errors.values())} of its {total} forks failed ("
                         + ", ".join(f"{e} {c}" for e, c in sorted(errors.items(), key=lambda x: -x[1]))
                         + ": no pids or memory left)")
    busy, own = n.get("busy_ms", 0), n.get("cpu_ms", 0)
    if secs and busy >= rl.busy_share * secs * 1000 * cpus and own < rl.own_share * busy:
        st.events.append(f"the guest's CPUs were busy mostly outside it (the program {own / busy:.0%} "
                         f"of {busy / 1000:.0f} CPU-s)")
    if secs and st.starved_s >= rl.mostly * secs:
        st.mostly, st.why = True, f"starved for {st.starved_s} of {secs} s"
    elif total and failed >= rl.fork_failed * total:
        st.mostly, st.why = True, f"{failed} of its {total} forks failed"
    return st
