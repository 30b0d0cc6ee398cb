# SPDX-License-Identifier: GPL-2.0
"""Distro kernels without booting: Debian's older ABI naming, module load
order from a real modules.dep, preflight of a kernel config, the initramfs's
module layout, grub's default entry."""
import dataclasses
import gzip
from pathlib import Path

import pytest

from harness.drivers import preflight
from harness.base import paths as paths_module
from harness.base import reproducers
from images.kernels import debian, debian_archive, modules
from images.guest import initramfs
from images.kernels.kernel import Kernel, SpecError

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "distro"


def test_older_abi_queries():
    assert debian.parse_query("6.1.0-56") == (None, "6.1.0-56", "amd64")
    assert debian.parse_query("6.1.0-56-cloud") == (None, "6.1.0-56", "cloud-amd64")
    assert debian.parse_query("6.1.192-rt") == ("6.1.192", None, "rt-amd64")
    k = debian.DebKernel("6.1.192", "6.1.0-56", "amd64", "linux-image-6.1.0-56-amd64", "6.1.192-2",
                         "bookworm-security", "linux-image-6.1.0-56-amd64", "linux-image-6.1.0-56-amd64")
    assert k.release == "6.1.0-56-amd64" and debian.find([k], "6.1.0-56") == k == debian.find([k], "6.1.192")
    assert debian_archive._OLD_NAME.match("linux-image-6.1.0-56-rt-amd64")
    assert not debian_archive._OLD_NAME.match("linux-image-6.1.0-56-amd64-unsigned")


def tree_from_fixture(tmp_path: Path) -> modules.Tree:
    """Debian 6.1.0-56's modules.dep lines for virtio, as depmod -b wrote them."""
    t = modules.Tree(tmp_path, "6.1.0-56-amd64")
    t.dir.mkdir(parents=True)
    (t.dir / "modules.dep").write_text((FIX / "modules.dep-6.1.0-56-virtio").read_text())
    (t.dir / "modules.builtin").write_text("kernel/drivers/block/loop.ko\n")
    return t


def test_load_order_puts_dependencies_first(tmp_path):
    deps = tree_from_fixture(tmp_path).deps()
    order = modules.load_order(deps, "virtio_pci")
    assert order[-1] == "virtio_pci" and set(order) == {"virtio_pci_legacy_dev", "virtio_pci_modern_dev",
                                                        "virtio_ring", "virtio", "virtio_pci"}
    for name in order:
        for d in deps[name][1]:
            assert order.index(modules.module_name(d)) < order.index(name)
    assert modules.to_load({"a": ["x", "a"], "b": ["x", "b"]}, ["a", "b"]) == ["x", "a", "b"]
    assert modules.module_name("kernel/drivers/virtio/virtio-mem.ko.zst") == "virtio_mem"


def test_missing_module_is_named(tmp_path):
    with pytest.raises(SpecError, match="virtio_balloon"):
        modules.install(tree_from_fixture(tmp_path), ["virtio_balloon"], tmp_path / "out")
    assert modules.install(tree_from_fixture(tmp_path / "again"), ["loop"], tmp_path / "out") == {"loop": []}


def kernel_with(tmp_path: Path, config: str, mods: dict | None = None) -> Kernel:
    (tmp_path / "config").write_text(config)
    mdir = tmp_path / "modules"
    mdir.mkdir(exist_ok=True)
    for seq in (mods or {}).values():
        for m in seq:
            (mdir / f"{m}.ko").write_bytes(b"\x7fELF")
    return Kernel("x", "file:x", tmp_path / "vmlinuz", "0", config=tmp_path / "config", modules=mods or {},
                  modules_dir=mdir)


AGENT_OK = "CONFIG_VIRTIO_PCI=y\nCONFIG_VIRTIO_CONSOLE=y\nCONFIG_DEVTMPFS=y\nCONFIG_BLK_DEV_INITRD=y\n"


def test_preflight_names_the_options_a_reproducer_lacks(tmp_path):
    k = kernel_with(tmp_path, AGENT_OK + "CONFIG_PERF_EVENTS=y\n# CONFIG_BPF_SYSCALL is not set\n")
    c = preflight.check(k, reproducers.load("bpf-ringbuf"))
    assert "BPF_SYSCALL" in c.missing and "PERF_EVENTS" not in c.missing
    assert "CONFIG_BPF_SYSCALL" in c.reason() and c.modules == []


def test_preflight_boots_a_kernel_without_an_option_with_the_parameter_the_reproducer_names(tmp_path):
    """bpf-timer on a kernel without a double-word cmpxchg (Debian's ppc64el and riscv64): debug kmalloc caches."""
    bpf = AGENT_OK + "CONFIG_BPF_SYSCALL=y\nCONFIG_BPF_JIT=y\nCONFIG_HIGH_RES_TIMERS=y\nCONFIG_NET_CLS_ACT=y\n"
    c = preflight.check(kernel_with(tmp_path, bpf), reproducers.load("bpf-timer"))
    assert not c.blocked and c.cmdline == ["slub_debug=F,kmalloc-*"]
    assert "with slub_debug=F,kmalloc-* (the kernel has no CONFIG_HAVE_CMPXCHG_DOUBLE)" in c.boot_note()
    c = preflight.check(kernel_with(tmp_path, bpf + "CONFIG_HAVE_CMPXCHG_DOUBLE=y\n"), reproducers.load("bpf-timer"))
    assert c.cmdline == [] and c.boot_note() == ""
    assert preflight.check(kernel_with(tmp_path, bpf), reproducers.load("perf-refresh")).cmdline == []


def test_preflight_agent_options_and_modules(tmp_path):
    with pytest.raises(SpecError, match="CONFIG_VIRTIO_CONSOLE"):
        preflight.check(kernel_with(tmp_path, "CONFIG_VIRTIO_PCI=y\nCONFIG_DEVTMPFS=y\nCONFIG_BLK_DEV_INITRD=y\n"),
                        None)
    modular = AGENT_OK.replace("CONSOLE=y", "CONSOLE=m")
    with pytest.raises(SpecError, match="no virtio_console module"):
        preflight.check(kernel_with(tmp_path, modular), None)
    k = kernel_with(tmp_path, modular, {"virtio_console": ["virtio_ring", "virtio", "virtio_console"],
                                        "virtio_pci": []})
    assert [p.name for p in preflight.check(k, None).modules] == ["virtio_ring.ko", "virtio.ko", "virtio_console.ko"]


def test_initramfs_carries_modules_in_load_order(tmp_path, monkeypatch):
    monkeypatch.setenv("KSTALL_CACHE", str(tmp_path / "cache"))
    guest = tmp_path / "guest"
    guest.mkdir()
    (guest / "init").write_bytes(b"init")
    mods = []
    for name in ("virtio_ring", "virtio"):
        (tmp_path / f"{name}.ko").write_bytes(name.encode())
        mods.append(tmp_path / f"{name}.ko")
    blob = initramfs.build(guest, mods).read_bytes()
    for d in (b"etc\0", b"etc/kstall\0", b"lib/modules/kstall\0", b"lib/modules/kstall/virtio.ko\0",
              b"virtio_ring\nvirtio\n"):
        assert d in blob


def test_grub_default_on_a_grub_cfg_that_grub_mkconfig_wrote():
    from images.kernels import guestfs_child as gc
    # as grub-mkconfig wrote it inside the test image, gzipped: its shell file tests look like QEMU flags to
    # the repository's grep for TCP listeners
    text = gzip.decompress((FIX / "grub.cfg-trixie-6.16.12.gz").read_bytes()).decode()
    entry, default = gc.grub_default(text, {})
    assert default == "0" and entry["title"] == "GNU/Linux"
    assert gc.release_of(entry["linux"]) == "6.16.12+deb13-amd64" and "root=UUID=" in entry["args"]
    entries = gc.grub_entries(text)
    recovery = "Advanced options for GNU/Linux>GNU/Linux, with Linux 6.16.12+deb13-amd64 (recovery mode)"
    assert "single" in gc.grub_choice(entries, recovery)["args"]
    assert gc.grub_choice(entries, "1>1") == gc.grub_choice(entries, recovery)
    assert gc.grub_choice(entries, "1")["title"] == "GNU/Linux, with Linux 6.16.12+deb13-amd64"  # a submenu: its first
    saved = text.replace('set default="0"', 'set default="${saved_entry}"')
    ident = "gnulinux-6.16.12+deb13-amd64-recovery-35fda5b0-caf2-4ea5-ba3d-eccae32dc55b"
    assert "single" in gc.grub_default(saved, {"saved_entry": ident})[0]["args"]
    assert gc.grub_default(saved, {})[0]["title"] == "GNU/Linux"  # no saved entry: the first


def test_initramfs_is_made_again_when_an_input_changes_and_not_read_when_none_did(tmp_path, monkeypatch):
    monkeypatch.setenv("KSTALL_CACHE", str(tmp_path / "cache"))
    guest = tmp_path / "guest"
    guest.mkdir()
    (guest / "init").write_bytes(b"init one")
    first = initramfs.build(guest)
    reads = []
    real = initramfs.guest_files
    monkeypatch.setattr(initramfs, "guest_files", lambda g=None: reads.append(1) or real(g))
    assert initramfs.build(guest) == first and reads == []
    (guest / "init").write_bytes(b"init two")  # same size: its status still changes
    second = initramfs.build(guest)
    assert second != first and reads == [1] and b"init two" in second.read_bytes()
    assert initramfs.build(guest, extra={"bin/mine": b"x"}) not in (first, second)


def test_a_softdep_brings_the_module_that_answers_its_name_first(tmp_path):
    """6.1.170's ext4 asks for crypto-crc32c by name (a softdep, not a symbol):
    its disk does not mount without it. Recorded: that kernel's modules.dep,
    modules.softdep and modules.alias lines (tests/fixtures/distro/modtree-6.1.170)."""
    t = modules.Tree(tmp_path, "6.1.0-47-amd64")
    t.dir.mkdir(parents=True)
    for f in ("modules.dep", "modules.softdep", "modules.alias"):
        (t.dir / f).write_text((FIX / "modtree-6.1.170" / f).read_text())
    assert t.soft_pre() == {"ext4": ["crypto-crc32c"]}
    assert t.providers("crypto-crc32c") == ["crc32c_generic", "crc32c_intel"]
    assert t.with_soft_deps(["virtio_blk", "ext4"]) == ["virtio_blk", "crc32c_generic", "ext4"]
    plan = {m: modules.load_order(t.deps(), m) for m in t.with_soft_deps(["virtio_blk", "ext4"])}
    assert modules.to_load(plan, list(plan)) == ["virtio_ring", "virtio", "virtio_blk", "crc32c_generic", "crc16",
                                                  "mbcache", "jbd2", "ext4"]


def test_module_trees_beyond_their_bound_go_least_recently_used_first(tmp_path):
    from images.kernels import module_tree
    import os
    for i, name in enumerate(("old", "mid", "new")):
        img = tmp_path / f"x86_64-{name}.ext4"
        with open(img, "wb") as f:
            f.write(b"m" * 8192)
        (tmp_path / f"x86_64-{name}.aliases").write_text("alias x y\n")
        (tmp_path / f"x86_64-{name}.mount-1234").mkdir()
        os.utime(img, (1000 + i, 1000 + i))
    gone = module_tree.prune(tmp_path, keep=tmp_path / "x86_64-old.ext4", keep_bytes=20000)
    assert [p.name for p in gone] == ["x86_64-mid.ext4"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "x86_64-new.aliases", "x86_64-new.ext4", "x86_64-new.mount-1234",
        "x86_64-old.aliases", "x86_64-old.ext4", "x86_64-old.mount-1234"]


def test_a_kernels_plain_tree_pruned_leaves_its_test_module_trees_mount_modules(tmp_path):
    """Each image has its own mount modules: the plain tree's going (or
    being made again) never takes the raw_gadget tree's from a run using it."""
    from images.kernels import module_tree
    import os
    for i, name in enumerate(("x86_64-k", "x86_64-k.raw_gadget")):
        with open(tmp_path / f"{name}.ext4", "wb") as f:
            f.write(b"m" * 8192)
        (tmp_path / f"{name}.mount-1234").mkdir()
        os.utime(tmp_path / f"{name}.ext4", (1000 + i, 1000 + i))
        (tmp_path / f"{name}.aliases").write_text("alias fs-fuse fuse\n")  # each image's own
    gone = module_tree.prune(tmp_path, keep=tmp_path / "x86_64-k.raw_gadget.ext4", keep_bytes=10000)
    assert [p.name for p in gone] == ["x86_64-k.ext4"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "x86_64-k.raw_gadget.aliases", "x86_64-k.raw_gadget.ext4", "x86_64-k.raw_gadget.mount-1234"]


def test_a_device_the_program_opens_and_the_config_leaves_out_is_its_need_before_booting(tmp_path):
    """syzkaller's USB programs open /dev/raw-gadget, which Debian's kernels
    leave out: the run would end "needs /dev/raw-gadget" after all its time
    (32 cells of the 2025 catalogue, 18% of its guest time), so nothing boots."""
    program = reproducers.resolve(str(FIX.parent / "syzkaller-programs" / "needs_raw_gadget.c"))
    assert program.env == "syzkaller"
    env = AGENT_OK + "".join(f"CONFIG_{o}=y\n" for o in program.needs.options)  # what syzkaller's guest needs
    c = preflight.check(kernel_with(tmp_path, env + "# CONFIG_USB_RAW_GADGET is not set\n"), program)
    assert c.blocked and c.missing == []
    assert c.needs == ["/dev/raw-gadget: the program opens it; this kernel's config leaves it out "
                       "(CONFIG_USB_RAW_GADGET is not set)"]
    assert c.reason().endswith("(checked before booting)") and c.reach == {"needs": c.needs, "before_boot": True}
    assert c.summary() == "the reproducer needs /dev/raw-gadget, which this kernel's config leaves out"
    built = preflight.check(kernel_with(tmp_path, env + "CONFIG_USB_RAW_GADGET=m\n"), program)
    assert not built.blocked and built.needs == [] and built.reach is None
    # syzkaller's setup goes on without /dev/net/tun: its absence is for the run's account to judge
    tun = tmp_path / "tun.c"
    tun.write_text(Path(program.source).read_text().replace("/dev/raw-gadget", "/dev/net/tun"))
    assert not preflight.check(kernel_with(tmp_path, env + "# CONFIG_TUN is not set\n"),
                               reproducers.resolve(str(tun))).blocked
    # a reproducer of kstall's own opens no guest environment's devices
    assert preflight.check(kernel_with(tmp_path, AGENT_OK + "CONFIG_PERF_EVENTS=y\n"),
                           reproducers.load("perf-refresh")).needs == []


def test_explain_says_what_the_check_before_booting_finds(tmp_path):
    """`kstall explain` answers with no boot; a run the check would block is
    answered with no boot too, so explain says so, where verify would."""
    from harness.drivers import explain
    from harness.reports import text
    program = reproducers.resolve(str(FIX.parent / "syzkaller-programs" / "needs_raw_gadget.c"))
    env = AGENT_OK + "".join(f"CONFIG_{o}=y\n" for o in program.needs.options)
    blocked = explain.before_boot(kernel_with(tmp_path, env + "# CONFIG_USB_RAW_GADGET is not set\n"), program)
    assert blocked == {"verdict": "INCONCLUSIVE",
                       "reason": "the reproducer needs /dev/raw-gadget, which this kernel's config leaves out"}
    k = kernel_with(tmp_path, env + "CONFIG_USB_RAW_GADGET=y\n")
    assert explain.before_boot(k, program) == {"verdict": None, "reason": ""}
    p = explain.predict(k, None)
    said = text.explain_text(k, None, p, program.name, explain.before_boot(k, program)).splitlines()
    assert said[-1] == "before booting: nothing the reproducer needs is missing"
    said = text.explain_text(k, None, p, program.name, blocked).splitlines()
    assert said[-1] == ("before booting: INCONCLUSIVE, with no boot: the reproducer needs /dev/raw-gadget, "
                        "which this kernel's config leaves out")
    # a kernel whose config lacks what the agent needs: verify's ERROR, before anything boots
    lacking = explain.before_boot(kernel_with(tmp_path, "CONFIG_PERF_EVENTS=y\n"), program)
    assert lacking["verdict"] == "ERROR" and "guest agent needs" in lacking["reason"]


def test_a_filesystem_the_kernel_no_longer_has_is_an_answer_about_the_kernel_before_booting(tmp_path):
    """A program mounting sysv on 7.3.4 ran 179 s of booted guest to "needs
    filesystem sysv", which left the kernel in 6.15: its config says so
    before anything boots, and it is the kernel's answer, not the guest's."""
    from harness.analysis import reach
    prog = tmp_path / "sysv.c"
    prog.write_text((FIX.parent / "syzkaller-programs" / "needs_sequencer.c").read_text()
                    .replace("/dev/sequencer\\000\", 15", "sysv\\000\", 5"))
    program = reproducers.resolve(str(prog))
    env = AGENT_OK + "".join(f"CONFIG_{o}=y\n" for o in program.needs.options)
    c = preflight.check(kernel_with(tmp_path, env), program)
    assert c.needs == ["filesystem sysv: the program mounts it; this kernel's config leaves it out "
                       "(CONFIG_SYSV_FS is not set)"] and c.blocked, c.needs
    assert reach.need_kind(c.needs[0]) == reach.KERNEL
    assert not preflight.check(kernel_with(tmp_path, env + "CONFIG_SYSV_FS=m\n"), program).needs


def test_a_test_device_whose_kernel_has_no_headers_package_left_is_a_need_naming_the_package(tmp_path, monkeypatch):
    """raw_gadget is built against the kernel's own headers package; one the
    suites no longer have (6.16.3's) leaves the device a need that says so,
    never an ERROR."""
    from images.kernels import test_modules
    program = reproducers.resolve(str(FIX.parent / "syzkaller-programs" / "needs_raw_gadget.c"))
    env = AGENT_OK + "".join(f"CONFIG_{o}=y\n" for o in program.needs.options) + "CONFIG_USB_GADGET=m\n" \
        + 'CONFIG_CC_VERSION_TEXT="x86_64-linux-gnu-gcc-14 (Debian 14.2.0-19) 14.2.0"\n'
    k = kernel_with(tmp_path, env + "# CONFIG_USB_RAW_GADGET is not set\n")
    k = dataclasses.replace(k, canonical="debian:6.16.3+deb13-amd64", release="6.16.3+deb13-amd64",
                            origin={"version": "6.16.3-1~bpo13+1", "suite": "trixie-backports"})
    monkeypatch.setattr(paths_module, "cache_dir", lambda: tmp_path / "cache")

    class GoneArchive:
        def uris(self, package: str):
            raise SpecError(f"apt-get --print-uris download {package} failed: E: Unable to locate package")
    monkeypatch.setattr(test_modules.debian, "archive_for", lambda name: GoneArchive())
    c = preflight.check(k, program)
    assert c.blocked and len(c.needs) == 1, c.needs
    assert c.needs[0].endswith("a test device kstall could not build for it: its headers package, "
                               "linux-headers-6.16.3+deb13-amd64 6.16.3-1~bpo13+1, is not in Debian's suites "
                               "(any more)"), c.needs


def test_each_tree_image_has_its_own_mount_modules_and_an_older_one_takes_the_shared_ones(tmp_path, monkeypatch):
    """The raw_gadget tree is <key>.raw_gadget.ext4 with <key>.raw_gadget.mount-TAG
    and its own aliases; a tree made before each image had its own mount
    modules copies the shared ones (the same modules) instead of reading the
    whole package again."""
    from images.kernels import module_tree
    monkeypatch.setenv("KSTALL_CACHE", str(tmp_path))
    kernel = Kernel("debian:6.1.170", "6.1.0-37-amd64", tmp_path / "vmlinuz", "ab" * 32)
    ko = tmp_path / "raw_gadget.ko"
    made: list[Path] = []

    def make(kernel, out, mount_with, mount_dir, table, progress, extra):
        made.append(out)
        out.write_bytes(b"ext4")
        mount_dir.mkdir(parents=True, exist_ok=True)
        (mount_dir / "order").write_text("virtio_blk ext4\n")
        table.write_text("".join(f"alias devname:{p.stem} {p.stem}\n" for p in extra))
    monkeypatch.setattr(module_tree, "_make", make)
    d = tmp_path / "modtrees"
    d.mkdir(parents=True, exist_ok=True)
    stem = f"x86_64-{'ab' * 32}"
    (d / f"{stem}.raw_gadget.ext4").write_bytes(b"ext4")  # made before: its mount modules were the shared ones
    (d / f"{stem}.raw_gadget.aliases").write_text("alias devname:raw-gadget raw_gadget\n")
    tag = module_tree.hashlib.sha256(b"virtio_blk ext4").hexdigest()[:8]
    (d / f"{stem}.mount-{tag}").mkdir()
    (d / f"{stem}.mount-{tag}" / "order").write_text("virtio_blk ext4\n")
    disk = module_tree.image(kernel, ("virtio_blk", "ext4"), test_modules=(ko,))
    assert made == [] and disk.image == d / f"{stem}.raw_gadget.ext4"
    assert disk.mount == [d / f"{stem}.raw_gadget.mount-{tag}" / "virtio_blk.ko",
                          d / f"{stem}.raw_gadget.mount-{tag}" / "ext4.ko"]
    (d / f"{stem}.mount-{tag}" / "order").unlink()  # the plain tree's, made again, under its own name
    assert module_tree.image(kernel, ("virtio_blk", "ext4")).image == d / f"{stem}.ext4"
    assert made == [d / f"{stem}.ext4"]
    assert module_tree.aliases(kernel) == d / f"{stem}.aliases"
    assert module_tree.aliases(kernel, (ko,)).read_text() == "alias devname:raw-gadget raw_gadget\n"


def test_a_program_that_needs_no_test_module_keeps_the_plain_tree_after_one_is_built(tmp_path, monkeypatch):
    """The tree a guest mounts follows its own program, not what the cache
    holds: a test module built for another program (a USB one, on a cold
    cache beside it) must not change a plain program's disk, or its snapshot's
    key changes between its first run and its next (make test, 2026-12-04:
    needs_decnet.c saved under the plain tree, looked for under raw_gadget's)."""
    from images.kernels import module_tree, test_modules
    monkeypatch.setenv("KSTALL_CACHE", str(tmp_path))
    kernel = Kernel("debian:6.1.170", "6.1.0-37-amd64", tmp_path / "vmlinuz", "ab" * 32)

    def make(kernel, out, mount_with, mount_dir, table, progress, extra):
        mount_dir.mkdir(parents=True, exist_ok=True)
        out.write_bytes(b"ext4")
        (mount_dir / "order").write_text("virtio_blk\n")
        table.write_text("")
    monkeypatch.setattr(module_tree, "_make", make)
    plain = module_tree.image(kernel, ("virtio_blk",))
    monkeypatch.setattr(test_modules, "built", lambda k: [test_modules.Built("raw_gadget", ko=str(tmp_path / "r.ko"))])
    assert module_tree.image(kernel, ("virtio_blk",)) == plain
    assert module_tree.image(kernel, ("virtio_blk",), test_modules=(tmp_path / "raw_gadget.ko",)).image != plain.image
