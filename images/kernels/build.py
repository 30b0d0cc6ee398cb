# SPDX-License-Identifier: GPL-2.0
"""build:TREE[@REV] kernels: built from a kernel git tree, out of tree, cached.

The user's tree is never written to. With a REV (or while the tree is being
bisected with --no-checkout, when BISECT_HEAD names the candidate) the
commit is checked out in a shared clone under <cache>/src, which borrows the
tree's objects; without one the tree's work tree itself is the source, built
with O= (the kernel then insists on a clean source tree).

Configuration: `make tinyconfig`, then images/kconfig/base.config, the
reproducer's options (its data file's [kernel] options and build), the user's --config
fragments and, with --debuginfo, debuginfo.config; then olddefconfig. One
object directory per tree and configuration keeps steps incremental, ccache
(<cache>/ccache) covers the rest. A finished build is cached by commit and
configuration in <cache>/kernels/build/, so a bisection that comes back to a
commit does not build it again.
"""
from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from harness.base import arch, paths, procs
from harness.base.arch import Arch
from harness.base.needs import KernelNeeds
from images.kernels import cached, symcache
from images.kernels.kernel import Kernel, Progress, SpecError, sha256_file

KCONFIG_DIR = paths.data_file("images", "kconfig")
PROGRESS_EVERY = 15.0


class BuildError(SpecError):
    """The kernel did not configure or build; the message ends with the log's tail."""


@dataclass
class BuildOptions:
    needs: KernelNeeds | None = None  # the reproducer's, written as its fragment
    fragments: list[Path] = field(default_factory=list)   # the user's, after kstall's own
    debuginfo: bool = False
    jobs: int = 0               # 0: one more than the host cores
    timeout: float = 7200.0     # per build, seconds
    arch: str = ""              # the kernel's architecture (arches.toml): the host's unless named

    @property
    def target(self) -> Arch:
        return arch.get(self.arch) if self.arch else arch.host()

    def config_files(self) -> list[Path]:
        files = [KCONFIG_DIR / "base.config"]
        if "config" in self.target.kbuild:  # what the architecture's tinyconfig leaves out
            files.append(KCONFIG_DIR / self.target.kbuild["config"])
        if self.needs and (self.needs.options or self.needs.build):
            text = self.needs.fragment()
            digest = hashlib.sha256(text.encode()).hexdigest()[:16]
            files.append(paths.write_atomic(paths.cache_dir() / "kconfig" / digest / f"{self.needs.owner}.config",
                                            text))
        for f in self.fragments:
            if not Path(f).is_file():
                raise SpecError(f"config fragment {f} does not exist")
            files.append(Path(f).resolve())
        if self.debuginfo:
            files.append(KCONFIG_DIR / "debuginfo.config")
        return files

    def key(self) -> str:
        h = hashlib.sha256()
        for f in self.config_files():
            h.update(f.read_bytes())
        return h.hexdigest()[:10]


def git(tree: Path, *args: str, timeout: float = 300, check: bool = True) -> str:
    """git -C tree ARGS, bounded; its stdout, or SpecError on failure when check."""
    try:
        p = subprocess.run(["git", "-C", str(tree), *args], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise SpecError(f"git {' '.join(args)} in {tree} took longer than {timeout:.0f}s") from None
    if check and p.returncode != 0:
        raise SpecError(f"git {' '.join(args)} in {tree}: {p.stderr.strip()[-400:]}")
    return p.stdout.strip()


def parse(text: str) -> tuple[Path, str | None]:
    """'TREE' | 'TREE@REV' -> (tree, rev or None)."""
    tree_text, at, rev = text.rpartition("@")
    if not at or not Path(tree_text).expanduser().is_dir():
        tree_text, rev = text, None
    tree = Path(tree_text).expanduser().resolve()
    if not tree.is_dir():
        raise SpecError(f"build:{text}: no such directory {tree}")
    if not (tree / "Makefile").is_file() or not (tree / "Kconfig").is_file():
        raise SpecError(f"build:{text}: {tree} is not a kernel source tree (no Makefile and Kconfig)")
    return tree, rev or None


def _tree_key(tree: Path) -> str:
    return f"{tree.name}-{hashlib.sha256(str(tree).encode()).hexdigest()[:8]}"


def is_git(tree: Path) -> bool:
    return bool(git(tree, "rev-parse", "--git-dir", check=False))


def commit_of(tree: Path, rev: str) -> str | None:
    """rev's commit id, or None when tree has no such commit."""
    return git(tree, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}", check=False) or None


def identify(tree: Path, rev: str | None) -> tuple[str | None, str]:
    """(commit to build or None for the work tree, identity of what is built)."""
    if rev is None and is_git(tree) and commit_of(tree, "BISECT_HEAD"):
        rev = "BISECT_HEAD"   # the candidate of a `git bisect start --no-checkout`
    if rev is not None:
        sha = commit_of(tree, rev)
        if not sha:
            raise SpecError(f"{rev!r} is not a commit in {tree}")
        return sha, sha[:12]
    if not is_git(tree):
        return None, "worktree-" + hashlib.sha256(str(tree).encode()).hexdigest()[:8]
    head = (commit_of(tree, "HEAD") or "nohead")[:12]
    if git(tree, "status", "--porcelain", "--untracked-files=no"):
        return None, f"{head}-dirty{hashlib.sha256(git(tree, 'diff', 'HEAD').encode()).hexdigest()[:8]}"
    return None, head


def checkout(tree: Path, sha: str, progress: Progress | None) -> Path:
    """sha checked out in kstall's shared clone of tree."""
    clone = paths.cache_dir() / "src" / _tree_key(tree)
    if not (clone / ".git").is_dir():
        if progress:
            progress(f"making a shared clone of {tree} in {clone} (the tree itself stays untouched)")
        shutil.rmtree(clone, ignore_errors=True)
        clone.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["git", "clone", "-q", "--shared", "--no-checkout", str(tree), str(clone)], check=True,
                       timeout=600, capture_output=True)
    if progress:
        progress(f"checking out {sha[:12]} in {clone}")
    # a checkout interrupted earlier (Ctrl-C) leaves its lock; the tree's flock makes this one ours
    (clone / ".git" / "index.lock").unlink(missing_ok=True)
    git(clone, "checkout", "-q", "--detach", "-f", sha, timeout=900)
    git(clone, "clean", "-q", "-fdx", timeout=300)
    return clone


def _cross(target: Arch) -> str:
    """CROSS_COMPILE's prefix for a kernel of target on this host ("" for the host's own)."""
    return "" if target.compiler() == "gcc" else f"{target.triplet}-"


def _make(args: list[str], src: Path, out: Path, log, env: dict, deadline: float, what: str,
          progress: Progress | None, target: Arch | None = None) -> None:
    """One make run in its own process group, killed and reaped however we leave."""
    t0 = time.monotonic()
    target = target or arch.host()
    kbuild = [f"ARCH={target.kbuild['arch']}"] + ([f"CROSS_COMPILE={_cross(target)}"] if _cross(target) else [])
    log.write(f"$ make {' '.join(kbuild + args)}\n")
    log.flush()
    proc = subprocess.Popen(["make", "-C", str(src), f"O={out}", *kbuild, *args],
                            stdout=log,
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                            start_new_session=True, preexec_fn=procs.die_with_parent)
    try:
        last = t0
        while True:
            try:
                rc = proc.wait(timeout=1.0)
                break
            except subprocess.TimeoutExpired:
                pass
            now = time.monotonic()
            if now > deadline:
                raise BuildError(f"{what}: make {args[-1]} took longer than the build timeout") from None
            if progress and now - last >= PROGRESS_EVERY:
                last = now
                progress(f"{what}: make {args[-1]} {now - t0:.0f}s, {_compiled(log.name)} files compiled")
    finally:
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(5)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            proc.wait(30)
    if rc != 0:
        raise BuildError(f"{what}: make {' '.join(args)} failed (exit {rc}); last lines of {log.name}:\n"
                         + _tail(Path(log.name)))


def _compiled(log_path: str) -> int:
    try:
        return sum(1 for l in open(log_path, errors="replace") if l.startswith("  CC "))
    except OSError:
        return 0


def _tail(path: Path, n: int = 25) -> str:
    lines = path.read_text(errors="replace").splitlines()
    errors = [l for l in lines if re.search(r"\berror\b|Error \d", l)]
    return "\n".join((errors[:8] + ["..."] if errors else []) + lines[-n:])


def config_mismatches(config: Path, fragments: list[Path]) -> list[str]:
    """Fragment settings that did not survive olddefconfig (dependencies unmet,
    option renamed or gone in this version)."""
    have: dict[str, str] = {}
    for line in config.read_text().splitlines():
        m = re.match(r"(CONFIG_\w+)=(.*)", line) or re.match(r"# (CONFIG_\w+) is not set", line)
        if m:
            have[m.group(1)] = m.group(2) if m.lastindex == 2 else "n"
    wanted: dict[str, str] = {}
    for f in fragments:
        for line in f.read_text().splitlines():
            m = re.match(r"(CONFIG_\w+)=(.*)", line) or re.match(r"# (CONFIG_\w+) is not set", line)
            if m:
                wanted[m.group(1)] = m.group(2) if m.lastindex == 2 else "n"
    return [f"{k}={v} (got {have.get(k, 'n')})" for k, v in wanted.items() if have.get(k, "n") != v]


def _env() -> dict:
    env = dict(os.environ)
    # depend mode: a miss costs no extra preprocessor run (the kernel's -MMD gives the headers)
    env.update(CCACHE_DIR=str(paths.cache_dir() / "ccache"), CCACHE_BASEDIR=str(paths.cache_dir()), CCACHE_DEPEND="1",
               KBUILD_BUILD_TIMESTAMP="1970-01-01", KBUILD_BUILD_USER="kstall", KBUILD_BUILD_HOST="kstall",
               LOCALVERSION="", LC_ALL="C")
    return env


def _ccache_has_results(ccache_dir: Path) -> bool:
    """Whether ccache holds any compile result (files ending in R, ccache 4)."""
    for _, _, files in os.walk(ccache_dir):
        if any(f.endswith("R") for f in files):
            return True
    return False


def build(text: str, opts: BuildOptions, progress: Progress | None = None) -> Kernel:
    tree, rev = parse(text)
    fragments = opts.config_files()
    fkey = opts.key()
    lock_dir = paths.cache_dir() / "build"
    lock_dir.mkdir(parents=True, exist_ok=True)
    # one build per tree at a time: the shared clone and the object directory are per tree
    with open(lock_dir / f"{_tree_key(tree)}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        sha, ident = identify(tree, rev)
        target = opts.target
        foreign = "" if target == arch.host() else f"-{target.name}"  # a cross-built kernel's own directories
        dest = paths.cache_dir() / "kernels" / "build" / f"{_tree_key(tree)}-{ident}-{fkey}{foreign}"
        spec = f"build:{text}"
        # the work tree can change without its identity changing (untracked files): always make
        if (dest / "kernel.json").is_file() and sha is not None:
            k = cached.load_meta(dest, spec)
            if not symcache.cached(k.key):
                symcache.store_system_map(k.key, (dest / "System.map").read_bytes())
            k.origin["cached"] = True
            return k
        src = checkout(tree, sha, progress) if sha else tree
        out = lock_dir / f"{_tree_key(tree)}-{fkey}{foreign}"
        out.mkdir(parents=True, exist_ok=True)
        what = f"build {tree.name}@{ident}"
        jobs = opts.jobs or (os.cpu_count() or 1) + 1  # one more than the cores: a job waiting on I/O leaves none idle
        env = _env()
        # a first build here with an empty ccache cannot hit: going through it
        # would only cost that build the hashing and storing of every object.
        # The command line, which Kbuild compares, stays "ccache gcc", so the
        # incremental builds that follow here go through ccache and fill it.
        ccache = "ccache"
        if not (out / "vmlinux").exists() and not _ccache_has_results(Path(env["CCACHE_DIR"])):
            env["CCACHE_DISABLE"], ccache = "1", "ccache empty: off for this first build"
        t0 = time.monotonic()
        deadline = t0 + opts.timeout
        if progress:
            progress(f"{what}: tinyconfig + {', '.join(f.name for f in fragments)}; -j{jobs}, {ccache}; "
                     f"log {out / 'build.log'}")
        with open(out / "build.log", "w") as log:
            _make(["--silent", "tinyconfig"], src, out, log, env, deadline, what, None, target)
            merge = src / "scripts" / "kconfig" / "merge_config.sh"
            p = subprocess.run([str(merge), "-m", "-O", str(out), str(out / ".config"), *map(str, fragments)],
                               stdout=log, stderr=subprocess.STDOUT, cwd=out, env=env, timeout=120)
            if p.returncode != 0:
                raise BuildError(f"{what}: merge_config.sh failed:\n{_tail(out / 'build.log')}")
            _make(["--silent", "olddefconfig"], src, out, log, env, deadline, what, None, target)
            missing = config_mismatches(out / ".config", fragments)
            if missing and progress:
                progress(f"{what}: fragment options not in the final .config: {'; '.join(missing)}")
            targets = [target.kbuild["target"]] + (["vmlinux"] if opts.debuginfo else [])
            _make([f"-j{jobs}", f"CC=ccache {_cross(target)}gcc", *targets], src, out, log, env, deadline, what,
                  progress, target)
        seconds = round(time.monotonic() - t0, 1)
        release = (out / "include" / "config" / "kernel.release").read_text().strip()

        def fill(tmp: Path) -> Kernel:
            for name, copy in ((target.kbuild["image"], "bzImage"), (".config", "config"),
                               ("System.map", "System.map"), ("build.log", "build.log")) + \
                    ((("vmlinux", "vmlinux"),) if opts.debuginfo else ()):
                shutil.copy2(out / name, tmp / copy)
            return Kernel(spec=spec, canonical=f"build:{tree}@{ident}", vmlinuz=dest / "bzImage",
                          sha256=sha256_file(tmp / "bzImage"), release=release,
                          upstream=release.split("-")[0].split("+")[0], config=dest / "config",
                          vmlinux=dest / "vmlinux" if opts.debuginfo else None, arch=target.name,
                          origin={"tree": str(tree), "rev": rev, "commit": sha or ident,
                                  "label": f"build-{tree.name}-{ident}", "fragments": [str(f) for f in fragments],
                                  "config_mismatches": missing, "build_s": seconds, "jobs": jobs})
        k = cached.publish(dest, fill)
        # with nokaslr the link-time addresses are the running ones: no symbol capture boot
        symcache.store_system_map(k.key, (dest / "System.map").read_bytes())
        if progress:
            progress(f"{what}: built {release} in {seconds:.0f}s")
        k.origin["cached"] = False
        return k

