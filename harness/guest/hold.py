# SPDX-License-Identifier: GPL-2.0
"""A hung guest kept stopped for the developer's debugger (verify --hold).

Once kstall has read the CPUs and written the run, the guest stays stopped
instead of being killed, and RUN/held.json says where its gdbstub is
(`kstall attach RUN` reads it). The hold ends at Ctrl-C, SIGTERM, the end
of its time, or QEMU's own exit; then QEMU is stopped and reaped like every
guest, and held.json goes. A SIGKILLed kstall takes QEMU with it
(procs.die_with_parent), and its socket directory is swept by the next run
(harness/base/leftovers.py).

QEMU's gdbstub serves one debugger at a time, and a second connection
would wait unanswered. So an attach takes ATTACH_LOCK (an flock in the
guest's private socket directory) for as long as its gdb runs, and a
second one is refused naming the first.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from harness.base import arch as arches
from harness.base import procs, untrusted
from harness.base.procs import Interrupted
from harness.guest.vm import VM

HELD = "held.json"
ATTACH_LOCK = "attach.lock"
POLL_S = 0.2


@dataclass
class Held:
    vm: VM
    seconds: float
    debugger: dict  # what attach needs besides the socket: arch, symbols, vmlinux, layout
    path: Path | None = None  # held.json, once published
    until: float = 0.0

    def publish(self, run_dir: Path) -> Path:
        """held.json in the run's directory."""
        self.path = run_dir / HELD
        self.until = time.time() + self.seconds
        doc = {"gdb_socket": str(self.vm.gdb_socket), "qemu_pid": self.vm.proc.pid if self.vm.proc else None,
               "holder_pid": os.getpid(), "holder_start": procs.stat_fields(f"/proc/{os.getpid()}/stat")[19],
               "until": self.until, "seconds": self.seconds} | self.debugger
        self.path.write_text(json.dumps(doc, indent=1) + "\n")
        return self.path

    def serve(self, echo: Callable[[str], None]) -> None:
        """Say how to attach, then hold until the hold ends."""
        run_dir = self.path.parent if self.path else "RUN"
        echo(f"the hung guest is held stopped for {self.seconds:g} s (Ctrl-C releases it); attach a debugger "
             f"with:\n  kstall attach {run_dir}")
        echo(f"hold ended ({self.wait()}): the guest is stopped and gone")

    def wait(self) -> str:
        """Until the hold ends; why it ended. Ctrl-C and SIGTERM end it
        without being raised: they were meant for the hold."""
        try:
            while self.vm.alive():
                left = self.until - time.time()
                if left <= 0:
                    return f"the hold's {self.seconds:g} s are up"
                time.sleep(min(POLL_S, left))
            return "QEMU exited"
        except KeyboardInterrupt:
            return "Ctrl-C"
        except Interrupted as e:
            return str(e) or "terminated"
        finally:
            self.release()

    def release(self) -> None:
        self.vm.stop()
        if self.path is not None:
            self.path.unlink(missing_ok=True)


class NotHeld(RuntimeError):
    pass


def read(run_dir: Path) -> dict:
    """held.json of a run whose guest is still held."""
    try:
        doc = json.loads((run_dir / HELD).read_text())
    except FileNotFoundError:
        raise NotHeld(f"{run_dir}: its guest is not held (verify --hold keeps a hung guest; "
                      "the hold ended, or the run was not a hang)") from None
    except (OSError, ValueError) as e:
        raise NotHeld(f"{run_dir / HELD}: unreadable ({e})") from None
    if not isinstance(doc, dict):
        raise NotHeld(f"{run_dir / HELD}: not a record of a held guest ({str(doc)[:100]!r}): refused")
    # the holder first: once it is gone, a later kstall sweeps its run directory, socket and all,
    # and the guest is gone, not a path to refuse
    fields = procs.stat_fields(f"/proc/{untrusted.num(str(doc.get('holder_pid')), 0)}/stat")
    if len(fields) <= 19 or fields[19] != doc.get("holder_start"):
        raise NotHeld(f"{run_dir}: the kstall that held its guest is gone, and the guest with it")
    if untrusted.socket_path(doc.get("gdb_socket")) is None:
        raise NotHeld(f"{run_dir / HELD}: names no gdbstub socket kstall would have made "
                      f"({str(doc.get('gdb_socket'))[:100]!r}): refused")
    if doc.get("arch") not in arches.names():
        raise NotHeld(f"{run_dir / HELD}: names no architecture kstall knows ({str(doc.get('arch'))[:40]!r}): refused")
    return doc


@contextlib.contextmanager
def attach_lock(doc: dict) -> Iterator[int]:
    """The held guest's attach lock, as an open descriptor (pass it on to
    the debugger: the lock lasts as long as the descriptor); NotHeld when
    another debugger has it."""
    path = Path(doc["gdb_socket"]).with_name(ATTACH_LOCK)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            other = os.pread(fd, 64, 0).decode(errors="replace").strip() or "?"
            raise NotHeld(f"another debugger is attached to this guest (pid {other}): QEMU's gdbstub serves "
                          "one at a time; quit it first") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield fd
    finally:
        os.close(fd)
