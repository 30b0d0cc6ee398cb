# SPDX-License-Identifier: GPL-2.0
"""Commands to the guest's agent (STOP, TASKS, CORE, and the GO and HOLD the
watch sends) and the bounded waits for its answers, read through the
watch's streams. A part of Watch (harness/guest/watch.py), which has the
streams, the agent's state and the VM."""
from __future__ import annotations

import time
from typing import Callable

from harness.guest.agent import AgentChannel
from harness.guest.streams import BlobReader
from harness.guest.vm import VM

# the agent lists the reproducer's threads from /proc at once on CORE, before the
# kernel writes the core: no line by then means the agent never read the request
CORE_ANSWER_S = 20.0


class AgentTalk:
    vm: VM
    agent: AgentChannel
    syms: BlobReader
    # blob tag -> the acknowledgement the agent waits for, bounded, before it powers off
    _acks: dict[str, bytes]
    unanswered: str  # why a command the host sent went unanswered (take_core)
    _pump: Callable[[float], bool]
    _drain: Callable[[], None]

    def _send(self, command: bytes) -> None:
        assert self.vm.agent is not None
        self.vm.agent.setblocking(True)
        try:
            self.vm.agent.settimeout(5)
            self.vm.agent.sendall(command)
        except OSError:
            pass  # QEMU gone: the caller's next look will see it
        finally:
            self.vm.agent.setblocking(False)

    def finish(self, timeout: float = 10.0) -> bool:
        """Ask the agent to end the reproducer now (it still prints its final
        results) and read until it has exited; whether it did in time."""
        self._send(b"STOP\n")
        deadline = time.monotonic() + timeout
        while self.agent.exit_code is None and self.vm.alive() and time.monotonic() < deadline:
            self._pump(0.05)
        self._pump(0)
        return self.agent.exit_code is not None

    def ask_tasks(self, tids: list[int], timeout: float = 10.0) -> dict[int, dict]:
        """The agent's view of these tasks (their kernel stacks, wait
        channels, states), asked for and waited on, bounded; by tid."""
        ended = self.agent.tasks_ended
        self._send(f"TASKS {','.join(str(t) for t in tids[:256])}\n".encode())
        deadline = time.monotonic() + timeout
        while self.agent.tasks_ended == ended and self.vm.alive() and time.monotonic() < deadline:
            self._pump(0.05)
        return {t: self.agent.tasks[t] for t in tids if t in self.agent.tasks}

    def wait_for_blob(self, tag: str, timeout: float) -> bool:
        """Read on until the guest's blob has all come (its symbols, on a
        kernel's first run), bounded; whether it did."""
        deadline = time.monotonic() + timeout
        while not self.syms.complete(tag) and self.vm.alive() and time.monotonic() < deadline:
            self._pump(0.05)
        return self.syms.complete(tag)

    def take_core(self, timeout: float = 60.0) -> bytes | None:
        """Have the agent dump the stuck reproducer (its threads from /proc,
        then the kernel's core of it) and wait, bounded, for the core; None
        when the agent reported none (unanswered says so when it never
        answered: its heartbeats came, its command reader was deaf)."""
        self.syms.expect("CORE", self.vm.cfg.memory_mb << 20)  # no process is bigger than the guest
        self._acks["CORE"] = b"CORE-OK\n"
        self._send(b"CORE\n")
        asked = time.monotonic()
        deadline = asked + timeout
        info = lambda: self.agent.core_info  # noqa: E731 - filled in as the agent's line arrives

        def arrived() -> bool:  # the blob comes before the agent's line about it
            return bool(info()) and ("bytes" not in info() or "CORE" in self.syms.blobs)
        while time.monotonic() < deadline:
            if arrived():
                break
            if (time.monotonic() - asked > CORE_ANSWER_S and not self.agent.proc_threads and not info()
                    and self.agent.exit_code is None):
                self.unanswered = f"the agent did not answer the core request in {CORE_ANSWER_S:g}s"
                break
            if not self.vm.alive():  # take what it sent
                self._drain()
                break
            self._pump(0.05)
        return self.syms.blobs.get("CORE") if "bytes" in info() else None
