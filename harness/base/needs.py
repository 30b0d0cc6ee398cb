# SPDX-License-Identifier: GPL-2.0
"""What something needs of a kernel ([kernel] in its data file): the options
a kernel is checked for before it boots (harness/drivers/preflight.py), the
module behind each tristate one (images/kernels/modules.py), and the options a kernel
built for it must also have (images/kernels/build.py writes them as its kconfig
fragment). Written once, in the data file; read here."""
from __future__ import annotations

import tomllib
from dataclasses import dataclass

from harness.base import paths

REPRO_DIR = paths.data_file("repro")
AGENT = "agent"  # repro/agent.toml: the guest agent's needs, not a reproducer
HOST_COMMAND = "run:"
# what a host command needs of the guest kernel: virtiofs (built in on Debian's 6.12 and later)
HOST_COMMAND_NEEDS = {"kernel": {"options": ["VIRTIO_FS", "FUSE_FS"],
                                 "modules": {"FUSE_FS": "fuse", "VIRTIO_FS": "virtiofs"}}}


@dataclass(frozen=True)
class KernelNeeds:
    owner: str
    options: tuple[str, ...] = ()
    modules: tuple[tuple[str, str], ...] = ()  # (option, module name)
    # options a kernel built for it also sets, though a distro kernel is not checked for them
    build: tuple[str, ...] = ()
    # (option, kernel parameter): boot with the parameter when the kernel's config lacks the option
    boot_without: tuple[tuple[str, str], ...] = ()

    @staticmethod
    def from_doc(owner: str, doc: dict) -> "KernelNeeds":
        k = doc.get("kernel", {})
        return KernelNeeds(owner, tuple(k.get("options", ())), tuple(k.get("modules", {}).items()),
                           tuple(k.get("build", ())),
                           tuple((b["option"], b["cmdline"]) for b in k.get("boot_without", ())))

    def fragment(self) -> str:
        """Its kconfig fragment, for a kernel built for it."""
        lines = [f"# {self.owner}: its data file's [kernel] options and build options"]
        return "\n".join(lines + [f"CONFIG_{o}=y" for o in (*self.options, *self.build)]) + "\n"


def _read(path) -> dict:
    with open(path, "rb") as f:
        return tomllib.load(f)


def agent(transport: str = "pci") -> KernelNeeds:
    """The agent's needs on a machine whose virtio devices sit on that transport (arches.toml `virtio`)."""
    doc = _read(REPRO_DIR / f"{AGENT}.toml")
    own, bus = doc["kernel"], doc["transport"][transport]
    return KernelNeeds.from_doc(AGENT, {"kernel": {
        "options": [*bus["options"], *own.get("options", ())],
        "modules": {**bus.get("modules", {}), **own.get("modules", {})}, "build": own.get("build", [])}})


def host_command() -> KernelNeeds:
    return KernelNeeds.from_doc(HOST_COMMAND, HOST_COMMAND_NEEDS)


def every() -> list[KernelNeeds]:
    """The agent's and every built-in reproducer's: a kernel is prepared once for all."""
    return [agent()] + [KernelNeeds.from_doc(p.stem, _read(p)) for p in sorted(REPRO_DIR.glob("*.toml"))
                        if p.stem != AGENT]
