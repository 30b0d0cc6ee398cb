# SPDX-License-Identifier: GPL-2.0
"""Symbolization and stack walking on recorded dumps (GDB's, and QMP's HMP) of hung kernels."""
import re

import pytest
from recorded import FIXTURES, load_samples

from harness.analysis import stackwalk
from harness.analysis.kallsyms import Kallsyms
from harness.base import arch
from harness.debug import vcpus


def syms(name="perf-refresh-6.16.12-4cpu") -> Kallsyms:
    return Kallsyms.load(FIXTURES / name / "kallsyms")


def test_lookup_formats_like_the_kernel():
    s = syms()
    addr = s.address("hrtimer_cancel")
    assert addr is not None
    assert s.fmt(addr + 0x28) == "hrtimer_cancel+0x28/0x40"
    assert s.lookup(addr - 1).name != "hrtimer_cancel"
    assert s.lookup(0x1000) is None


def test_aliases_prefer_functions_over_padding_and_locals():
    k = Kallsyms.parse("ffffffff81000000 t __pfx_foo\nffffffff81000010 t foo_local\n"
                       "ffffffff81000010 T foo\nffffffff81000040 T bar\n")
    assert k.lookup(0xFFFFFFFF81000018).name == "foo"
    assert k.lookup(0xFFFFFFFF81000008).name == "__pfx_foo"


def test_decode_call_forms():
    ret = 0xFFFFFFFF81001000
    rel = (0x100 - 5 + 5).to_bytes(4, "little", signed=True)  # e8 rel32
    kind, target = stackwalk.decode_call(b"\x90\x90\xe8" + rel, ret)
    assert kind == "direct" and target == ret + 0x100
    assert stackwalk.decode_call(b"\x90\x90\x90\x90\x90\xff\xd0", ret) == ("indirect", None)       # call *%rax
    assert stackwalk.decode_call(b"\x90\x90\x90\x90\x41\xff\xd3", ret) == ("indirect", None)       # call *%r11
    assert stackwalk.decode_call(b"\x90\xff\x15\x00\x10\x00\x00", ret) == ("indirect", None)       # call *rip+x
    assert stackwalk.decode_call(b"\x90\x90\x90\x90\xff\x50\x08", ret) == ("indirect", None)       # call *8(%rax)
    assert stackwalk.decode_call(b"\x90\x90\x90\x90\x90\x90\x90", ret) is None
    assert stackwalk.decode_call(b"\xcc" * 7, ret) is None


def _rewalk(cpu: dict, s: Kallsyms) -> list[stackwalk.Frame]:
    regions = [(int(r["base"], 16), bytes.fromhex(r["bytes"])) for r in cpu["regions"]]
    code = {int(a, 16): bytes.fromhex(b) for a, b in cpu["code"].items()}
    return stackwalk.walk(int(cpu["regs"]["rip"], 16), regions, code, s)


def test_walk_finds_the_perf_hrtimer_chain():
    s = syms()
    cpus = load_samples("perf-refresh-6.16.12-4cpu")[0]["cpus"]
    hung = [c for c in cpus if c["frames"][0]["function"] == "hrtimer_cancel"]
    assert hung, "fixture has a CPU at hrtimer_cancel"
    names = [f.function for f in _rewalk(hung[0], s)]
    assert names[0] == "hrtimer_cancel"
    reliable = [f.function for f in _rewalk(hung[0], s) if f.reliable]
    for fn in ("cpu_clock_event_stop", "perf_swevent_hrtimer", "hrtimer_interrupt"):
        assert fn in names
    assert reliable.index("cpu_clock_event_stop") < reliable.index("perf_swevent_hrtimer")


def test_walk_is_what_gdb_side_produced():
    """The host re-walk of the raw bytes equals the frames the GDB script wrote."""
    s = syms()
    for sample in load_samples("perf-refresh-6.16.12-4cpu"):
        for cpu in sample["cpus"]:
            if cpu["unwinder"] not in ("stack-scan", "call-sites"):  # the name recorded dumps have, and its own
                continue
            assert [f.to_json() for f in _rewalk(cpu, s)] == cpu["frames"]


def test_interrupt_frames_show_where_the_victim_spins():
    s = syms("perf-refresh-6.16.12-spinloop")
    seen = []
    for sample in load_samples("perf-refresh-6.16.12-spinloop"):
        for cpu in sample["cpus"]:
            seen += [f.text for f in _rewalk(cpu, s) if f.interrupted]
    assert any(t.startswith("generic_exec_single") or t.startswith("smp_call_function") for t in seen)


def test_candidates_are_text_words_only():
    s = syms()
    cpu = load_samples("perf-refresh-6.16.12-4cpu")[0]["cpus"][0]
    regions = [(int(r["base"], 16), bytes.fromhex(r["bytes"])) for r in cpu["regions"]]
    cands = stackwalk.candidates(regions, s)
    assert cands and all(s.is_text(a) for a in cands)


def test_an_irq_stack_is_followed_to_the_stack_it_interrupted():
    # read through QMP's HMP 'x' (no GDB): CPU1 in the timer interrupt on its
    # IRQ stack, its task spinning in smp_call_function_many_cond
    cpu = next(c for c in load_samples("perf-refresh-6.16.12-qmp-irqstack")[0]["cpus"] if c["cpu"] == 1)
    memory = [(int(r["base"], 16), bytes.fromhex(r["bytes"])) for r in cpu["regions"]]
    assert len(memory) == 2

    def read(addr, n):  # what the guest had mapped: past the IRQ stack's top is its guard page
        for base, data in memory:
            if base <= addr < base + len(data):
                return data[addr - base:addr - base + n]
        return None
    rsp = int(cpu["regs"]["rsp"], 16)
    assert stackwalk.stack_regions(read, rsp, 8192, syms()) == memory
    code = {int(a, 16): bytes.fromhex(b) for a, b in cpu["code"].items()}

    def spinning(regions):
        frames = stackwalk.walk(int(cpu["regs"]["rip"], 16), regions, code, syms())
        return any(f.interrupted and f.function == "smp_call_function_many_cond" for f in frames)
    assert spinning(memory) and not spinning(memory[:1])


def test_symbols_load_from_their_index_as_they_parse_and_a_damaged_index_is_parsed_again(tmp_path):
    text = "ffffffff81000000 T _stext\nffffffff81000100 t helper\nffffffff81000200 T mod_fn\t[kvm]\n"
    (tmp_path / "kallsyms").write_text(text)
    parsed = Kallsyms.parse(text)
    first = Kallsyms.load(tmp_path / "kallsyms")  # parses and writes the index
    index = next(tmp_path.glob("kallsyms.*.marshal"))
    again = Kallsyms.load(tmp_path / "kallsyms")  # from the index
    for k in (first, again):
        assert list(k.addrs) == list(parsed.addrs) and list(k.names) == list(parsed.names)
        assert k.fmt(0xffffffff81000204) == "mod_fn+0x4/0x1000 [kvm]" and k.address("helper") == 0xffffffff81000100
    index.write_bytes(index.read_bytes()[:-9])  # cut short
    assert list(Kallsyms.load(tmp_path / "kallsyms").names) == ["_stext", "helper", "mod_fn"]



class RecordedMonitor:
    """QEMU's HMP answers as recorded at a boot's start (QEMU 7.2, two CPUs,
    tests/fixtures/hmp-registers/NAME.txt: `info registers -a` of a stopped
    guest); memory reads answered as QEMU answers an address its CPU has not
    mapped."""
    def __init__(self, name: str) -> None:
        text = (FIXTURES / "hmp-registers" / f"{name}.txt").read_text()
        self.cpus = re.split(r"^(?=CPU#)", text, flags=re.M)[1:]

    def cmd(self, name: str, timeout: float | None = None) -> list[dict]:
        assert name == "query-cpus-fast"
        return [{"cpu-index": n} for n in range(len(self.cpus))]

    def hmp(self, command: str, cpu: int | None = None, timeout: float | None = None) -> str:
        if command == "info registers":
            return self.cpus[cpu or 0]
        return f"{command.split()[-1]}: Cannot access memory\n"


def test_a_cpu_still_in_the_firmware_is_read_by_its_32_bit_registers(tmp_path):
    """A boot's ERROR said "internal error: KeyError: 'rip'" on a busy host:
    its AP was still in the firmware when the boot's time ran out (q35, 0.5 s
    in), and QEMU prints such a CPU's EIP and ESP, not RIP and RSP."""
    a = arch.get("x86_64")
    doc = vcpus.sample_with_qmp(RecordedMonitor("x86_64-ap-in-firmware"), tmp_path, syms(), 0, a)
    kernel, firmware = doc["cpus"]
    assert kernel["regs"]["rip"] == "0xffffffff819b9ffe" and kernel["regs"]["eflags"] == "0x6"
    assert firmware["regs"]["rip"] == "0xfd09a" and firmware["regs"]["cs"] == "0x8"
    assert firmware["regs"]["rsp"] == "0x6c5c" and firmware["regs"]["eflags"] == "0x2"
    # below the kernel's addresses: no kernel stack walked, its pc said as it is
    assert firmware["regions"] == [] and [f["text"] for f in firmware["frames"]] == ["0xfd09a"]
    assert not a.in_user_mode({k: int(v, 16) for k, v in firmware["regs"].items()})


@pytest.mark.parametrize("name, machine, pcs, sps", [
    # pseries 7 s in: CPU0 in the kernel, CPU1 not yet started (at the reset vector)
    ("ppc64le-boot", "ppc64le", ["0xc00000000009a950", "0x100"], ["0xc0000000026afcc0", "0x0"]),
    # virt 12 s in: both in the kernel; sp is x2's ABI name, fp s0's
    ("riscv64-boot", "riscv64", ["0xffffffff8000a350", "0xffffffff807ffc68"],
     ["0xff20000000003ea0", "0xff2000000000be70"]),
    # s390-ccw-virtio 3 s in: CPU0 early in the boot, its pc in the PSW; CPU1 stopped
    ("s390x-boot", "s390x", ["0x15ed8", "0x0"], ["0x2ddc0", "0x0"]),
])
def test_every_architectures_registers_are_read_from_qemus_monitor(tmp_path, name, machine, pcs, sps):
    """ppc64's `NIP hex` and GPR rows, riscv64's `x2/sp hex`, s390x's PSW:
    none is NAME=hex, and each CPU read over QMP had no pc (a KeyError)."""
    a = arch.get(machine)
    doc = vcpus.sample_with_qmp(RecordedMonitor(name), tmp_path, None, 0, a)
    assert [c["regs"][a.pc] for c in doc["cpus"]] == pcs
    assert [c["regs"][a.sp] for c in doc["cpus"]] == sps
    assert [c["frames"][0]["text"] for c in doc["cpus"]] == pcs
    assert all(len(c["regs"]) >= 10 for c in doc["cpus"]), doc["cpus"]
    # a riscv64 dump over QMP has no priv: a pc below the kernel's addresses is user mode
    if machine == "riscv64":
        regs = {k: int(v, 16) for k, v in doc["cpus"][0]["regs"].items()}
        assert "priv" not in regs and not a.in_user_mode(regs) and a.in_user_mode(regs | {"pc": 0x10444})
