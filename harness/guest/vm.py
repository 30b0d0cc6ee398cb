# SPDX-License-Identifier: GPL-2.0
"""One QEMU guest: its command line, its private run directory, its lifetime.

Every channel but the console is a unix socket in a private 0700 directory:
QMP, the gdbstub, the agent's virtio-serial ports. The kernel console (UART)
goes to a file QEMU writes, which kstall reads as it grows (a socket made
the guest wait for kstall: harness/guest/streams.py). QEMU starts paused
(-S) so the host is connected to every stream before the first byte; the
agent channel also logs to a file through QEMU itself, so a kstall crash
loses nothing the guest said.
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from harness.base import leftovers, paths, procs
from harness.base import arch as arches
from harness.guest import hostfs, machine, streams
from harness.guest.qmp import QMP, QMPError, QMPTimeout
from images.guest import disks

# the signals someone sends to end a process; any other that kills QEMU
# (SIGSEGV, SIGABRT, SIGBUS ...) is QEMU's own crash, an emulator fault
OUTSIDE_SIGNALS = (signal.SIGKILL, signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


@dataclass
class VMConfig:
    kernel: Path
    initrd: Path
    cmdline: str
    log_dir: Path
    cpus: int = 2
    memory_mb: int = 1024
    accel: str = "tcg"  # a row of the architecture's [accel] table: "tcg", "tcg-single", "kvm"
    machine: str = "q35"  # its architecture's table (harness/base/arches.toml); Kernel.machine() names a kernel's
    arch: str = arches.DEFAULT
    extra_args: list[str] = field(default_factory=list)
    # a saved VM state (harness/guest/snapshot.py) to load instead of booting: the
    # devices, and the guest RAM as a file QEMU maps private (copy on write)
    restore_from: Path | None = None
    restore_ram: Path | None = None
    # guest RAM in a memfd kstall can read, so that a snapshot can be saved
    shared_ram: bool = False
    # the host's root filesystem over virtiofs (harness/guest/hostfs.py), for a host command
    host_fs: bool = False
    # virtio disks beside the initramfs (a guest environment's: images/guest/environment.py)
    disks: tuple[disks.Disk, ...] = ()


def kvm_available() -> tuple[bool, str]:
    """Whether /dev/kvm can be opened; a boot still has to prove it works."""
    try:
        fd = os.open("/dev/kvm", os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:
        return False, "/dev/kvm does not exist"
    except OSError as e:
        return False, f"/dev/kvm: {e.strerror}"
    os.close(fd)
    return True, "/dev/kvm opens"


class VMError(RuntimeError):
    pass


class VM:
    """A running QEMU. Use as a context manager: leaving it always stops and
    reaps QEMU and removes the socket directory."""

    def __init__(self, cfg: VMConfig) -> None:
        self.cfg = cfg
        self.run_dir = Path(tempfile.mkdtemp(prefix="kstall-"))
        os.chmod(self.run_dir, 0o700)
        leftovers.mark(self.run_dir)
        self.proc: subprocess.Popen | None = None
        self.qmp = QMP(self.sock("qmp"))
        self.console: streams.FileTail | None = None
        self._console_from = 0
        self.agent: socket.socket | None = None
        self.syms: socket.socket | None = None
        self.started_at = 0.0
        self._incoming: int | None = None  # the state file's descriptor, while QEMU starts
        self.ram_fd: int | None = None  # the memfd of a shared_ram guest
        self.host_share: hostfs.HostShare | None = None

    def sock(self, name: str) -> Path:
        return self.run_dir / f"{name}.sock"

    @property
    def console_log(self) -> Path:
        """What the guest's UART sent, written by QEMU as it arrives."""
        return self.cfg.log_dir / "console.log"

    @property
    def gdb_socket(self) -> Path:
        return self.sock("gdb")

    def shape(self) -> list[str]:
        """The command line without this run's private paths or a state to
        load: what a snapshot saved from this VM is keyed by."""
        # how many host threads run TCG's vCPUs is not in the guest's state: a
        # snapshot saved under one restores under the other
        return [a.replace(str(self.run_dir), "RUN").replace(str(self.cfg.log_dir), "LOGS")
                .replace("tcg,thread=single", "tcg,thread=multi") for a in self._command()]

    def command(self) -> list[str]:
        incoming = ["-incoming", "defer"] if self._incoming is not None else []
        return self._command() + self._memory() + incoming

    def _memory(self) -> list[str]:
        """Where guest RAM lives when it is not QEMU's anonymous memory. A
        restored guest maps the snapshot's RAM file private: a page is read
        when the guest touches it and copied only when it writes it, where
        loading the whole RAM from the migration stream cost up to 2 s of page
        faults on a host that hands freed memory back to its hypervisor."""
        c = self.cfg
        if c.restore_ram is not None:
            path, share = str(c.restore_ram), "off"
        elif self.ram_fd is not None:
            path, share = f"/proc/self/fd/{self.ram_fd}", "on"
        else:
            return []
        return ["-object", f"memory-backend-file,id=kstall-ram,size={c.memory_mb}M,mem-path={path},share={share}",
                "-machine", "memory-backend=kstall-ram"]

    def _command(self) -> list[str]:
        c = self.cfg
        logs = c.log_dir
        m, bus = machine.get(c.machine, c.arch), arches.get(c.arch).virtio  # bus: virtio's transport (pci, ccw)
        return [
            machine.qemu(c.arch), "-nodefaults", "-no-user-config", "-display", "none", "-no-reboot", "-S",
            # vCPU threads named "CPU n/TCG": their host scheduling delay is read (harness/guest/hostwait.py)
            "-name", "kstall,debug-threads=on",
            "-machine", m.qemu_arg, *machine.accel_args(c.accel, c.arch),
            "-smp", m.smp_arg(c.cpus),
            "-m", str(c.memory_mb),
            "-kernel", str(c.kernel), "-initrd", str(c.initrd), "-append", c.cmdline,
            # appended to: a restored guest's log starts with the boot its snapshot saw
            "-chardev", f"file,id=con0,path={self.console_log},append=on",
            "-serial", "chardev:con0",
            "-device", f"virtio-serial-{bus},id=vser0",
            "-chardev", f"socket,id=agent0,path={self.sock('agent')},server=on,wait=off,"
                        f"logfile={logs / 'agent.log'}",
            "-device", "virtserialport,bus=vser0.0,chardev=agent0,name=org.kstall.agent",
            "-chardev", f"socket,id=syms0,path={self.sock('syms')},server=on,wait=off",
            "-device", "virtserialport,bus=vser0.0,chardev=syms0,name=org.kstall.syms",
            "-chardev", f"socket,id=gdb0,path={self.gdb_socket},server=on,wait=off",
            "-gdb", "chardev:gdb0",
            "-qmp", f"unix:{self.sock('qmp')},server=on,wait=off",
            *(hostfs.HostShare.qemu_args(self.run_dir, bus) if c.host_fs else []),
            *disks.qemu_args(c.disks, bus),
            *c.extra_args,
        ]

    def _connect(self, name: str, deadline: float) -> socket.socket:
        while True:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                s.connect(str(self.sock(name)))
                s.setblocking(False)
                return s
            except (FileNotFoundError, ConnectionRefusedError):
                s.close()
                if self.proc is not None and self.proc.poll() is not None:
                    raise VMError(f"QEMU exited early: {self.qemu_log_tail()}")
                if time.monotonic() > deadline:
                    raise VMError(f"QEMU socket {name} did not come up")
                time.sleep(0.02)

    def start(self, timeout: float = 20.0) -> None:
        self.cfg.log_dir.mkdir(parents=True, exist_ok=True)
        if self.cfg.restore_from is not None:
            try:
                self._incoming = os.open(self.cfg.restore_from, os.O_RDONLY | os.O_CLOEXEC)
            except OSError as e:
                raise VMError(f"cannot open the saved state {self.cfg.restore_from}: {e.strerror}") from None
        try:
            self._start(timeout)
        finally:
            if self._incoming is not None:  # QEMU has its own copy
                os.close(self._incoming)
                self._incoming = None
        self.started_at = time.monotonic()

    def _start(self, timeout: float) -> None:
        if self.cfg.host_fs:  # its socket first: QEMU connects to it as it starts
            self.host_share = hostfs.HostShare(self.run_dir, self.cfg.log_dir / "virtiofsd.log")
            try:
                self.host_share.start()
            except hostfs.HostFsError as e:
                raise VMError(str(e)) from None
        if self.cfg.shared_ram or self.cfg.host_fs:  # virtiofsd maps guest RAM
            self.ram_fd = os.memfd_create("kstall-ram", os.MFD_CLOEXEC)  # QEMU opens it through /proc
            os.ftruncate(self.ram_fd, self.cfg.memory_mb << 20)
        self.console_log.touch()  # read from where it stands: a restored guest's begins with its boot
        self._console_from = self.console_log.stat().st_size
        command = self.command()
        with open(self.cfg.log_dir / "qemu.log", "wb") as log:
            log.write((" ".join(command) + "\n").encode())
            log.flush()
            if shutil.which(command[0]) is None:
                a = arches.get(self.cfg.arch)
                raise VMError(f"{machine.qemu(a.name)} not found: {paths.install_hint(a.qemu_package)}")
            try:
                self.proc = subprocess.Popen(
                    procs.dying_with_parent(command), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                    start_new_session=True,
                    pass_fds=tuple(fd for fd in (self._incoming, self.ram_fd) if fd is not None))
            except FileNotFoundError as e:  # setpriv: util-linux, which every Debian has
                raise VMError(f"cannot start QEMU: {e.filename} not found") from None
        deadline = time.monotonic() + timeout
        try:
            self.qmp.connect(deadline, lambda: self.alive() and not self.stopped())
            # every port connected before a snapshot loads: a port whose host is
            # not there when the state is loaded is closed to the guest, and a
            # restored agent reading its GO from it reads end-of-file
            self.console = streams.FileTail(self.console_log, self._console_from)
            self.agent = self._connect("agent", deadline)
            self.syms = self._connect("syms", deadline)
            if self._incoming is not None:
                # the snapshot's RAM is its own file (_memory): the stream holds the rest
                self.qmp.cmd("migrate-set-capabilities",
                             capabilities=[{"capability": "x-ignore-shared", "state": True}])
                self.qmp.cmd("migrate-incoming", uri=f"fd:{self._incoming}")
            self.qmp.cmd("cont")
        except (QMPError, OSError, VMError) as e:  # QEMU gone mid-handshake: a reset connection
            if not self.stopped():
                self.ends_within(2.0)
            fault = self.gone()
            raise VMError(f"{fault} while it started" if fault else
                          f"QEMU did not start: {e}; {self.qemu_log_tail()}") from None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def ends_within(self, seconds: float) -> bool:
        """QEMU's process ended within seconds (waited for, and reaped)."""
        if self.proc is None:
            return True
        try:
            self.proc.wait(seconds)
        except subprocess.TimeoutExpired:
            return False
        return True

    def stopped(self) -> bool:
        """QEMU itself is stopped (SIGSTOP, SIGTSTP from outside): its guest
        is silent, but not frozen. A tracer's stop ("t": strace or gdb on
        QEMU) comes and goes with each traced call; a main loop held that way
        shows as QMP and the gdbstub not answering."""
        fields = procs.stat_fields(f"/proc/{self.proc.pid}/stat") if self.proc else []
        return bool(fields) and fields[0] == "T"

    def outside_fault(self) -> str | None:
        """What someone outside kstall did to QEMU: stopped it, or killed it
        with a signal one sends (not QEMU's own crash, SIGABRT or SIGSEGV)."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            return "QEMU was stopped from outside kstall (SIGSTOP or SIGTSTP)" if self.stopped() else None
        sig = -self.proc.returncode
        if sig in OUTSIDE_SIGNALS:
            return f"QEMU exited unexpectedly, killed by {procs.signal_name(sig)}"
        return None

    def crashed(self) -> str | None:
        """QEMU's own crash: a signal no one sends to end a process killed it."""
        sig = -self.proc.returncode if self.proc is not None and self.proc.poll() is not None else 0
        if sig <= 0 or sig in OUTSIDE_SIGNALS:
            return None
        return f"QEMU crashed ({procs.signal_name(sig)})"

    def gone(self) -> str | None:
        """What ended or stopped QEMU, from outside or by its own crash; None while it runs."""
        return self.outside_fault() or self.crashed()

    def qemu_log_tail(self, n: int = 5) -> str:
        try:
            lines = (self.cfg.log_dir / "qemu.log").read_text(errors="replace").splitlines()[1:]
        except OSError:
            return ""
        return " | ".join(lines[-n:])

    def stop(self) -> int | None:
        """Quit QEMU (politely, then not), reap it, remove the sockets."""
        rc = None
        if self.proc is not None:
            if self.stopped():  # stopped from outside: it answers no quit, and SIGTERM waits for a SIGCONT
                self.proc.kill()
            elif self.proc.poll() is None:
                try:
                    self.qmp.cmd("quit", timeout=2.0)
                    self.ends_within(2.0)
                except QMPTimeout:  # a main loop that answers no quit acts on no SIGTERM either
                    self.proc.kill()
                except (QMPError, OSError):
                    self.ends_within(2.0)
            rc = procs.reap(self.proc)
        self.qmp.close()
        if self.ram_fd is not None:
            os.close(self.ram_fd)
            self.ram_fd = None
        for s in (self.console, self.agent, self.syms):
            if s is not None:
                s.close()
        if self.host_share is not None:
            self.host_share.stop()
        shutil.rmtree(self.run_dir, ignore_errors=True)
        return rc

    def __enter__(self) -> "VM":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
