# SPDX-License-Identifier: GPL-2.0
"""arm64 as a row of the architecture table: its hang read from a recorded
real freeze (Debian's 6.16.12 arm64 under perf-refresh), its kernels and
programs told from their headers, and what its guests cannot do."""
from pathlib import Path

import pytest
from recorded import FIXTURES, load_samples

from harness.analysis import classify, cpu_state, framewalk, pmiss, unwind
from harness.analysis.classify import Role
from harness.analysis.kallsyms import Kallsyms
from harness.base import arch, paths, reproducers
from harness.drivers import preflight
from images.guest import programs
from images.kernels import debian, schemes
from images.kernels.kernel import Kernel, SpecError, image_arch

FIXTURE = "perf-refresh-6.16.12-arm64"
A = arch.get("aarch64")


def syms() -> Kallsyms:
    return Kallsyms.load(str(FIXTURES / FIXTURE / "kallsyms"))


def rewalk(cpu: dict, s: Kallsyms) -> list[dict]:
    regs = {k: int(v, 16) for k, v in cpu["regs"].items()}
    regions = [(int(r["base"], 16), bytes.fromhex(r["bytes"])) for r in cpu["regions"]]
    return [f.to_json() for f in framewalk.frames(regs, A, regions, {}, s)]


def test_the_host_rewalk_of_the_frame_records_is_what_gdb_side_wrote():
    s = syms()
    cpus = [c for sample in load_samples(FIXTURE) for c in sample["cpus"]]
    assert cpus and all(c["arch"] == "aarch64" and c["unwinder"] == "frame-records" for c in cpus)
    for cpu in cpus:
        assert rewalk(cpu, s) == cpu["frames"]


def test_the_walk_crosses_the_irq_stack_and_the_exception_into_the_refresh_ioctl():
    cpu1 = load_samples(FIXTURE)[0]["cpus"][1]
    names = [f["function"] for f in cpu1["frames"]]
    for caller, callee in (("hrtimer_cancel", "cpu_clock_event_stop"), ("perf_swevent_hrtimer", "__hrtimer_run_queues"),
                           ("call_on_irq_stack", "do_interrupt_handler"), ("_perf_event_refresh", "_perf_ioctl")):
        assert names.index(caller) < names.index(callee)
    interrupted = [f for f in cpu1["frames"] if f.get("interrupted")]
    assert len(interrupted) == 1 and names.index("el1h_64_irq") < cpu1["frames"].index(interrupted[0])


def test_pac_bits_are_stripped_from_kernel_return_addresses():
    assert framewalk.strip(0x5AB58000800A1234) == 0xFFFF8000800A1234  # signed: PAC around bit 55, which stays
    assert framewalk.strip(0xFFFF8000800A1234) == 0xFFFF8000800A1234
    assert framewalk.strip(0x0000AAAA00001000) == 0x0000AAAA00001000  # a user address stays


def test_the_freeze_names_the_hrtimer_cancel_spinner_and_the_other_cpu_by_its_state():
    samples = load_samples(FIXTURE)
    classes = classify.classify_samples(samples, classify.load_signatures())
    by_cpu = {c.cpu: c for c in classes}
    assert by_cpu[1].signature.name == "hrtimer_cancel_self_deadlock" and by_cpu[1].signature.role == Role.CULPRIT
    # no csd_lock_wait victim on arm64 (TLBs are flushed by broadcast TLBI): the other CPU is told by its state,
    # a lock waiter with interrupts off
    other = cpu_state.analyze(samples, classes).cpus[0]
    assert other.state == "spinlock" and other.irqs_off and other.role != Role.CULPRIT
    assert other.short() == "spinning on a lock in hrtimer_start_range_ns (moving)"


def test_with_the_signatures_hidden_the_generic_reading_names_the_same_culprit():
    samples = load_samples(FIXTURE)
    sigs = [s for s in classify.load_signatures() if s.name not in ("hrtimer_cancel_self_deadlock",)]
    hang = cpu_state.analyze(samples, classify.classify_samples(samples, sigs))
    assert [c.cpu for c in hang.culprits] == [1]
    assert hang.cpus[1].state == "hrtimer_cancel" and hang.cpus[1].irqs_off and hang.cpus[1].stuck


def test_registers_are_read_the_arm64_way():
    assert A.irqs_off({"cpsr": "0x604000c5"}) and not A.irqs_off({"cpsr": "0x60400045"})
    assert A.in_user_mode({"cpsr": "0x80001000"}) and not A.in_user_mode({"cpsr": "0x604000c5"})
    assert unwind.for_arch(A) is framewalk and A.gdb == "gdb-multiarch" and A.nmi == "none"
    assert arch.by_debian("arm64") is A and arch.by_gdb("aarch64") is A


def test_a_kernel_image_says_its_architecture(tmp_path):
    arm = bytearray(128)
    arm[0x38:0x3C] = b"ARM\x64"
    x86 = bytearray(0x300)
    x86[0x202:0x206] = b"HdrS"
    for name, data, want in (("Image", arm, "aarch64"), ("bzImage", x86, "x86_64")):
        (tmp_path / name).write_bytes(bytes(data))
        assert image_arch(tmp_path / name) == want
    (tmp_path / "junk").write_bytes(b"\0" * 4096)
    with pytest.raises(SpecError, match="not a kernel image kstall can boot"):
        image_arch(tmp_path / "junk")


def test_an_executable_of_another_architecture_is_a_usage_error_naming_both():
    x86_init = paths.guest_dir("x86_64") / "init"
    if not x86_init.exists():
        pytest.skip("run `make guest`")
    with pytest.raises(SpecError, match=r"is a x86_64 executable, and the kernel's guest is aarch64"):
        programs.guest_files(x86_init, "mine", "aarch64")
    assert arch.of_elf(x86_init.read_bytes()[:64]) == "x86_64"


def test_debian_specs_take_an_architecture():
    assert schemes.for_arch("debian:6.16.12", "aarch64") == "debian:6.16.12-arm64"
    assert schemes.for_arch("debian:6.16.12-rt", "aarch64") == "debian:6.16.12-rt-arm64"
    assert schemes.for_arch("debian:6.16.12-arm64", "aarch64") == "debian:6.16.12-arm64"
    assert schemes.for_arch("file:/tmp/Image", "aarch64") == "file:/tmp/Image"
    assert debian.parse_query("6.1.0-56-arm64") == (None, "6.1.0-56", "arm64")
    assert debian.parse_query("6.16.12-rt-arm64")[2] == "rt-arm64"


def test_the_nmi_path_cannot_run_on_an_architecture_without_a_guest_nmi():
    k = Kernel("debian:6.16.12-arm64", "debian:6.16.12+deb13-arm64", Path("/nonexistent"), "0" * 64, arch="aarch64")
    check = preflight.check(k, reproducers.load("bpf-ringbuf"))
    assert check.blocked and "no NMI" in check.reason() and "aarch64" in check.reason()
    assert not preflight.check(k, reproducers.load("perf-refresh")).blocked


def test_a_calibration_holds_only_on_its_own_architecture():
    cals = pmiss.load_files("perf-refresh")
    keys = {c.key.arch for c in cals if c.key}
    assert {"x86_64", "aarch64"} <= keys
    key = pmiss.Key((), 2, "tcg", "aarch64", 0.0)
    cal, why = pmiss.holding(cals, key)
    assert cal is not None and cal.key.arch == "aarch64" and why == ""
    assert pmiss.holding([c for c in cals if c.key.arch != "aarch64"], key) == (None, "no calibration on aarch64")


def test_a_verdict_names_the_cpus_it_does_not_blame_by_what_they_do():
    from harness.reports import views
    cpus = [{"cpu": 0, "class": "idle", "role": "benign"}, {"cpu": 1, "class": "hrtimer_cancel self-deadlock",
                                                             "role": "culprit"}]
    assert views.other_cpus(cpus) == "CPU0 idle"


def test_explain_says_when_a_records_fix_is_architecture_specific(tmp_path):
    from harness.analysis.bug_record import BugRecord
    # a record as the kernel's vulns repository keeps it (the .mbox's sections, abridged)
    (tmp_path / "CVE-2025-37747.dyad").write_text("6.1.135:abc:6.1.136:def\n")
    (tmp_path / "CVE-2025-37747.mbox").write_text(
        "Subject: CVE-2025-37747: perf: Fix hang while freeing sigtrap event\n\n"
        "Affected files\n==============\n\nThe file(s) affected by this issue are:\n"
        "\tinclude/linux/perf_event.h\n\tkernel/events/core.c\n\n\nMitigation\n==========\n\nUpdate.\n")
    rec = BugRecord.from_vulns(tmp_path, "CVE-2025-37747")
    assert rec.files == ("include/linux/perf_event.h", "kernel/events/core.c")
    why, elsewhere = rec.architecture_reason("arm64", "aarch64")
    assert "generic code" in why and not elsewhere
    x86_only = BugRecord("CVE-0000-0001", "x86/mm: fix", files=("arch/x86/mm/tlb.c",))
    why, elsewhere = x86_only.architecture_reason("arm64", "aarch64")
    assert elsewhere and "arch/x86 only" in why
    assert x86_only.architecture_reason("x86", "x86_64") == (
        "record: the fix is architecture-specific (arch/x86), x86_64's included", False)


def test_the_qmp_fallback_reads_arm64_registers_and_walks_the_same_frame_records():
    # a recorded run whose GDB failed (KSTALL_GDB=/bin/false): HMP's `info registers` and `x`
    qmp = "perf-refresh-6.16.12-arm64-qmp"
    samples = load_samples(qmp)
    s = Kallsyms.load(str(FIXTURES / qmp / "kallsyms"))
    assert all(sample["via"] == "qmp" for sample in samples)
    for cpu in (c for sample in samples for c in sample["cpus"]):
        assert {"pc", "sp", "x29", "x30", "cpsr", "x0", "x9"} <= set(cpu["regs"])  # X00..X09 and PSTATE renamed
        assert rewalk(cpu, s) == cpu["frames"]
    by_cpu = {c.cpu: c for c in classify.classify_samples(samples, classify.load_signatures())}
    assert [c.cpu for c in by_cpu.values() if c.signature.role == Role.CULPRIT] == [0]
