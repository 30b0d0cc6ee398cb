# SPDX-License-Identifier: GPL-2.0
"""The parts of the hang handed over that need no guest: the ELF symbol file
gdb reads kernel names from, build IDs, the debug-info package streamed, a
core made whole for debuggers (checked with the real gdb), the attach lock,
and what inspect says of a debugger too old for a kernel."""
from __future__ import annotations

import io
import os
import shutil
import lzma
import struct
import subprocess
import tarfile
import tempfile
from pathlib import Path

import pytest

from harness.base import arch
from harness.debug import corekernel, coresample, symfile
from harness.drivers import inspect
from harness.guest import hold
from images.kernels import buildid, debuginfo
from images.kernels.kernel import SpecError

X86 = arch.get("x86_64")
TEXT = "ffffffff81000000 T _stext\nffffffff81000100 T hrtimer_cancel\nffffffff81000200 T _etext\n"
DATA = "0000000000031ac0 A runqueues\nffffffff82000000 D jiffies\nffffffff82000008 D jiffies_64\n"


def gdb(*commands: str) -> str:
    args = ["gdb", "-nx", "-q", "-batch"] + [a for c in commands for a in ("-ex", c)]
    return subprocess.run(args, capture_output=True, text=True, timeout=60).stdout


def test_the_symbol_file_names_functions_and_variables_for_gdb(tmp_path):
    (tmp_path / "k.kallsyms").write_text(TEXT)
    (tmp_path / "k.datasyms").write_text(DATA)
    elf = tmp_path / "k.elf"
    elf.write_bytes(symfile.build(tmp_path / "k.kallsyms", tmp_path / "k.datasyms", X86))
    out = gdb(f"file {elf}", "info symbol 0xffffffff81000110", "p &jiffies", "p &runqueues")
    assert "hrtimer_cancel + 16 in section .text" in out
    assert "<data variable, no debug info> *) 0xffffffff82000000" in out  # data: `print (long)jiffies` reads it
    assert "0x31ac0" in out  # a per-CPU variable: an offset, an absolute symbol


def test_build_ids_from_an_elf_and_from_raw_bytes():
    ids = buildid.in_bytes(b"junk" + struct.pack("<III", 4, 20, 3) + b"GNU\0" + bytes(range(20)) + b"tail")
    assert ids == [bytes(range(20)).hex()]
    readelf = subprocess.run(["readelf", "-n", "/usr/bin/true"], capture_output=True, text=True).stdout
    assert buildid.of_elf(Path("/usr/bin/true")) in readelf


def _deb(*members: tuple[str, bytes]) -> bytes:
    """A .deb (ar: debian-binary, control.tar.xz, data.tar.xz) holding these files."""
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w") as t:
        for member, payload in members:
            info = tarfile.TarInfo(member)
            info.size = len(payload)
            t.addfile(info, io.BytesIO(payload))
    parts = [("debian-binary", b"2.0\n"), ("control.tar.xz", lzma.compress(b"")),
             ("data.tar.xz", lzma.compress(data.getvalue()))]
    out = b"!<arch>\n"
    for name, body in parts:
        out += f"{name:<16}{0:<12}{0:<6}{0:<6}{644:<8}{len(body):<10}`\n".encode() + body + b"\n" * (len(body) & 1)
    return out


def test_the_dbg_package_is_streamed_and_only_its_vmlinux_kept(tmp_path):
    vmlinux = Path("/usr/bin/true").read_bytes()  # any ELF with a build ID stands for one
    deb = _deb(("./usr/lib/debug/boot/vmlinux-6.1.0-47-amd64", vmlinux))
    s = debuginfo._Stream(io.BytesIO(deb), "test-dbg", len(deb), None)
    with tarfile.open(fileobj=s, mode="r|") as tar:  # type: ignore[arg-type]
        [(kept, name)] = debuginfo._keep_member(tar, tmp_path)
    s.drain()
    assert name.endswith("vmlinux-6.1.0-47-amd64") and kept.read_bytes() == vmlinux
    assert s.read_bytes == len(deb)  # the whole package hashed
    with pytest.raises(SpecError, match="is not this kernel's"):
        debuginfo._publish(kept, ["00" * 20], "test-dbg")
    with pytest.raises(SpecError, match="not a Debian package"):
        debuginfo._Stream(io.BytesIO(b"<html>"), "x", 6, None)


def test_only_the_modules_a_report_names_are_kept_from_the_dbg_package(tmp_path):
    """A module's file name may spell with '-' what the kernel names with
    '_' (sch_fq-pie.ko is [sch_fq_pie]); the rest of the package, the
    vmlinux among it, is only hashed."""
    root = "./usr/lib/debug/lib/modules/6.1.0-47-amd64"
    deb = _deb((f"{root}/vmlinux", b"vmlinux"), (f"{root}/kernel/fs/jfs/jfs.ko", b"jfs"),
               (f"{root}/kernel/fs/ext4/ext4.ko", b"ext4"), (f"{root}/kernel/net/sched/sch_fq-pie.ko", b"fq"))
    s = debuginfo._Stream(io.BytesIO(deb), "test-dbg", len(deb), None)
    with tarfile.open(fileobj=s, mode="r|") as tar:  # type: ignore[arg-type]
        kept = list(debuginfo._keep_modules({"jfs", "sch_fq_pie", "nf_tables"})(tar, tmp_path))
    s.drain()
    assert sorted((debuginfo.module_name(name), p.read_bytes()) for p, name in kept) == \
        [("jfs", b"jfs"), ("sch_fq_pie", b"fq")]
    assert s.read_bytes == len(deb)


# a small x86-64 core as QEMU writes it, HEADROOM bytes into the file: two
# vCPUs' register notes and 64 KiB of RAM holding the kernel's page tables
# (root at 0x1000) and one page mapped at 0xffffffff81000000
PAGE = 4096


def _prstatus(rip: int, cpu: int = 0) -> bytes:
    regs = dict.fromkeys(X86.table["prstatus_registers"], 0) | {"rip": rip, "rsp": 0xffffffff81000f00}
    desc = bytearray(336)
    struct.pack_into("<I", desc, corekernel.PR_PID_AT, cpu + 1)  # QEMU's label: the CPU's number plus one
    struct.pack_into(f"<{len(regs)}Q", desc, coresample.PR_REG_AT, *regs.values())
    return struct.pack("<III", 5, len(desc), 1) + b"CORE\0\0\0\0" + bytes(desc)


def _core(path: Path) -> None:
    ram = bytearray(16 * PAGE)
    for level, (table, index, child) in enumerate([(0x1000, 511, 0x2000), (0x2000, 510, 0x3000),
                                                   (0x3000, 8, 0x4000), (0x4000, 0, 0x5000)]):
        struct.pack_into("<Q", ram, table + 8 * index, child | 1)
    ram[0x5000:0x5008] = b"KSTALL!!"
    notes = _prstatus(0xffffffff81000110, 0) + _prstatus(0xffffffff81000120, 1)
    phoff, nphdr = 64, 2
    notes_at = phoff + nphdr * 56
    ram_at = notes_at + len(notes)
    header = b"\x7fELF\x02\x01\x01" + bytes(9) + struct.pack("<HHIQQQIHHHHHH", 4, 62, 1, 0, phoff, 0, 0, 64, 56,
                                                              nphdr, 64, 0, 0)
    phdrs = struct.pack("<IIQQQQQQ", 4, 0, notes_at, 0, 0, len(notes), len(notes), 0) + \
        struct.pack("<IIQQQQQQ", 1, 7, ram_at, 0, 0, len(ram), len(ram), 0)
    with open(path, "wb") as f:
        f.seek(corekernel.HEADROOM)
        f.write(header + phdrs + notes + bytes(ram))


def _vmcoreinfo_in_memory() -> bytes:
    return corekernel.vmcoreinfo_note(b"OSRELEASE=6.1.0\nSYMBOL(init_top_pgt)=ffffffff80001000\n"
                                      b"NUMBER(phys_base)=0\n") + bytes(64)


def test_a_core_made_whole_reads_kernel_addresses_in_gdb_and_carries_vmcoreinfo(tmp_path):
    core = tmp_path / "vmcore"
    _core(core)
    doc = corekernel.complete(core, X86, _vmcoreinfo_in_memory())
    assert doc["vmcoreinfo"] == "kstall" and doc["kernel_mappings"] == 1 and "missing" not in doc
    out = gdb(f"core-file {core}", "x/s 0xffffffff81000000", "info threads")
    assert '"KSTALL!!"' in out and "LWP 2" in out, out
    c = corekernel.Core(core)
    assert b"VMCOREINFO" in c.notes() and c.segments[0].type == corekernel.PT_NOTE  # crash reads the first
    c.close()
    regs = [cpu["regs"]["rip"] for cpu in coresample.sample(core, X86, None, None)["cpus"]]
    assert regs == ["0xffffffff81000110", "0xffffffff81000120"]


def test_a_core_without_vmcoreinfo_still_opens_and_says_what_the_debuggers_miss(tmp_path):
    core = tmp_path / "vmcore"
    _core(core)
    doc = corekernel.complete(core, X86, None)
    assert doc["vmcoreinfo"] is None and "crash and drgn cannot find the kernel's layout" in doc["missing"]
    assert "LWP 2" in gdb(f"core-file {core}", "info threads")  # every vCPU's registers, still


def test_the_cpu_notes_bear_the_pid_each_cpu_runs():
    notes = _prstatus(1, 0) + _prstatus(2, 1) + _prstatus(3, 2)
    labelled = corekernel.label_cpus(notes, {0: 90, 1: 0, 2: 0})
    pids = [struct.unpack_from("<I", labelled, k * len(_prstatus(1)) + 20 + corekernel.PR_PID_AT)[0]
            for k in range(3)]
    assert pids == [90, corekernel.IDLE_PID + 1, corekernel.IDLE_PID + 2]  # two idle CPUs stay two threads


def gdbstub(path: Path):
    """A unix socket where a held guest's gdbstub would be."""
    import socket
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(path))
    return s


def test_one_debugger_at_a_time_and_a_gone_holder_is_said(tmp_path):
    sock = tmp_path / "gdb.sock"
    server = gdbstub(sock)
    doc = {"gdb_socket": str(sock)}
    with hold.attach_lock(doc):
        with pytest.raises(hold.NotHeld, match="another debugger is attached"):
            with hold.attach_lock(doc):
                pass
    with hold.attach_lock(doc):  # released with its descriptor
        pass
    with pytest.raises(hold.NotHeld, match="not held"):
        hold.read(tmp_path)
    (tmp_path / hold.HELD).write_text('{"gdb_socket": "%s", "arch": "x86_64", "holder_pid": 999999999, '
                                      '"holder_start": "1"}' % sock)
    with pytest.raises(hold.NotHeld, match="gone"):
        hold.read(tmp_path)
    server.close()
    # make test, 2026-11-29: another kstall swept the killed holder's run directory, socket and
    # all, and the record was 'refused' as naming no socket kstall would make: its guest is gone
    sock.unlink()
    (tmp_path / hold.HELD).write_text('{"gdb_socket": "/tmp/kstall-6mwt968b/gdb.sock", "arch": "x86_64", '
                                      '"holder_pid": 999999999, "holder_start": "1"}')
    with pytest.raises(hold.NotHeld, match="gone"):
        hold.read(tmp_path)


def test_a_record_from_elsewhere_names_no_command_and_no_file_outside_the_cache(tmp_path, monkeypatch):
    """held.json and run.json come from a colleague or a CI artifact: a
    gdbstub 'socket' that is a gdb pipe command, a kernel hash that climbs out
    of the cache, a symbols path elsewhere are refused or left out."""
    import json
    import os
    from harness.drivers import attach
    monkeypatch.setenv("KSTALL_CACHE", str(tmp_path / "cache"))
    with open(f"/proc/{os.getpid()}/stat") as f:  # a holder that is alive: this test
        start = f.read().rsplit(")", 1)[1].split()[19]
    held = {"gdb_socket": "|touch /tmp/kstall-pwned", "arch": "x86_64", "holder_pid": os.getpid(),
            "holder_start": start}
    (tmp_path / hold.HELD).write_text(json.dumps(held))
    with pytest.raises(hold.NotHeld, match="refused"):
        hold.read(tmp_path)
    sock = tmp_path / "gdb.sock"
    server = gdbstub(sock)
    elsewhere = tmp_path / "alice" / "x86_64-abc.kallsyms"
    elsewhere.parent.mkdir()
    elsewhere.write_text("ffffffff81000000 T _text\n")
    argv = attach.gdb_command(held | {"gdb_socket": str(sock), "symbols": str(elsewhere), "vmlinux": None},
                              [], True)
    assert f"target remote {sock}" in argv and not any(str(elsewhere) in a for a in argv)
    assert not list(elsewhere.parent.glob("*.elf"))  # nothing written beside a path from a record
    # a record's vmlinux goes to gdb's symbol-file: a gdb command hidden in it, or no file, is no vmlinux
    odd = tmp_path / "vmlinux\nshell touch pwned"
    odd.write_bytes(b"elf")
    for bad in (str(odd), str(tmp_path), "/nonexistent/vmlinux", 42):
        argv = attach.gdb_command(held | {"gdb_socket": str(sock), "vmlinux": bad}, [], True)
        assert not any("pwned" in a or a.startswith(("symbol-file", "file ")) for a in argv), argv
    server.close()
    run = tmp_path / "run"
    run.mkdir()
    (run / "vmcore").write_bytes(b"core")
    (run / "run.json").write_text(json.dumps({"kernel": {"sha256": "../../../tmp/x", "arch": "x86_64",
                                                         "vmlinuz": "/nonexistent"}}))
    with pytest.raises(inspect.InspectError, match="refused"):
        inspect.load(run)


def test_inspect_names_a_debugger_too_old_for_the_kernel(monkeypatch):
    monkeypatch.setattr(inspect, "_version_of", lambda tool: "8.0.2")
    assert "crash 8.0.2 reads kernels up to 6.1" in inspect.too_new("crash", "6.12.107")
    assert inspect.too_new("crash", "6.1.170") == ""
    assert inspect.too_new("drgn", "6.12.107") == ""  # nothing measured against it


ARM = arch.get("aarch64")


def test_arm64_page_tables_of_the_width_the_kernel_runs_are_walked():
    """Debian's arm64 6.16 runs 52-bit addresses under QEMU's -cpu max: five
    levels, the first of 16 entries; a 2 MiB block at level 3 of 5."""
    ram = bytearray(16 * PAGE)
    base = 0x40000000  # arm64 virt's RAM
    # root (16 entries) -> entry 15 -> L0 index 0 -> L1 index 2 -> L2 block at index 1
    for table, index, child in [(0x1000, 15, 0x2000), (0x2000, 0, 0x3000), (0x3000, 2, 0x4000)]:
        struct.pack_into("<Q", ram, table + 8 * index, (base + child) | 0b11)
    struct.pack_into("<Q", ram, 0x4000 + 8 * 1, (base + 0x200000) | 0b01)  # bit 1 clear: a block

    class Ram:
        def read_phys(self, paddr: int, n: int) -> bytes | None:
            at = paddr - base
            return bytes(ram[at:at + n]) if 0 <= at and at + n <= len(ram) else None
    voffset = 0xffff80003fe00000  # the kernel image's virtual minus physical address
    info = {"SYMBOL(swapper_pg_dir)": f"{base + 0x1000 + voffset:x}", "NUMBER(kimage_voffset)": hex(voffset),
            "NUMBER(TCR_EL1_T1SZ)": "12"}
    maps = corekernel.kernel_mappings(Ram(), ARM, info)  # type: ignore[arg-type]
    assert maps == [(0xffff000000000000 | (2 << 30) | (1 << 21), base + 0x200000, 1 << 21)]
    assert corekernel.va_bits_of(ARM.table["pagetable"], {}) == 48  # a kernel that says nothing: 48 bits


@pytest.mark.skipif(__import__("os").geteuid() != 0, reason="mounting a small tmpfs takes root")
def test_a_full_disk_loses_the_core_and_still_lets_qemu_finish(tmp_path):
    import os
    import threading
    from harness.debug import vmcore
    small = tmp_path / "small"
    small.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "kstall-test", str(small)], check=True)
    try:
        r, w = os.pipe()
        copy = vmcore._SparseCopy(r, small / "vmcore", 0)
        copy.start()
        wrote = []  # QEMU's side: it must not block on a pipe nobody drains
        writer = threading.Thread(target=lambda: wrote.append(os.write(w, b"\x01" * (4 << 20))))
        writer.start()
        writer.join(30)
        os.close(w)
        copy.join(30)
        assert wrote == [4 << 20] and not copy.is_alive()
        assert "No space left" in copy.error
    finally:
        subprocess.run(["umount", "-l", str(small)], check=False)


def test_a_core_another_user_wrote_is_read_without_writing_it(tmp_path):
    """A vmcore from a CI artifact or a colleague's results: readable, not
    writable to whoever reads it. Read as an ordinary user (root may write
    anything), its CPUs come out."""
    shared = Path(tempfile.mkdtemp(prefix="kstall-core-", dir="/tmp"))
    try:
        core = shared / "vmcore"
        _core(core)
        corekernel.complete(core, X86, _vmcoreinfo_in_memory())
        os.chmod(shared, 0o755)
        os.chmod(core, 0o444)
        if os.geteuid() != 0:
            assert len(coresample.sample(core, X86, None, None)["cpus"]) == 2
            return
        pid = os.fork()
        if pid == 0:  # the reader: nobody, who may read the core and not write it
            try:
                os.setgid(65534)
                os.setuid(65534)
                os._exit(0 if len(coresample.sample(core, X86, None, None)["cpus"]) == 2 else 1)
            except BaseException:  # noqa: BLE001 - the child says it by its status
                os._exit(2)
        _, status = os.waitpid(pid, 0)
        assert os.WEXITSTATUS(status) == 0
    finally:
        shutil.rmtree(shared, ignore_errors=True)


def test_inspect_prints_a_command_that_pastes_and_leaves_no_script_in_tmp(tmp_path, monkeypatch, capsys):
    """A run kept under a path with a space: --print's command, pasted into a
    shell, is the same argv; a crash --ex script is kstall's, reused, not /tmp's."""
    monkeypatch.setenv("KSTALL_CACHE", str(tmp_path / "cache"))
    run = tmp_path / "my runs" / "r1"
    run.mkdir(parents=True)
    (run / "vmcore").write_bytes(b"core")
    vmlinux = tmp_path / "vmlinux with space"
    vmlinux.write_bytes(b"elf")
    r = inspect.Run(run, {"kernel": {"arch": "x86_64"}}, run / "vmcore", vmlinux, None)
    before = set(Path(tempfile.gettempdir()).glob("kstall-inspect-*"))
    argv = inspect.command(r, "crash", ["bt -a"])
    assert inspect.command(r, "crash", ["bt -a"]) == argv and argv[-1].startswith(str(tmp_path / "cache"))
    assert Path(argv[-1]).read_text() == "bt -a\nquit\n"
    assert set(Path(tempfile.gettempdir()).glob("kstall-inspect-*")) == before
    import shlex
    assert shlex.split(shlex.join(argv)) == argv
    monkeypatch.setattr(inspect, "load", lambda p: r)
    assert inspect.inspect(run, "crash", ["bt -a"], True, lambda m: None) == 0
    assert shlex.split(capsys.readouterr().out.strip()) == argv


def test_a_debug_info_copy_cut_short_leaves_no_partial_file(tmp_path):
    """A download that breaks off (here: the stream raises half-way) removes
    its partial vmlinux; one a dead process left is removed by the next."""
    from images.kernels import debuginfo

    class Breaks(io.RawIOBase):
        def __init__(self):
            self.n = 0

        def read(self, size=-1):
            self.n += 1
            if self.n > 2:
                raise ConnectionResetError("connection reset by peer")
            return b"x" * (1 << 20)
    orphan = tmp_path / f"{debuginfo.PARTIAL}999999999-abc"  # no such process
    orphan.write_bytes(b"half a vmlinux")
    mine = tmp_path / f"{debuginfo.PARTIAL}{os.getpid()}-live"  # this process's, still being written
    mine.write_bytes(b"")
    with pytest.raises(ConnectionResetError):
        debuginfo._copy_to_partial(Breaks(), tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [mine.name]
    kept = debuginfo._copy_to_partial(io.BytesIO(b"vmlinux"), tmp_path)
    assert kept.read_bytes() == b"vmlinux" and kept.name.startswith(f"{debuginfo.PARTIAL}{os.getpid()}-")


def test_a_backports_dbg_package_is_known_at_its_own_version_in_its_percent_encoded_url():
    """The bench's 7.3.4 run: trixie-backports has linux-image-7.3.4+deb13-amd64-dbg
    at 7.3.4-1~bpo13+1, and its URL spells '~' and '+' as %7e and %2b (the
    archive's index, as apt prints it): kstall said 'only at another version'."""
    url = ("http://deb.debian.org/debian/pool/main/l/linux/"
           "linux-image-7.3.4%2bdeb13-amd64-dbg_7.3.4-1%7ebpo13%2b1_amd64.deb")
    assert debuginfo.at_version(url, "7.3.4-1~bpo13+1")
    assert not debuginfo.at_version(url, "7.3.4-1")
    assert debuginfo.at_version(".../linux-image-6.1.0-47-amd64-dbg_6.1.170-1_amd64.deb", "6.1.170-1")
