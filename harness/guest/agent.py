# SPDX-License-Identifier: GPL-2.0
"""What the guest agent (repro/agent/) says on its channel, as state: its
hello and its gate, heartbeats with guest time and the progress count, the
reproducer's KTAP output and progress lines, its exit and the power-off, and
for a stuck process its threads and core. Each line is guest text: bounded,
and nothing here raises on it."""
from __future__ import annotations

import re
from typing import Callable

from harness.analysis import sleeping, threads
from harness.analysis.ktap import KV, Ktap, unnest
from harness.base.untrusted import num

_HB = re.compile(r"^HB (\d{1,20}) (\d{1,20}) (\d{1,20})$")
# the agent forwards the reproducer's output behind this (repro/agent/run.c); a
# line without it is the agent's own (older agents': the reproducer's too)
PROGRAM = "| "
# a heartbeat gap past this (one beat missed and more) is kept, to be set against
# what the host held the guest back by meanwhile (Watch.unexplained_gap)
LONG_GAP_S = 0.08
MAX_LONG_GAPS = 10_000
# the agent's environment steps say how they went (repro/agent/channel.c env_say), a boot's among them
ENV_SAYS = "# kstall-env: "
MAX_ENV_LINES = 6_000  # the agent sends at most 4,000 histogram lines, 1,000 module requests, 32 checks


class AgentChannel:
    def __init__(self, say: Callable[[str], None], cpus: int, stalls: int = 0,
                 on_repro_start: Callable[[], None] | None = None, on_line: Callable[[str], None] | None = None,
                 clock: Callable[[], float] | None = None) -> None:
        self.say = say
        self.cpus = cpus          # the vCPUs the guest was given
        self.stalls = stalls      # > 0: a progress line's over= reaching this is a stall
        self.on_repro_start = on_repro_start  # called once the reproducer's first line arrives
        self.on_line = on_line    # called with every reproducer line but progress lines
        self.clock = clock        # re-reads the time after on_repro_start, which may hold the guest
        self.t0 = 0.0             # when QEMU started (for the boot time said on hello)
        self.hello: dict = {}
        self.hello_at: float | None = None
        self.ready_at: float | None = None
        self.syms_info: dict = {}
        self.first_hb_at: float | None = None
        self.last_hb_at: float | None = None
        self.last_hb_guest_ns = 0
        self.hb_count = 0
        self.max_hb_gap = 0.0
        self.long_gaps: list[tuple[float, float]] = []  # (from, to) of heartbeat gaps over LONG_GAP_S
        self.repro_started_at: float | None = None
        self.count = 0
        self.count_changed_at: float | None = None
        self.exit_code: int | None = None
        self.poweroff = False
        self.ktap = Ktap()
        self.progress: dict = {}  # fields of the reproducer's last progress line
        self.max_at: dict[str, float] = {}  # a timed path's progress prefix -> when its maximum last grew
        self.stall_at: float | None = None
        self.proc_threads: dict[int, threads.ProcThread] = {}  # the agent's /proc view, on CORE
        self.core_info: dict = {}
        self.sleeping: list[dict] = []  # tasks asleep in D state past the threshold (analysis/sleeping.py)
        self.sleeping_at: float | None = None
        # a guest environment's account of the program (harness/analysis/reach.py): the system
        # calls the kernel counted, the modules it asked for, the paths checked at the end
        self.env_lines: list[str] = []
        self.leftovers: list[dict] = []  # tasks that did not die when the time was up
        self.health: dict = {}  # whether the program ran as intended (harness/analysis/starvation.py)
        self.tasks: dict[int, dict] = {}  # the tasks the host asked about (TASKS), by tid
        self.tasks_ended = 0  # how many TASKS answers have ended
        # the agent reports for the program (a program that knows nothing of kstall, a
        # time-boxed one): its own "KTAP version 1" came, and the program's lines are output only
        self.framed = False

    def feed(self, line: str, now: float) -> None:
        if line.startswith(PROGRAM):  # the reproducer's own line: never the agent's, whatever it says
            self._reproducer_says(line[len(PROGRAM):], now, program=self.framed)
        elif (m := _HB.match(line)) is not None:
            self._heartbeat(m, now)
        elif line.startswith("KSTALL "):
            self._agent_says(line, now)
        else:  # the agent's own: a framed run's KTAP, or an older agent's forwarding
            self.framed = self.framed or line == "KTAP version 1"
            self._reproducer_says(line, now)

    def _heartbeat(self, m: re.Match, now: float) -> None:
        if self.last_hb_at is not None:
            self.max_hb_gap = max(self.max_hb_gap, now - self.last_hb_at)
            if now - self.last_hb_at > LONG_GAP_S and len(self.long_gaps) < MAX_LONG_GAPS:
                self.long_gaps.append((self.last_hb_at, now))
        else:
            self.first_hb_at = now
        self.last_hb_at = now
        self.last_hb_guest_ns = int(m.group(2))
        self.hb_count += 1
        if "count" not in self.ktap.result_fields:  # a heartbeat may trail the final count with an older one
            self._set_count(int(m.group(3)), now)

    def _agent_says(self, line: str, now: float) -> None:
        what = line.split()[1]
        fields = dict(KV.findall(line))
        if what == "hello":
            self.hello, self.hello_at = fields, now
            self.say(f"guest up in {now - self.t0:.1f}s: {fields.get('uname', '?')}, {fields.get('cpus', '?')} CPUs")
            if fields.get("cpus", "").isdigit() and int(fields["cpus"]) < self.cpus:
                self.say(f"warning: the guest brought up {fields['cpus']} of its {self.cpus} vCPUs "
                         "(a kernel without SMP, or firmware tables it cannot read)")
        elif what == "syms":
            self.syms_info = fields
        elif what == "ready":
            self.ready_at = now
        elif what == "exit":
            self.exit_code = num(fields.get("code"), -1)
        elif what == "poweroff":
            self.poweroff = True
        elif what == "thread" and (t := threads.from_agent_line(line)) is not None:
            self.proc_threads[t.tid] = t
        elif what == "core":
            self.core_info = fields
        elif what in ("hist", "modprobe", "check") and len(self.env_lines) < MAX_ENV_LINES:
            self.env_lines.append(line)
        elif what == "health":
            self.health = fields
        elif what == "leftover" and len(self.leftovers) < 64:
            self.leftovers.append(sleeping.task_from_fields(fields) | {"state": fields.get("state", "?")})
        elif what == "task" and len(self.tasks) < 1024 and fields.get("tid", "").isdigit():
            self.tasks[int(fields["tid"])] = sleeping.task_from_fields(fields) | {"state": fields.get("state", "?")}
        elif what == "tasks-end":
            self.tasks_ended += 1
        elif what == "dstate" and len(self.sleeping) < 64:
            self.sleeping.append(sleeping.task_from_fields(fields))
            if self.sleeping_at is None:
                self.sleeping_at = now

    def _reproducer_says(self, line: str, now: float, program: bool = False) -> None:
        """A line of the run's TAP. program: a program the agent reports for
        printed it: its output, never the run's progress or result (a
        program that printed "ok 1" or "# result count=9" once ended the
        stuck watch, or set the count)."""
        if self.repro_started_at is None and not line.startswith(ENV_SAYS):  # the environment's steps: no start
            self.repro_started_at = self.count_changed_at = now
            if self.on_repro_start:
                self.on_repro_start()
                if self.clock:  # the hook may have held the guest (a debugger): restart the clocks
                    now = self.clock()
                    self.repro_started_at = self.count_changed_at = now
                    if self.last_hb_at is not None:
                        self.last_hb_at = now
        line = unnest(line)
        if program:
            self.ktap.feed(line, program=True)
            if self.on_line:
                self.on_line(line)
            return
        if line.startswith("# progress "):
            f = dict(KV.findall(line))
            for key, value in f.items():  # PREFIX_max_ns: a timed path's longest latency so far
                if key.endswith("_max_ns") and num(value, 0) > num(self.progress.get(key), 0):
                    self.max_at[key[:-len("_max_ns")]] = now
            self.progress = f
            self._set_count(num(f.get("count"), self.count), now)
            if self.stalls and num(f.get("over"), 0) >= self.stalls and self.stall_at is None:
                self.stall_at = now
            return
        self.ktap.feed(line)
        if line.startswith("# result ") and num(self.ktap.result_fields.get("count")) is not None:
            self.count = num(self.ktap.result_fields["count"])  # the final word on the count
        if self.on_line:
            self.on_line(line)

    def _set_count(self, count: int, now: float) -> None:
        if count != self.count:
            self.count = count
            self.count_changed_at = now

    @property
    def running(self) -> bool:
        """The reproducer has started and not yet ended."""
        return self.repro_started_at is not None and self.exit_code is None and not self.ktap.results

    def restart_clocks(self, now: float) -> None:
        """The freeze and stuck clocks start afresh (a false alarm, the GO after the gate)."""
        if self.last_hb_at is not None:
            self.last_hb_at = now
        if self.count_changed_at is not None:
            self.count_changed_at = now
