# SPDX-License-Identifier: GPL-2.0
"""ppc64le, s390x and riscv64 as rows of the architecture table: ppc64le's
hang read from a recorded real freeze (Debian's 6.1.170 under bpf-timer), the
back chain and riscv's frame records walked on stacks laid out as their ABIs
lay them, big-endian words read so, and what each row's guests cannot do."""
import copy
import dataclasses
import json
import struct
from pathlib import Path

import pytest
from recorded import FIXTURES, load_samples

from harness.analysis import backchain, classify, framewalk, kernel_layout, unwind
from harness.analysis.classify import Role
from harness.analysis.kallsyms import Kallsyms
from harness.base import arch, needs, paths, reproducers
from harness.drivers import preflight
from images.guest import skeleton
from images.kernels import debian, schemes
from images.kernels.kernel import Kernel, SpecError, image_arch

FIXTURE = "bpf-timer-6.1.170-ppc64le"
PPC, S390, RISCV = arch.get("ppc64le"), arch.get("s390x"), arch.get("riscv64")


def rewalk(cpu: dict, s: Kallsyms, a: arch.Arch) -> list[dict]:
    regs = {k: int(v, 16) for k, v in cpu["regs"].items()}
    regions = [(int(r["base"], 16), bytes.fromhex(r["bytes"])) for r in cpu["regions"]]
    return [f.to_json() for f in unwind.for_arch(a).frames(regs, a, regions, {}, s)]


def test_the_ppc64le_back_chain_runs_from_the_irq_stack_through_the_bpf_program_into_the_system_call():
    s = Kallsyms.load(str(FIXTURES / FIXTURE / "kallsyms"))
    cpus = [c for sample in load_samples(FIXTURE) for c in sample["cpus"]]
    assert cpus and all(c["arch"] == "ppc64le" for c in cpus)
    for cpu in cpus:
        frames = rewalk(cpu, s, PPC)
        assert frames == cpu["frames"]
        names = [f["function"] for f in frames]
        # the timer's callback cancels the other timer, inside the softirq the BPF program's run let in
        at = names.index("bpf_timer_cancel")  # hrtimer_cancel's wait, or the base lock it takes in turn
        assert "hrtimer_cancel" in names[:at] and names[-1] == "system_call_vectored_common"
        assert "bpf_timer_cb" in names and "__hrtimer_run_queues" in names and "bpf_prog_test_run_skb" in names
        assert names[at + 1] == "" and frames[at + 1]["text"].startswith("0xc008")  # the JITed program


def test_the_ppc64le_freeze_is_both_cpus_in_the_hrtimer_cancel_wait():
    samples = load_samples(FIXTURE)
    classes = classify.classify_samples(samples, classify.load_signatures())
    assert {c.cpu for c in classes if c.signature and c.signature.role == Role.CULPRIT} == {0, 1}
    assert {c.signature.name for c in classes if c.signature} == {"bpf_timer_cancel_each_other"}


def test_a_cpu_a_timer_interrupt_caught_on_top_of_the_wait_is_still_in_it():
    """make test, 2026-11-28: one of three samples caught ppc64el's CPU1 in a
    decrementer interrupt over its hrtimer_cancel wait, and the frame the
    interrupt cut into bore no mark, so the CPU was not the culprit
    (the signature wants the wait in every sample). Made from the recorded
    samples: CPU1's second sample with those frames on top."""
    samples = copy.deepcopy(load_samples(FIXTURE))
    cpu1 = next(c for c in samples[1]["cpus"] if c["cpu"] == 1)
    cpu1["frames"] = [{"function": f, "text": f"{f}+0x10/0x40"} for f in
                      ("decrementer_set_next_event", "timer_interrupt", "decrementer_common_virt")] + cpu1["frames"]
    classes = classify.classify_samples(samples, classify.load_signatures())
    assert {c.cpu for c in classes if c.signature.role == Role.CULPRIT} == {0, 1}
    x86 = classify.mark_interrupts([{"function": "sysvec_apic_timer_interrupt"},
                                    {"function": "asm_sysvec_apic_timer_interrupt"}, {"function": "hrtimer_cancel"},
                                    {"function": "bpf_timer_cancel"}], arch.get("x86_64"))
    assert [bool(f.get("interrupted")) for f in x86] == [False, False, True, False]


def test_a_cpu_caught_at_the_interrupt_vectors_first_instruction_is_still_in_its_wait():
    """make test, 2026-11-29: a sample caught ppc64el's CPU1 at the first
    instruction of the decrementer's vector (exc_virt_0x4900_decrementer+0x0,
    before the interrupt's frame is made): below it the back chain found the
    interrupted code (lock_hrtimer_base from the link register, the base lock
    hrtimer_try_to_cancel takes in hrtimer_cancel's loop), unmarked, and the
    CPU was not the culprit. The vectors are entries too (arches.toml).
    Its real frames, recorded from that run."""
    samples = copy.deepcopy(load_samples(FIXTURE))
    cpu1 = next(c for c in samples[1]["cpus"] if c["cpu"] == 1)
    cpu1["frames"] = json.loads((FIXTURES / FIXTURE / "cpu1-caught-at-the-vector.frames.json").read_text())
    classes = classify.classify_samples(samples, classify.load_signatures())
    assert {c.cpu for c in classes if c.signature.role == Role.CULPRIT} == {0, 1}
    marked = classify.mark_interrupts(cpu1["frames"], PPC)
    assert [f["function"] for f in marked if f.get("interrupted")] == ["lock_hrtimer_base"]


def _ppc_stack(base: int, frames: list[tuple[int, int]], order: str) -> bytes:
    """A stack of back-chained frames (ppc64: chain at +0, return address into the frame's owner at +16)."""
    data = bytearray(0x400)
    for i, (sp, ret) in enumerate(frames):
        nxt = frames[i + 1][0] if i + 1 < len(frames) else 0
        data[sp - base:sp - base + 8] = nxt.to_bytes(8, order)
        data[sp - base + 16:sp - base + 24] = ret.to_bytes(8, order)
    return bytes(data)


class _Syms(Kallsyms):
    def __init__(self, names: dict[int, str]):
        self.names = names

    def lookup(self, addr):
        hits = [(a, n) for a, n in self.names.items() if a <= addr < a + 0x100]
        if not hits:
            return None
        a, n = hits[0]
        return type("S", (), {"name": n, "addr": a})()

    def fmt(self, addr):
        s = self.lookup(addr)
        return f"{s.name}+{addr - s.addr:#x}" if s else f"{addr:#x}"


SYMS = _Syms({0x1000: "leaf", 0x2000: "middle", 0x3000: "outer", 0x4000: "entry"})


def test_the_back_chain_names_the_link_register_of_a_leaf_then_every_saved_return():
    base = 0xC000000004000000
    frames = [(base, 0x1010), (base + 0x80, 0x2020), (base + 0x100, 0x3030), (base + 0x180, 0x4040)]
    regions = [(base, _ppc_stack(base, frames, "little"))]
    regs = {"pc": 0x1008, "r1": base, "lr": 0x1500}
    got = backchain.frames(regs, PPC, regions, {}, SYMS)
    assert [f.function for f in got] == ["leaf", "middle", "outer", "entry"]
    assert all(f.reliable for f in got)


def test_an_interrupt_frame_names_the_interrupted_pc():
    base = 0xC000000004000000
    frames = [(base, 0x1010), (base + 0x200, 0x2020), (base + 0x400 - 0x80, 0x4040)]
    data = bytearray(_ppc_stack(base, frames, "little"))
    irq = base + 0x200
    data[irq - base + 96:irq - base + 104] = (0x7265677368657265).to_bytes(8, "little")  # "regshere", 6.1's place
    regs_at = irq - base + 96 + 16
    data[regs_at + 256:regs_at + 264] = (0x3044).to_bytes(8, "little")  # nip: in outer
    data[regs_at + 288:regs_at + 296] = (0x4010).to_bytes(8, "little")  # link
    got = backchain.frames({"pc": 0x1008, "r1": base, "lr": 0}, PPC, [(base, bytes(data))], {}, SYMS)
    interrupted = [f for f in got if f.interrupted]
    assert [f.function for f in interrupted] == ["outer"]


def test_s390x_reads_its_back_chain_big_endian_from_its_packed_frames():
    base = 0x3E000004000
    data = bytearray(0x600)
    chain = [(base, 0x2020), (base + 0x100, 0x3030), (base + 0x200, 0x4040)]
    for i, (sp, ret) in enumerate(chain):
        nxt = chain[i + 1][0] if i + 1 < len(chain) else 0
        struct.pack_into(">Q", data, sp - base + 152, nxt)  # back_chain
        struct.pack_into(">Q", data, sp - base + 136, ret)  # gprs[8]: r14
    assert S390.byteorder == "big" and unwind.for_arch(S390) is backchain
    got = backchain.frames({"pswa": 0x1008, "r15": base, "r14": 0x2020}, S390, [(base, bytes(data))], {}, SYMS)
    assert [f.function for f in got] == ["leaf", "middle", "outer", "entry"]


def test_riscv_frame_records_sit_below_the_frame_pointer_and_a_leaf_saves_only_its_fp():
    base = 0xFF20000000010000
    data = bytearray(0x400)
    fps = [base + 0x100, base + 0x200, base + 0x300]  # each fp points just above its record
    rets = [0x2020, 0x3030, 0x4040]
    for i, fp in enumerate(fps):
        nxt = fps[i + 1] if i + 1 < len(fps) else 0
        struct.pack_into("<QQ", data, fp - 16 - base, nxt, rets[i])
    leaf_fp = base + 0x80
    struct.pack_into("<Q", data, leaf_fp - 8 - base, fps[0])  # the leaf saved only its caller's fp
    regs = {"pc": 0x1008, "sp": base, "fp": leaf_fp, "ra": 0x1800}
    got = framewalk.frames(regs, RISCV, [(base, bytes(data))], {}, SYMS)
    # the pc's function, then each record's return address (ra, inside the leaf itself, adds no frame);
    # it passed for any walk that began at the leaf
    assert [(f.function, f.reliable) for f in got] == [("leaf", True), ("middle", True), ("outer", True),
                                                      ("entry", True)]
    # not a leaf: the record's return address is code, not a stack address
    regs = {"pc": 0x1008, "sp": base, "fp": fps[0], "ra": 0x1800}
    assert [f.function for f in framewalk.frames(regs, RISCV, [(base, bytes(data))], {}, SYMS)] == \
        ["leaf", "middle", "outer", "entry"]


def test_registers_are_read_each_architectures_way():
    assert PPC.in_user_mode({"msr": "0x800000000000d033"}) and not PPC.in_user_mode({"msr": "0x8000000000009033"})
    assert PPC.irqs_off({"msr": "0x8000000000001033"}) and not PPC.irqs_off({"msr": "0x8000000000009033"})
    assert S390.in_user_mode({"pswm": "0x0705000180000000"}) and not S390.in_user_mode({"pswm": "0x0704c00180000000"})
    assert S390.irqs_off({"pswm": "0x0400000180000000"}) and not S390.irqs_off({"pswm": "0x0704c00180000000"})
    assert RISCV.in_user_mode({"priv": "0x0"}) and not RISCV.in_user_mode({"priv": "0x1"})
    assert RISCV.irqs_off({"sstatus": "0x0"}) and not RISCV.irqs_off({"sstatus": "0x2"})


def test_a_kernel_image_says_its_architecture(tmp_path):
    s390 = bytearray(0x10010)
    s390[0x10008:0x1000E] = b"S390EP"
    ppc = bytearray(b"\x7fELF\x02\x01\x01" + bytes(64))
    rv = bytearray(0x40)
    rv[0x38:0x3C] = b"RSC\x05"
    for name, data, want in (("vmlinuz", s390, "s390x"), ("vmlinux", ppc, "ppc64le"), ("Image", rv, "riscv64")):
        (tmp_path / name).write_bytes(bytes(data))
        assert image_arch(tmp_path / name) == want


def test_debian_names_ppc64el_kernels_by_their_flavour():
    assert PPC.debian == "ppc64el" and PPC.flavour == "powerpc64le"
    assert schemes.for_arch("debian:6.1.170", "ppc64le") == "debian:6.1.170-powerpc64le"
    assert debian.arch_of("linux-image-6.1.0-47-powerpc64le") == "ppc64el"
    assert debian.arch_of("6.12.117+deb13-riscv64") == "riscv64" and debian.arch_of("6.1.0-47-s390x") == "s390x"
    assert arch.by_debian("powerpc64le") is PPC and arch.named("ppc64el") is PPC
    assert debian.parse_query("6.1.170-powerpc64le") == ("6.1.170", None, "powerpc64le")


def test_the_agent_reaches_the_host_on_the_machines_own_bus():
    assert S390.virtio == "ccw" and PPC.virtio == RISCV.virtio == "pci"
    assert "S390_GUEST" in needs.agent("ccw").options and "VIRTIO_PCI" not in needs.agent("ccw").options
    assert ("VIRTIO_PCI", "virtio_pci") in needs.agent("pci").modules
    assert needs.agent("pci").options[0] == "VIRTIO_PCI"  # its module loads before the console's


def test_what_the_host_cannot_build_is_inconclusive_before_boot(monkeypatch):
    # riscv64's loaders link through the shim now; a row that names a program
    # the host cannot build keeps it out of make guest and out of the guest
    k = Kernel("debian:6.12.117-riscv64", "debian:6.12.117+deb13-riscv64", Path("/nonexistent"), "0" * 64,
               arch="riscv64")
    assert not preflight.check(k, reproducers.load("bpf-timer")).blocked
    assert "GUEST_SKIP" not in arch.make_vars("riscv64")
    assert "LINK_SHIM=repro/older_libc_shim.c" in arch.make_vars("riscv64")
    assert (paths.REPO / "repro" / "older_libc_shim.c").is_file()
    assert "BPF_ENDIAN=bpfeb" in arch.make_vars("s390x") and "GUEST_SKIP" not in arch.make_vars("s390x")
    table = {**RISCV.table, "unbuildable": {"programs": ["bpf-timer"], "why": "no libbpf for it"}}
    monkeypatch.setattr(arch, "get", lambda name: dataclasses.replace(RISCV, table=table))
    check = preflight.check(k, reproducers.load("bpf-timer"))
    assert check.blocked
    assert "cannot build bpf-timer for riscv64 guests on this host (no libbpf for it)" in check.reason()
    assert not preflight.check(k, reproducers.load("perf-sigtrap")).blocked
    assert "GUEST_SKIP=bpf-timer" in arch.make_vars("riscv64")


def test_a_big_endian_skeleton_carries_the_big_endian_object():
    skel = ('static inline const void *p__elf_bytes(size_t *sz)\n{\n\t*sz = 3;\n\treturn (const void *)"\\\n'
            '\\x01\\x02\\x03";\n}\n')
    out = skeleton.carrying(skel, b"\x7fELF\x02\x02")
    assert "*sz = 6;" in out and "\\x7f\\x45\\x4c\\x46\\x02\\x02" in out and "\\x01\\x02\\x03" not in out
    with pytest.raises(ValueError):
        skeleton.carrying("no skeleton", b"")


def test_a_core_qemu_labels_big_endian_is_rewritten_in_a_little_endian_guests_order():
    # QEMU 7.2 writes a ppc64le guest's notes big-endian: every field of a CPU's
    # NT_PRSTATUS comes out in the architecture's order, its size kept
    from harness.debug import corekernel
    regs = list(range(0x1000, 0x1000 + 48))
    desc = struct.pack(">" + corekernel._PRSTATUS_HEAD, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, *range(8)) + \
        struct.pack(">48Q", *regs) + struct.pack(">i", 1) + bytes(4)
    note = struct.pack(">III", 5, len(desc), corekernel.NT_PRSTATUS) + b"CORE\0\0\0\0" + desc
    other = struct.pack(">III", 5, 8, 2) + b"CORE\0\0\0\0" + bytes(8)  # floating point: left out
    out = corekernel.reordered_notes(note + other, ">", "<")
    (at, size), = corekernel.cpu_notes(out, "<")
    assert size == len(desc) and struct.unpack_from("<I", out, at + corekernel.PR_PID_AT) == (7,)
    assert list(struct.unpack_from("<48Q", out, at + 112)) == regs
    labelled = corekernel.label_cpus(out, {}, "<")
    assert struct.unpack_from("<I", labelled, at + corekernel.PR_PID_AT) == (1,)  # CPU 0: QEMU's label
    assert S390.table["pagetable"]["linear"] == 0 and PPC.table["pagetable"]["linear"] == 0xC000000000000000


def test_a_big_endian_kernels_btf_lays_out_a_memory_read_big_endian(tmp_path):
    from harness.analysis import btf, kernel_waits
    little = struct.pack("<HBBIIIII", btf.MAGIC, 1, 0, 24, 0, 0, 0, 1) + b"\0"
    big = struct.pack(">HBBIIIII", btf.MAGIC, 1, 0, 24, 0, 0, 0, 1) + b"\0"
    assert btf.Btf(little).order == "<" and btf.Btf(big).order == ">"
    lay = kernel_layout.layout(big, "", S390.kernel_from)
    assert (lay["order"], lay["kernel_from"]) == (">", 0) and "btf" not in lay["missing"]
    # s390x's kernel pointers are low (its user space is another address space); ppc64's linear map's at 0xc...
    assert S390.kernel_from == 0 and PPC.kernel_from == 0xC000000000000000 == arch.get("ppc64le").kernel_from
    assert arch.get("x86_64").kernel_from == arch.KERNEL_HALF == RISCV.kernel_from
    ram = {0x1000: bytes.fromhex("0000000000002000 00000007 ffffffff".replace(" ", ""))}
    mem = kernel_waits.Memory.of(lambda a, n: ram[0x1000][a - 0x1000:a - 0x1000 + n] if a >= 0x1000 else None, lay)
    assert mem.word(0x1000, 8) == 0x2000 and mem.word(0x1008, 4) == 7 and mem.number(b"\xff" * 4, signed=True) == -1
    assert mem.pointer(0x2000) and not mem.pointer(0) and not mem.pointer(0x2004)
    assert mem.window(0x1000, 16).word(0x100C, 4) == 0xFFFFFFFF
    assert kernel_waits.Memory.of(mem.read, {}).word(0x1008, 4) == 0x07000000  # a layout of old said nothing


def test_a_build_kernel_is_cross_built_with_what_the_architectures_tinyconfig_leaves_out():
    from images.kernels import build
    assert build._cross(RISCV) == "riscv64-linux-gnu-" and build._cross(arch.host()) == ""
    opts = build.BuildOptions(arch="riscv64")
    assert opts.target is RISCV and [f.name for f in opts.config_files()][:2] == ["base.config", "riscv64.config"]
    assert "CONFIG_MMU=y" in (build.KCONFIG_DIR / "riscv64.config").read_text()
    assert build.BuildOptions().key() != opts.key()  # built apart from the host's


def test_s390x_kernel_image_is_mapped_apart_where_its_vmcoreinfo_says():
    # 7.2.13's VMCOREINFO (a real guest's): RAM at its physical address, the
    # image at KERNELOFFSET from KERNELOFFPHYS on; 6.1's says neither
    from harness.debug import corekernel

    class Ram:
        ram = [corekernel.Segment(1, 0, 0x1000, 0, 0, 1 << 30, 1 << 30, 0)]  # 1 GiB from 0
    info = {"IDENTITYBASE": "0", "KERNELOFFSET": "3ffe0000000", "KERNELOFFPHYS": "900000"}
    maps = corekernel.kernel_mappings(Ram(), S390, info)  # type: ignore[arg-type]
    assert maps == [(0, 0, 1 << 30), (0x3FFE0000000, 0x900000, (1 << 30) - 0x900000)]
    assert corekernel.kernel_mappings(Ram(), S390, {}) == [(0, 0, 1 << 30)]  # type: ignore[arg-type]


def test_qemus_monitor_prints_a_ppc64le_guests_words_big_endian():
    # QEMU's ppc64 target is big-endian: HMP `x` read init_task.tasks.next of a
    # Debian 7.2.13 ppc64el guest as 0x485e2b04000000c0 (gdb: 0xc0000000042b5e48)
    assert (PPC.byteorder, PPC.monitor_byteorder) == ("little", "big")
    assert S390.monitor_byteorder == "big"
    assert RISCV.monitor_byteorder == arch.get("x86_64").monitor_byteorder == "little"
    printed = 0x485E2B04000000C0
    assert int.from_bytes(printed.to_bytes(8, PPC.monitor_byteorder), PPC.byteorder) == 0xC0000000042B5E48


def test_a_cpu_in_the_base_locks_slow_path_is_still_in_its_wait():
    """make test, 2026-11-29 (two e2e parts side by side): a sample caught
    ppc64el's CPU0 in the pv spinlock slow path of lock_hrtimer_base, which
    hrtimer_try_to_cancel takes in hrtimer_cancel's loop. Between them the
    back chain gave a "? _raw_spin_lock_irqsave" and a stack word taken for
    a frame (0xc00000003ffbfc00): counted as calls, they put the loop four
    frames down, past the signature's depth, and CPU0 was not the culprit.
    Its real frames, recorded from that run."""
    samples = copy.deepcopy(load_samples(FIXTURE))
    cpu0 = next(c for c in samples[1]["cpus"] if c["cpu"] == 0)
    cpu0["frames"] = json.loads((FIXTURES / FIXTURE / "cpu0-in-the-base-locks-slow-path.frames.json").read_text())
    assert [f["function"] for f in cpu0["frames"][:5]] == ["__pv_queued_spin_lock_slowpath", "_raw_spin_lock_irqsave",
                                                          "", "lock_hrtimer_base", "hrtimer_try_to_cancel"]
    classes = classify.classify_samples(samples, classify.load_signatures())
    assert {c.cpu for c in classes if c.signature.role == Role.CULPRIT} == {0, 1}
    assert classify.positions(cpu0["frames"], 3) == [0, 1, 2, 3, 4]


def test_a_cpu_in_a_timer_interrupt_replayed_as_its_loop_unlocks_is_still_in_its_wait():
    """make test, 2026-11-29 (two e2e parts): ppc64 masks interrupts lazily,
    and one that came while masked is replayed when they are turned back on
    (arch_local_irq_restore -> __replay_soft_interrupts -> timer_interrupt).
    A sample caught CPU1 in such a replay, spinning in hrtimer_interrupt,
    called from the unlock in hrtimer_try_to_cancel inside hrtimer_cancel's
    loop: no vector on its stack, so no mark where the interrupt cut in, and
    CPU1 was not the culprit. The replay is ppc64's interrupt entry too."""
    samples = copy.deepcopy(load_samples(FIXTURE))
    cpu1 = next(c for c in samples[0]["cpus"] if c["cpu"] == 1)
    cpu1["frames"] = json.loads((FIXTURES / FIXTURE / "cpu1-in-a-replayed-timer-interrupt.frames.json").read_text())
    names = [f["function"] for f in cpu1["frames"]]
    assert names[3:9] == ["hrtimer_interrupt", "timer_interrupt", "__replay_soft_interrupts", "arch_local_irq_restore",
                          "_raw_spin_unlock_irqrestore", "hrtimer_try_to_cancel"]
    classes = classify.classify_samples(samples, classify.load_signatures())
    assert {c.cpu for c in classes if c.signature.role == Role.CULPRIT} == {0, 1}


def test_a_sysroot_package_whose_security_update_the_lists_lack_takes_the_releases_own(monkeypatch):
    """2026-11-30: the mirror served bookworm-security's ppc64el index stale,
    so it did not refresh, and the host's libzstd-dev 1.5.4+dfsg2-5+deb12u1
    was in no list kstall had. bookworm's 1.5.4+dfsg2-5 has the same
    headers; another upstream version is no stand-in."""
    from images.guest import sysroot

    class Lists:
        def __init__(self, have: dict[str, str]) -> None:
            self.have = have

        def uris(self, pin: str) -> tuple[str, str, int, str]:
            if pin not in self.have:
                raise SpecError(f"E: Version for {pin} was not found")
            return f"http://x/{self.have[pin]}", self.have[pin], 1, "0" * 64

    monkeypatch.setattr(sysroot, "host_release", lambda: "bookworm")
    lists = Lists({"libzstd-dev:ppc64el/bookworm": "libzstd-dev_1.5.4+dfsg2-5_ppc64el.deb",
                   "libbpf-dev:ppc64el/bookworm": "libbpf-dev_1%3a1.1.3-1_ppc64el.deb"})
    said: list[str] = []
    got = sysroot._uris(lists, "libzstd-dev:ppc64el=1.5.4+dfsg2-5+deb12u1", said.append)  # type: ignore[arg-type]
    assert got[1] == "libzstd-dev_1.5.4+dfsg2-5_ppc64el.deb" and "the same upstream version" in said[0]
    with pytest.raises(SpecError):
        sysroot._uris(lists, "libbpf-dev:ppc64el=1:1.1.2-0+deb12u1", said.append)  # type: ignore[arg-type]
    assert sysroot.upstream("1:1.2.13.dfsg-1") == "1.2.13.dfsg" and sysroot.upstream("0.188-2.1") == "0.188"
