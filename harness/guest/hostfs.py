# SPDX-License-Identifier: GPL-2.0
"""The host's root filesystem for a guest that runs a host command (a
reproducer given as `run:CMD`), as virtme-ng shares it: over virtiofs.

The guest never writes to the host. virtiofsd serves an overlay made in a
mount namespace of its own: the host's root as the read-only lower layer, a
tmpfs as the upper one, and the same over each file system mounted below it
(/home, a tmpfs /tmp: where the command may be started from). The guest sees the host's files and may write
anywhere (perf.data, a JVM's /tmp); its writes land in that tmpfs, which
goes when virtiofsd does. virtiofsd (QEMU's, in qemu-system-common) needs
root, as mounting does.

vhost-user devices cannot be migrated: such a guest always boots cold, and
its RAM is a shared memfd (virtiofsd maps it).
"""
from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import time
from pathlib import Path

from harness.base import paths, procs

VIRTIOFSD = ("/usr/lib/qemu/virtiofsd", "/usr/libexec/virtiofsd", "/usr/lib/virtiofsd")
TAG = "kstall-host"
UPPER_MB = 1024  # the guest's writes, in host RAM
START_TIMEOUT = 10.0
# filesystems that hold no files of the user's, or whose own the guest mounts (/proc, /sys, /dev)
PSEUDO = frozenset({"proc", "sysfs", "devtmpfs", "devpts", "cgroup", "cgroup2", "securityfs", "debugfs", "tracefs",
                    "bpf", "mqueue", "hugetlbfs", "fusectl", "configfs", "pstore", "binfmt_misc", "autofs",
                    "efivarfs", "nsfs", "rpc_pipefs", "selinuxfs"})
GUEST_OWN = ("/proc", "/sys", "/dev", "/run")


def submounts(mountinfo: str) -> list[str]:
    """The host's file systems below / (/home on its own disk, a tmpfs /tmp),
    outermost first: an overlay of / alone shows their empty mount points, and
    a command started from one would find nothing there."""
    out = []
    for line in mountinfo.splitlines():
        fields, _, rest = line.partition(" - ")
        parts = fields.split()
        if len(parts) < 5 or not rest:
            continue
        point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), parts[4])
        fstype = rest.split()[0]
        if point == "/" or fstype in PSEUDO or point.startswith(tuple(p + "/" for p in GUEST_OWN)) or \
                point in GUEST_OWN or not re.fullmatch(r"/[A-Za-z0-9/._+-]*", point):  # overlayfs options split at ,:
            continue
        if point not in out:
            out.append(point)
    return sorted(out, key=lambda p: p.count("/"))


class HostFsError(RuntimeError):
    pass


def virtiofsd() -> str:
    found = next((p for p in VIRTIOFSD if Path(p).is_file()), None) or shutil.which("virtiofsd")
    if not found:
        raise HostFsError(f"virtiofsd not found: {paths.install_hint('virtiofsd')}")
    return found


def socket_path(run_dir: Path) -> Path:
    return run_dir / "hostfs.sock"


class HostShare:
    """virtiofsd serving the host's root (as an overlay) on a unix socket in
    a VM's private run directory; the VM starts it and stops it (vm.py)."""

    def __init__(self, run_dir: Path, log: Path) -> None:
        self.socket = socket_path(run_dir)
        self.mnt = run_dir / "hostfs"
        self.log = log
        self.proc: subprocess.Popen | None = None

    @staticmethod
    def qemu_args(run_dir: Path, transport: str = "pci") -> list[str]:
        return ["-chardev", f"socket,id=hostfs0,path={socket_path(run_dir)}",
                "-device", f"vhost-user-fs-{transport},chardev=hostfs0,tag={TAG}"]

    def start(self) -> None:
        daemon = virtiofsd()
        self.mnt.mkdir(mode=0o700)
        m = shlex.quote(str(self.mnt))
        # in its own mount namespace: the overlay and its tmpfs are nobody else's, and go with it
        subs = submounts(Path("/proc/self/mountinfo").read_text())
        # each below / an overlay of its own, read only under its own upper layer in the tmpfs; one
        # overlayfs cannot stack on (a FUSE or a special file system) stays an empty directory, said in the log
        each = "".join(f"{{ mkdir {m}/upper{i} {m}/work{i} && mount -t overlay kstall-hostfs -o "
                       f"lowerdir={shlex.quote(p)},upperdir={m}/upper{i},workdir={m}/work{i} "
                       f"{shlex.quote(str(self.mnt) + '/root' + p)}; }}; " for i, p in enumerate(subs))
        script = (f"mount -t tmpfs -o size={UPPER_MB}m,mode=0700 kstall-hostfs {m} && "
                  f"mkdir {m}/upper {m}/work {m}/root && "
                  f"mount -t overlay kstall-hostfs -o lowerdir=/,upperdir={m}/upper,workdir={m}/work {m}/root && "
                  f"{each}"
                  f"exec {shlex.quote(daemon)} --socket-path={shlex.quote(str(self.socket))} "
                  f"-o source={m}/root -o cache=auto -o no_posix_lock --thread-pool-size=4")
        with open(self.log, "wb") as log:
            try:
                self.proc = subprocess.Popen(["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
                                             stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                             start_new_session=True, preexec_fn=procs.die_with_parent)
            except FileNotFoundError:
                raise HostFsError("unshare not found (Debian package util-linux)") from None
        deadline = time.monotonic() + START_TIMEOUT
        while not self.socket.exists():
            if self.proc.poll() is not None:
                raise HostFsError(f"virtiofsd did not start (the host-command form needs root): {self.log_tail()}")
            if time.monotonic() > deadline:
                raise HostFsError(f"virtiofsd made no socket within {START_TIMEOUT:.0f}s: {self.log_tail()}")
            time.sleep(0.01)

    def log_tail(self) -> str:
        try:
            return " | ".join(self.log.read_text(errors="replace").splitlines()[-3:])
        except OSError:
            return ""

    def stop(self) -> None:
        """virtiofsd and what it forked (its sandbox) are one process group."""
        if self.proc is None:
            return
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                self.proc.wait(3)
                break
            except subprocess.TimeoutExpired:
                continue
        procs.reap(self.proc)
        self.proc = None
