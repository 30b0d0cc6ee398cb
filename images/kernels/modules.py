# SPDX-License-Identifier: GPL-2.0
"""The kernel modules a guest must load before anything else runs.

Which ones is data: repro/agent.toml and each reproducer's [kernel] table
name an option and the module behind it. A module is needed when the
kernel's config has its option =m (without a config: when the module is not
in modules.builtin). Its dependencies, in load order, come from the kernel's
own modules.dep, made with `depmod -b` when a package ships none. The files
are stored uncompressed (xz, zstd or gzip undo .ko.xz/.ko.zst/.ko.gz), so
the agent loads them with a plain finit_module.
"""
from __future__ import annotations

import fnmatch
import shutil
import subprocess
from pathlib import Path
from typing import Callable, Iterable

from harness.base import needs, paths, untrusted
from harness.base.needs import KernelNeeds
from images.kernels.kernel import SpecError

DECOMPRESS = {".xz": ["xz", "-dc"], ".zst": ["zstd", "-dcq"], ".gz": ["gzip", "-dc"]}
METADATA = ("modules.dep", "modules.builtin", "modules.order")

# fetch(relative path in the tree, local destination): brings a file the tree
# does not hold locally yet (a disk image's modules are copied one by one)
Fetch = Callable[[str, Path], None]


def module_name(path: str) -> str:
    """kernel/drivers/char/virtio_console.ko.xz -> virtio_console"""
    base = path.rsplit("/", 1)[-1]
    for suffix in DECOMPRESS:
        base = base.removesuffix(suffix)
    return base.removesuffix(".ko").replace("-", "_")


def every_need() -> list[KernelNeeds]:
    """The agent's and every reproducer's: a kernel is prepared once for all."""
    return needs.every()


def optional_needs() -> list[KernelNeeds]:
    """What only a host command (`run:`) needs: its modules are taken when a
    kernel's packages hold them, and a kernel without them is no error until
    a host command runs on it."""
    return [needs.host_command()]


def wanted(needs: Iterable[KernelNeeds], config_value: Callable[[str], str | None] | None,
           builtin: set[str] | None = None) -> list[str]:
    """Module names to load: options set =m, or without a config (config_value
    None) modules that modules.builtin does not list. With neither nothing is
    loaded: the guest boots and the agent says on the console what it lacks."""
    out: list[str] = []
    for need in needs:
        for option, module in need.modules:
            if config_value is not None:
                take = config_value(f"CONFIG_{option}") == "m"
            else:
                take = builtin is not None and module not in builtin
            if take and module not in out:
                out.append(module)
    return out


class Tree:
    """lib/modules/<release> under root, complete or (for images) just its metadata."""

    def __init__(self, root: Path, release: str) -> None:
        self.root, self.release = root, release
        self.dir = root / "lib" / "modules" / release

    def ensure_dep(self) -> None:
        if (self.dir / "modules.dep").is_file():
            return
        try:
            p = subprocess.run(["depmod", "-b", str(self.root), self.release], capture_output=True, text=True,
                               timeout=300)
        except FileNotFoundError:
            raise SpecError(f"depmod not found: {paths.install_hint('kmod')}") from None
        except subprocess.TimeoutExpired:
            raise SpecError(f"depmod -b over {self.dir} took longer than 300 s") from None
        if p.returncode != 0 or not (self.dir / "modules.dep").is_file():
            raise SpecError(f"depmod -b {self.root} {self.release} failed: {p.stderr.strip()[-300:]}")

    def deps(self) -> dict[str, tuple[str, list[str]]]:
        """name -> (path in the tree, paths of everything it depends on)."""
        return parse_dep((self.dir / "modules.dep").read_text(errors="replace"), self.dir / "modules.dep")

    def soft_pre(self) -> dict[str, list[str]]:
        """module -> what its softdep says to load before it (a name or an
        alias: ext4's "pre: crc32c"), from depmod's modules.softdep."""
        f = self.dir / "modules.softdep"
        out: dict[str, list[str]] = {}
        for line in f.read_text(errors="replace").splitlines() if f.is_file() else []:
            words = line.split()
            if len(words) < 3 or words[0] != "softdep":
                continue
            pre = words[words.index("pre:") + 1:] if "pre:" in words else []
            out[module_name(words[1])] = [w for w in pre[:pre.index("post:")] if w] if "post:" in pre else pre
        return out

    def providers(self, name: str) -> list[str]:
        """The modules that answer a name or alias (modules.alias), generic ones first."""
        deps = self.deps()
        if module_name(name) in deps:
            return [module_name(name)]
        f = self.dir / "modules.alias"
        found = []
        for line in f.read_text(errors="replace").splitlines() if f.is_file() else []:
            words = line.split()
            if len(words) == 3 and words[0] == "alias" and fnmatch.fnmatchcase(name, words[1]) and words[2] in deps:
                found.append(words[2])
        return sorted(dict.fromkeys(found), key=lambda m: ("generic" not in m, m))

    def with_soft_deps(self, names: list[str]) -> list[str]:
        """names, each after the first provider of what its softdep loads before it."""
        soft, out = self.soft_pre(), []
        for name in names:
            for pre in soft.get(name, []):
                first = next(iter(self.providers(pre)), None)
                if first and first not in out:
                    out.append(first)
            if name not in out:
                out.append(name)
        return out

    def builtin(self) -> set[str] | None:
        """Built-in module names; None when the tree does not say."""
        f = self.dir / "modules.builtin"
        return {module_name(l) for l in f.read_text().split()} if f.is_file() else None


def parse_dep(text: str, where: Path) -> dict[str, tuple[str, list[str]]]:
    """A modules.dep (from a package or an image, not trusted): name -> (path
    in the tree, paths of what it depends on). A path that leaves the module
    tree (absolute, '..') is refused, naming its line."""
    out = {}
    for n, line in enumerate(text.splitlines(), 1):
        path, sep, rest = line.partition(":")
        if not sep:
            continue
        files = [untrusted.relative_path(p) for p in [path.strip(), *rest.split()]]
        if None in files:
            raise SpecError(f"{where} line {n} names a file outside the module tree: {line.strip()[:200]!r}")
        out[module_name(files[0])] = (files[0], files[1:])
    return out


def load_order(deps: dict[str, tuple[str, list[str]]], name: str) -> list[str]:
    """name's dependencies first (depth first), then name."""
    order: list[str] = []

    def visit(n: str, trail: tuple[str, ...]) -> None:
        if n in order or n in trail:
            return
        for d in deps.get(n, ("", []))[1]:
            visit(module_name(d), trail + (n,))
        order.append(n)
    visit(name, ())
    return order


def install(tree: Tree, names: list[str], dest: Path, fetch: Fetch | None = None) -> dict[str, list[str]]:
    """Copy names and their dependencies from tree into dest as NAME.ko
    (uncompressed): name -> the modules to load for it, in order ([] when
    built in)."""
    deps, builtin = tree.deps(), tree.builtin() or set()
    plan: dict[str, list[str]] = {}
    for name in names:
        if name in builtin:
            plan[name] = []
        elif name not in deps:
            raise SpecError(f"the kernel {tree.release} needs module {name} (its option is =m) but its modules "
                            f"have no {name}.ko: give the package that holds the modules too")
        else:
            plan[name] = load_order(deps, name)
    dest.mkdir(parents=True, exist_ok=True)
    for mod in {m for seq in plan.values() for m in seq}:
        rel = deps[mod][0]
        src = tree.dir / rel
        if not src.is_file():
            if fetch is None:
                raise SpecError(f"module {mod} ({rel}) is listed in modules.dep but missing from the kernel's files")
            src.parent.mkdir(parents=True, exist_ok=True)
            fetch(rel, src)
        uncompressed_copy(src, dest / f"{mod}.ko")
    return plan


def uncompressed_copy(src: Path, dest: Path) -> None:
    tool = DECOMPRESS.get(src.suffix)
    if tool is None:
        shutil.copyfile(src, dest)
        return
    with open(dest, "wb") as out:
        try:
            p = subprocess.run([*tool, str(src)], stdout=out, stderr=subprocess.PIPE, timeout=120)
        except FileNotFoundError:
            raise SpecError(f"{tool[0]} not found: {paths.install_hint()}") from None
    if p.returncode != 0:
        raise SpecError(f"{src.name}: {tool[0]} could not decompress it: {p.stderr.decode(errors='replace')[-200:]}")


def to_load(plan: dict[str, list[str]], names: Iterable[str]) -> list[str]:
    """The load sequence for names, each module once, dependencies first."""
    out: list[str] = []
    for n in names:
        for m in plan.get(n, []):
            if m not in out:
                out.append(m)
    return out
