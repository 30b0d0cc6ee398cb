# SPDX-License-Identifier: GPL-2.0
"""A guest environment: what a kind of program expects of its machine beyond
kstall's bare initramfs, as data (repro/<name>/environment.toml; syzkaller's
reproducers are the one kind today). Read once; every stage asks it:
the build (its C flags), the run (its time box, detectors), the guest (its
disks and the agent's steps), the watch (the kernel reports that end a run)
and the judge (what the program may need that a kernel lacks)."""
from __future__ import annotations

import dataclasses
import functools
import tomllib
from dataclasses import dataclass

from harness.base import paths


@dataclass(frozen=True)
class DiskSpec:
    serial: str
    what: str          # "modules": the kernel's module tree; "work": an empty ext4
    size_mb: int = 0
    bus: str = "virtio-blk"  # or "scsi": a disk on a virtio-scsi controller (/dev/sdX and /dev/sgN)


@dataclass(frozen=True)
class AliasNeed:
    pattern: str       # a regular expression over a request_module() alias
    what: str          # "socket family {family}": its groups fill it in
    calls: tuple[str, ...] = ()   # the system calls that fail when it is missing
    errors: tuple[str, ...] = ()  # with these errors (errno names)
    # a group the program may name as a string of its own calls (syz_mount_image's
    # filesystem): the request is the program's then, whatever calls made it
    named: str = ""


@dataclass(frozen=True)
class ConfirmRule:
    """When a kernel detector's report is a hang ([report.confirm.NAME])."""
    name: str          # console-patterns.toml name
    syzbot_s: float    # syzbot's detector waits this long before it reports
    after_s: float     # this guest's detector: its first report comes this long into the wait
    repeat_s: float    # and it says it again this often while it lasts
    who: str = ""      # the report's field naming what is stuck ("": one thing at a time)
    stated: str = ""   # the field with the seconds the kernel says it has been stuck ("": none)
    # a count in a report's lines (a regex, group n) that grows while the same wait lasts: where it
    # falls, another began ("": none)
    grows: str = ""
    hang_s: float = 0.0  # stuck this long here, it is a hang (confirm_for: syzbot's, scaled)


@dataclass(frozen=True)
class GuestEnv:
    name: str
    summary: str
    cflags: tuple[str, ...]
    fixed_mappings: tuple[tuple[int, int], ...]
    seconds: float                     # the time box on an accelerator of scale 1
    scale: tuple[tuple[str, float], ...]  # accelerator -> how much longer it runs
    sleep_after_s: float
    dying_s: float                     # a task still there this long after the time-up kill cannot die
    cpus: int
    memory_mb: int                     # the guest's memory (0: kstall's default)
    options: tuple[str, ...]           # the kernel's config must have them
    mount_modules: tuple[str, ...]     # loaded from the initramfs to mount the disks
    disks: tuple[DiskSpec, ...]
    boot_steps: tuple[str, ...]        # the agent's environment steps as it boots (repro/agent/env.c)
    steps: tuple[str, ...]             # and at the GO
    host_tools: tuple[str, ...]        # host programs a guest of the host's architecture gets
    report_ends: tuple[str, ...]       # console-patterns.toml names that end a run, once confirmed
    # seconds a CPU kstall found stuck leaves the kernel's detectors to report it (0: none)
    report_wait: float
    alias_needs: tuple[AliasNeed, ...]
    families: tuple[tuple[int, str], ...]
    # what a need is in the kernel's config (a device path, a socket family's
    # name -> CONFIG_ option without its prefix): a need says whether this
    # kernel's config leaves it out
    need_options: tuple[tuple[str, str], ...] = ()
    # a filesystem a program mounts -> the option that builds it ([needs.filesystems])
    filesystems: tuple[tuple[str, str], ...] = ()
    # device paths whose absence the environment's own setup goes on without:
    # no need known before the boot (preflight.py)
    setup_goes_on: tuple[str, ...] = ()
    confirm: tuple[ConfirmRule, ...] = ()  # when a report of report_ends is a hang
    confirm_scale: tuple[tuple[str, float], ...] = ()  # accelerator -> how much longer than syzbot's
    detect_s: float = 0.0  # a task asleep in D state at the time-up: the kernel's time to report it first

    def seconds_for(self, accel: str) -> float:
        """Its time box under an accelerator ("tcg", "kvm", ...)."""
        return self.seconds * dict(self.scale).get(accel, 1)

    def confirm_for(self, accel: str, hang_after: float | None = None) -> tuple[ConfirmRule, ...]:
        """The confirmation rules under an accelerator, syzbot's seconds
        scaled (or every one hang_after, the user's)."""
        scale = dict(self.confirm_scale).get(accel, 1)
        return tuple(dataclasses.replace(r, hang_s=hang_after or r.syzbot_s * scale) for r in self.confirm)

    def dying_for(self, accel: str) -> float:
        """dying_s under an accelerator, scaled as the confirmation rules
        are: an exit's writeback that dies in its time on KVM takes about
        twice that under TCG, and a task slow to die is no hang."""
        return self.dying_s * dict(self.confirm_scale).get(accel, 1)

    def family(self, number: int) -> str:
        return dict(self.families).get(number, f"family {number}")


def env_file(name: str):
    return paths.data_file("repro", name, "environment.toml")


@functools.lru_cache(maxsize=None)
def get(name: str) -> GuestEnv:
    with open(env_file(name), "rb") as f:
        d = tomllib.load(f)
    run, kernel, needs = d["run"], d["kernel"], d.get("needs", {})
    report = d.get("report", {})
    confirm = dict(report.get("confirm", {}))
    scale, detect_s = confirm.pop("scale", {}), float(confirm.pop("detect_s", 0))
    return GuestEnv(
        name=name, summary=d["summary"], cflags=tuple(d["build"]["cflags"]),
        fixed_mappings=tuple((int(a), int(b)) for a, b in d["build"].get("fixed_mappings", ())),
        seconds=float(run["seconds"]), scale=tuple((k, float(v)) for k, v in run.get("scale", {}).items()),
        sleep_after_s=float(run.get("sleep_after_s", 0)), dying_s=float(run.get("dying_s", 5)),
        cpus=int(run.get("cpus", 2)),
        memory_mb=int(run.get("memory_mb", 0)),
        options=tuple(kernel.get("options", ())), mount_modules=tuple(kernel.get("mount_modules", ())),
        disks=tuple(DiskSpec(x["serial"], x["what"], int(x.get("size_mb", 0)),
                                      x.get("bus", "virtio-blk")) for x in d.get("disk", ())),
        boot_steps=tuple(d["guest"].get("boot", ())), steps=tuple(d["guest"]["steps"]),
        host_tools=tuple(d["guest"].get("host_tools", ())),
        report_ends=tuple(report.get("ends", ())),
        report_wait=float(report.get("wait_s", 0)),
        alias_needs=tuple(AliasNeed(a["pattern"], a["what"], tuple(a.get("calls", ())), tuple(a.get("errors", ())),
                                   a.get("named", ""))
                          for a in needs.get("alias", ())),
        families=tuple((int(k), v) for k, v in needs.get("families", {}).items()),
        need_options=tuple(needs.get("options", {}).items()),
        filesystems=tuple(needs.get("filesystems", {}).items()),
        setup_goes_on=tuple(needs.get("setup_goes_on", ())),
        confirm=tuple(ConfirmRule(name, float(c["syzbot_s"]), float(c["after_s"]), float(c["repeat_s"]),
                                  c.get("who", ""), c.get("stated", ""), c.get("grows", ""))
                      for name, c in confirm.items()),
        confirm_scale=tuple((k, float(v)) for k, v in scale.items()), detect_s=detect_s)
