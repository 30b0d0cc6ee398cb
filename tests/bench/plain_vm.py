#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0
"""A program in a plain VM, without kstall: what a kernel developer would
boot by hand, to check that kstall's guest changes nothing a hang depends on.

    tests/bench/plain_vm.py PROGRAM.c [--kernel debian:6.1.170] [--module fuse]... [--runs 3] [--seconds 100]

The VM: the Debian kernel kstall fetches, QEMU under TCG with 2 CPUs and
2 GiB, an initramfs of busybox and the program (built static by the host's
gcc), and nothing else of kstall's (no agent, no gdbstub, no snapshot).
The modules named are loaded on demand, as on a Debian system: the kernel's
request_module() runs busybox's modprobe over a modules.dep and the kernel's
own aliases for them, and their device nodes are made as systemd-tmpfiles
makes them from modules.devname. The program runs once, in the background;
each run prints when the kernel first reported a hung task (seconds after
the program started) and its function, or that it did not.
"""
import argparse
import gzip
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from images.guest import initramfs  # noqa: E402
from images.kernels import module_tree  # noqa: E402
from images.kernels.schemes import resolve  # noqa: E402

BUSYBOX = Path("/bin/busybox")
APPLETS = ("sh", "mount", "mknod", "cat", "sleep", "echo", "modprobe", "poweroff")
HUNG = re.compile(r"^\[\s*(\d+\.\d+)\] INFO: task \S+ blocked for more than", re.M)
START = re.compile(r"^plainvm: start (\d+\.\d+)", re.M)
FRAME = re.compile(r"^\[\s*\d+\.\d+\]\s+(?!\?)(\w+)\+0x", re.M)
# the frames a blocked task's stack starts with, which no hang is named after
SCHEDULER = {"__schedule", "schedule", "schedule_preempt_disabled", "__mutex_lock", "mutex_lock",
             "__mutex_lock_slowpath", "rwsem_down_read_slowpath", "rwsem_down_write_slowpath", "context_switch"}


def init_script(seconds: int, nodes: list[str]) -> str:
    mknods = "".join(f"mknod {n}\n" for n in nodes)
    return f"""#!/bin/sh
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev; mount -t tmpfs tmp /tmp
echo 30 > /proc/sys/kernel/hung_task_timeout_secs
{mknods}cd /tmp
echo "plainvm: start $(cut -d' ' -f1 /proc/uptime)"
/program &
sleep {seconds}
echo "plainvm: end $(cut -d' ' -f1 /proc/uptime)"
poweroff -f
"""


def build(program: Path, kernel, modules: list[str], seconds: int, out: Path) -> None:
    files: dict[str, bytes] = {"bin/busybox": BUSYBOX.read_bytes()}
    for a in APPLETS:
        files[f"bin/{a}"] = initramfs.Symlink("busybox")
    files["sbin/modprobe"] = initramfs.Symlink("../bin/busybox")
    with tempfile.TemporaryDirectory() as d:
        subprocess.run(["gcc", "-O2", "-static", "-pthread", "-o", f"{d}/program", str(program)], check=True)
        files["program"] = Path(d, "program").read_bytes()
    base = f"lib/modules/{kernel.release}"
    aliases = module_tree.aliases(kernel)
    table = aliases.read_text(errors="replace") if aliases else ""
    nodes = []
    for m in modules:
        files[f"{base}/kernel/{m}.ko"] = (kernel.modules_dir / f"{m}.ko").read_bytes()
        mine = re.findall(rf"^alias (\S+) {re.escape(m)}$", table, re.M)
        names = [a.removeprefix("devname:") for a in mine if a.startswith("devname:")]
        majors = [d for a in mine if (d := re.fullmatch(r"char-major-(\d+)-(\d+)", a))]
        if names and majors:
            nodes.append(f"/dev/{names[0]} c {majors[0].group(1)} {majors[0].group(2)}")
    files[f"{base}/modules.dep"] = "".join(f"kernel/{m}.ko:\n" for m in modules).encode()
    files[f"{base}/modules.alias"] = "".join(l + "\n" for l in table.splitlines()
                                             if l.split()[-1:] and l.split()[-1] in modules).encode()
    files["init"] = init_script(seconds, nodes).encode()
    out.write_bytes(gzip.compress(initramfs.newc_archive(files), 1))


def boot(kernel, initrd: Path, seconds: int) -> str:
    """The run's console; one that did not power off in time is cut there (and said so)."""
    cmd = ["qemu-system-x86_64", "-machine", "q35", "-accel", "tcg", "-smp", "2", "-m", "2048",
           "-kernel", str(kernel.vmlinuz), "-initrd", str(initrd), "-nographic", "-no-reboot",
           "-append", "console=ttyS0 nokaslr panic=-1 rdinit=/init"]
    try:
        p = subprocess.run(cmd, capture_output=True, timeout=seconds + 180, stdin=subprocess.DEVNULL)
        return p.stdout.decode(errors="replace")
    except subprocess.TimeoutExpired as e:  # run() killed QEMU
        out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else ""
        return out + "\nplainvm: QEMU did not power off in time\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("program", type=Path)
    ap.add_argument("--kernel", default="debian:6.1.170")
    ap.add_argument("--module", action="append", default=[], help="a module loaded on demand (repeatable)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seconds", type=int, default=100)
    ap.add_argument("--keep", type=Path, help="keep each run's console here")
    a = ap.parse_args()
    if not shutil.which("qemu-system-x86_64"):
        sys.exit("plain_vm: no qemu-system-x86_64")
    kernel = resolve(a.kernel, progress=lambda s: print(s, file=sys.stderr))
    hung = 0
    with tempfile.TemporaryDirectory() as d:
        initrd = Path(d) / "initrd.gz"
        build(a.program, kernel, a.module, a.seconds, initrd)
        for i in range(1, a.runs + 1):
            console = boot(kernel, initrd, a.seconds)
            if a.keep:
                a.keep.mkdir(parents=True, exist_ok=True)
                (a.keep / f"run{i}.log").write_text(console)
            start = START.search(console)  # a report before the program's start is the boot's
            first = HUNG.search(console, start.end()) if start else None
            if start and first:
                hung += 1
                frames = [f for f in FRAME.findall(console[first.end():]) if f not in SCHEDULER][:2]
                print(f"run {i}: a hung task reported {float(first.group(1)) - float(start.group(1)):.0f} s "
                      f"after the program started, in {' < '.join(frames) or '?'}")
            else:
                print(f"run {i}: " + ("no hung task in" if start else "the program never started in")
                      + f" {a.seconds} s")
    print(f"{a.program.name} on {kernel.canonical}, plain VM: a hung task in {hung} of {a.runs} runs")


if __name__ == "__main__":
    main()
