# SPDX-License-Identifier: GPL-2.0
"""Before a kernel boots: has it what the guest agent and the reproducer need?

The options are data (repro/agent.toml and each reproducer's [kernel] table),
checked against the kernel's config when kstall has one:
- an option the agent needs is missing: kstall cannot reach the guest, an
  error before anything boots;
- an option the reproducer needs is missing: its path cannot run, so the
  verdict is INCONCLUSIVE at once, naming the options;
- an option whose absence the reproducer works around with a kernel parameter
  ([[kernel.boot_without]]): the guest boots with it;
- a device a guest environment's program opens (syzkaller's /dev/raw-gadget)
  whose option the config leaves out ([needs.options]): INCONCLUSIVE at
  once, "needs" it, as the agent's account would say after the whole run;
  unless it is a test-only interface kstall builds for the kernel from its
  own source (images/test-modules.toml): then the guest gets that module;
- an option that is a module (=m): its module and their dependencies (taken
  when the kernel was fetched, images/kernels/modules.py) go into the initramfs, in
  load order.
Without a config (a bare file: kernel) nothing can be checked here; the agent
still says on the console what it lacks.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from harness.analysis import reach
from harness.base import arch as arches
from harness.base import guest_env, syzkaller
from harness.base import needs as kernel_needs
from harness.base.needs import KernelNeeds
from harness.base.reproducers import Reproducer
from images.kernels import modules, test_modules
from images.kernels.kernel import Kernel, Progress, SpecError


@dataclass
class Check:
    missing: list[str] = field(default_factory=list)   # the reproducer's options the kernel lacks
    modules: list[Path] = field(default_factory=list)  # to load in the guest, in order
    config_checked: bool = False
    machine_lacks: str = ""  # what the guest's architecture cannot give the reproducer's path
    # (option, kernel parameter): the reproducer's path needs the parameter on this kernel, which lacks the option
    boot_without: list[tuple[str, str]] = field(default_factory=list)
    needs: list[str] = field(default_factory=list)  # devices its program opens that the config leaves out (reach.py)
    # test-only modules built for the kernel that its program's devices need (test_modules.py)
    test_modules: list[test_modules.Built] = field(default_factory=list)

    @property
    def blocked(self) -> bool:
        """The path cannot run on this kernel: nothing boots."""
        return bool(self.missing or self.machine_lacks or self.needs)

    @property
    def reach(self) -> dict | None:
        """The needs as a run's evidence carries them (reach.Reach.to_json's "needs"), where there are some."""
        return {"needs": self.needs, "before_boot": True} if self.needs else None

    @property
    def test_module_files(self) -> tuple[Path, ...]:
        """The test modules' files, for the program's module tree (module_tree.image)."""
        return tuple(Path(b.ko) for b in self.test_modules if b.ko)

    @property
    def cmdline(self) -> list[str]:
        return [p for _, p in self.boot_without]

    def boot_note(self) -> str:
        """', with slub_debug=… (the kernel has no CONFIG_…)' for the progress line ('' when none)."""
        return "".join(f", with {p} (the kernel has no CONFIG_{o})" for o, p in self.boot_without)

    def summary(self) -> str:
        """The short form a report's cell gives ('' but for a device need, whose reason is long)."""
        if self.needs and not (self.missing or self.machine_lacks):
            return f"the reproducer needs {self.needs[0].split(':')[0]}, which this kernel's config leaves out"
        return ""

    def reason(self) -> str:
        if self.machine_lacks:
            return self.machine_lacks
        if self.needs and not self.missing:
            return f"the reproducer needs what this kernel lacks: {'; '.join(self.needs)} (checked before booting)"
        return ("the kernel's config lacks " + ", ".join(f"CONFIG_{o}" for o in self.missing)
                + ", which the reproducer's path needs (checked before booting)")


def _strings(repro: Reproducer) -> frozenset[str]:
    """The strings a syzkaller program's own calls name (reach.program_strings)."""
    try:
        return reach.program_strings(Path(repro.source).read_text(errors="replace")) if repro.source else frozenset()
    except OSError:
        return frozenset()


def _test_devices(kernel: Kernel, needs: list[str], progress: Progress | None, build: bool
                  ) -> tuple[list[str], list[test_modules.Built]]:
    """The needs a test module built for the kernel answers taken out, and
    those modules; one that could not be built stays a need, saying why."""
    left, built = [], []
    for need in needs:
        m = test_modules.for_device(need.split(":", 1)[0])
        if m is None or test_modules.applies(kernel, m):
            left.append(need)
            continue
        b = test_modules.ensure(kernel, m, progress) if build else \
            next((x for x in test_modules.built(kernel) if x.name == m.name), test_modules.Built(m.name))
        if b.why:
            left.append(f"{need}; a test device kstall could not build for it: {b.why}")
        else:  # built, or (build=False) to be built when a run boots
            built.append(b)
    return left, built


def _absent(kernel: Kernel, options: tuple[str, ...]) -> list[str]:
    return [o for o in options if kernel.config_value(f"CONFIG_{o}") not in ("y", "m")]


def _machine_lacks(kernel: Kernel, repro: Reproducer | None) -> str:
    """Why the kernel's architecture cannot run the reproducer's path ('' when it can)."""
    a = arches.get(kernel.arch)
    if repro and repro.abi and a.table.get("compat", {}).get("name") != repro.abi:
        return (f"the reproducer is a {repro.abi} program, and {a.name} kernels run none (its 32-bit ABI is "
                "another architecture's): it cannot run there (checked before booting)")
    if repro and repro.binary in a.unbuildable():
        return (f"kstall cannot build {repro.binary} for {a.name} guests on this host "
                f"({a.table['unbuildable']['why']}) (checked before booting)")
    if repro and repro.nmi_rate and a.nmi == "none":
        return (f"the reproducer's path runs in NMI context, and an {a.name} guest has no NMI "
                f"({a.table.get('nmi_why', 'no NMI source')}): its NMI path cannot run there (checked before booting)")
    return ""


def check(kernel: Kernel, repro: Reproducer | None, progress: Progress | None = None, build: bool = True) -> Check:
    """build: make the test modules the program's devices need (explain,
    which boots nothing, only reads what was built)."""
    agent = kernel_needs.agent(arches.get(kernel.arch).virtio)
    needs: list[KernelNeeds] = [agent] + ([repro.needs] if repro else [])
    out = Check(config_checked=kernel.config is not None and kernel.config.is_file(),
                machine_lacks=_machine_lacks(kernel, repro))
    if out.config_checked:
        lacking = _absent(kernel, agent.options)
        if lacking:
            raise SpecError(f"{kernel.canonical} has no {', '.join('CONFIG_' + o for o in lacking)}: kstall's guest "
                            "agent needs them to reach the host (a virtio console on the machine's bus, an initramfs)")
        out.missing = _absent(kernel, repro.needs.options) if repro else []
        out.boot_without = [(o, p) for o, p in (repro.needs.boot_without if repro else ()) if _absent(kernel, (o,))]
        if repro and repro.env:
            env = guest_env.get(repro.env)
            out.needs, out.test_modules = _test_devices(
                kernel, reach.left_out(syzkaller.device_paths(repro), env, kernel.config_value), progress, build)
            out.needs += reach.filesystems_left_out(_strings(repro), env, kernel.config_value)
    names = []
    for need in needs:
        for option, module in need.modules:
            is_module = kernel.config_value(f"CONFIG_{option}") == "m" if out.config_checked else None
            if module in kernel.modules:
                names.append(module)
            elif is_module:
                raise SpecError(f"{kernel.canonical}: CONFIG_{option}=m, and kstall has no {module} module for this "
                                "kernel: give the kernel with its modules (deb:, rpm:, image:, or a /boot file: "
                                "kernel with /lib/modules beside it)")
    sequence = modules.to_load(kernel.modules, names)
    if sequence and kernel.modules_dir is None:
        raise SpecError(f"{kernel.canonical}: its module list names no module directory")
    out.modules = [kernel.modules_dir / f"{m}.ko" for m in sequence] if sequence else []
    for p in out.modules:
        if not p.is_file():
            raise SpecError(f"{kernel.canonical}: module file {p} is missing from the cache (remove "
                            f"{p.parent.parent} to fetch the kernel again)")
    return out
