# SPDX-License-Identifier: GPL-2.0
"""Unhappy paths on real guests: kstall killed outright, GDB killed during a
real freeze, a shared cache started cold by two runs at once and then damaged,
and an ordinary user."""
from __future__ import annotations

import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from harness.base import arch, procs
from harness.base.kernel_cache import KernelKey
from helpers import (KSTALL, REPO, SERVES, children_using, gdb_pids, interruptible, kstall_processes, verify_json,
                     verify_with_fault, wait_for)

pytestmark = pytest.mark.e2e


def qemu_and_gdb_pids() -> set[int]:
    return {int(p.split(":")[0]) for p in kstall_processes()}


def test_sigkill_of_kstall_takes_qemu_with_it_and_a_later_run_sweeps_up(tmp_path):
    proc = subprocess.Popen([*KSTALL, "verify", "debian:6.17.8", "perf-refresh", "--count", "100000000",
                             "--results", str(tmp_path)], stderr=subprocess.PIPE, text=True)
    try:
        for line in proc.stderr:
            if "guest up" in line:
                break
        pids = wait_for(qemu_and_gdb_pids, 30)
        assert pids, "a guest should be running"
        sockets = [p for p in Path(tempfile.gettempdir()).glob("kstall-*")
                   if (p / ".owner").exists() and (p / ".owner").read_text().split()[0] == str(proc.pid)]
        assert len(sockets) == 1 and list(tmp_path.glob(".*.incomplete"))
        t0 = time.monotonic()
        proc.kill()
        proc.wait(10)
        gone = wait_for(lambda: not (pids & qemu_and_gdb_pids()), 10)
        took = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    print(f"SIGKILL of kstall to its last child gone: {took:.3f}s")
    assert gone and took < 5
    assert sockets[0].exists() and list(tmp_path.glob(".*.incomplete"))  # what SIGKILL leaves
    p = subprocess.run([*KSTALL, "verify", "debian:6.17.8", SERVES, "--results", str(tmp_path)],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "removed 2 leftover(s) of killed kstall runs" in p.stderr
    assert not sockets[0].exists() and not list(tmp_path.glob(".*.incomplete"))


def test_gdb_killed_during_a_real_freeze_falls_back_to_qmp_with_the_same_classes(tmp_path):
    rc, with_gdb, err = verify_json(tmp_path / "gdb", "debian:6.16.12", "perf-refresh")
    assert rc == 1 and with_gdb["evidence"]["debug_method"] == "gdb", err[-2000:]
    def kill_gdb(proc):
        pids = wait_for(gdb_pids, 120, step=0.005)
        assert pids, "kstall never started gdb"
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
    rc, doc, err = verify_with_fault(tmp_path / "qmp", ["debian:6.16.12", "perf-refresh"], kill_gdb)
    ev = doc["evidence"]
    assert rc == 1 and doc["verdict"] == "VULNERABLE", err[-2000:]
    assert ev["debug_method"] == "qmp" and any(e.startswith("gdb:") for e in ev["debug_errors"])

    def culprits(d):
        return {c["class"] for c in d["cpus"] if c["role"] == "culprit"}
    assert culprits(doc) == culprits(with_gdb) == {"hrtimer_cancel self-deadlock"}
    assert doc["signature"] == with_gdb["signature"]
    # the other CPU is the guest's schedule, not the debugger's: a victim when
    # the bystander thread's TLB flush ran there, idle or in user mode when the
    # bystander sat on the stuck CPU's run queue (CI saw a run without a
    # victim). Two runs are not compared on it; QMP reads it as one of these.
    assert {c["class"] for c in doc["cpus"]} <= {"hrtimer_cancel self-deadlock", "csd_lock_wait victim",
                                                 "in user mode", "idle"}, doc["cpus"]
    assert [c["role"] for c in doc["cpus"]].count("culprit") == 1, doc["cpus"]  # one worker, one event
    print(f"classification: gdb {with_gdb['timings'].get('debug_s')}s, qmp {doc['timings'].get('debug_s')}s")


def test_gdb_hung_during_a_real_freeze_is_given_up_on_and_qmp_reads_the_same_classes(tmp_path):
    stopped = []

    def hang_gdb(proc):
        # every GDB of the run: one prepared for a hang that was only suspected
        # is closed, and the real freeze gets another (seen on a cold cache)
        deadline = time.monotonic() + 180
        while proc.poll() is None and time.monotonic() < deadline:
            for pid in set(gdb_pids()) - set(stopped):
                os.kill(pid, signal.SIGSTOP)  # alive, holding its terminal and the gdbstub, answering nothing
                stopped.append(pid)
            time.sleep(0.005)
        assert stopped, "kstall never started gdb"
    t0 = time.monotonic()
    rc, doc, err = verify_with_fault(tmp_path, ["debian:6.16.12", "perf-refresh"], hang_gdb)
    ev = doc["evidence"]
    assert rc == 1 and doc["verdict"] == "VULNERABLE", err[-2000:]
    assert ev["debug_method"] == "qmp" and any("gdb stopped answering" in e for e in ev["debug_errors"]), ev
    assert {c["class"] for c in doc["cpus"] if c["role"] == "culprit"} == {"hrtimer_cancel self-deadlock"}
    assert not any(Path(f"/proc/{pid}").exists() for pid in stopped), "the hung gdb was not reaped"
    print(f"verdict with a hung gdb after {time.monotonic() - t0:.1f}s")


def _main_thread_held(pid: int) -> subprocess.Popen:
    """strace holds QEMU's main loop thread (only that one) at its next
    ppoll for 10 minutes: QMP and the gdbstub go unanswered while the vCPU
    threads run on. strace ends when QEMU does."""
    return subprocess.Popen(["strace", "-qq", "-o", "/dev/null", "-p", str(pid), "-e", "trace=ppoll",
                             "-e", "inject=ppoll:delay_enter=600000000"], stdin=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)


def test_qmp_not_answering_is_an_error_naming_it_never_a_verdict_about_the_kernel(tmp_path):
    tracer = []

    def hold_main_loop(proc):
        _running(proc)
        qemu = _qemu_of(proc)  # this attempt's (an emulator fault at boot is retried)
        assert qemu
        tracer.append(_main_thread_held(qemu))
    try:
        t0 = time.monotonic()
        rc, doc, err = verify_with_fault(tmp_path, ["debian:6.17.8", "perf-refresh", "--count", "100000000"],
                                         hold_main_loop)
        took = time.monotonic() - t0
    finally:
        for t in tracer:
            procs.reap(t)
    assert rc == 4 and doc["verdict"] == "ERROR", err[-2000:]
    assert "did not answer QMP or its gdbstub" in doc["reason"] and "QMP timed out" in doc["reason"], doc["reason"]
    assert wait_for(lambda: not kstall_processes(), 10) is not None
    print(f"ERROR after {took:.1f}s: {doc['reason']}")


def test_a_guest_whose_agent_never_speaks_says_where_its_vcpus_were_and_boots_once_more(tmp_path):
    """Twice a cold boot's console stayed empty for its 120 s, and the ERROR
    said nothing of where the guest was. Here the agent cannot speak in time
    (a boot timeout of 1.5 s, under the seconds a boot takes): the record
    names where each vCPU was, and the run boots once more before its ERROR,
    which is never a verdict about the kernel."""
    from harness.drivers import verify
    from harness.drivers.options import GuestOptions, Options, RunOptions
    res = verify.verify("debian:6.17.8", "perf-refresh", Options(guest=GuestOptions(snapshot=False),
                        run=RunOptions(boot_timeout=1.5), results_root=tmp_path), lambda m: None)
    doc = res.doc
    assert doc["verdict"] == "ERROR" and len(doc["attempts"]) == 2, (doc["reason"], doc["attempts"])
    for a in doc["attempts"]:
        detail = a["outcome"]["detail"]
        assert detail.startswith("no guest agent within 2s of boot; console: "), detail
        assert "; its vCPUs then: CPU0 at " in detail and "; CPU1 at " in detail, detail
    assert (res.run_dir / "sample-0.json").exists() and kstall_processes() == []


USER = "kstall-user"


@pytest.mark.skipif(os.geteuid() != 0, reason="creates an ordinary user")
def test_verify_as_an_ordinary_user_with_a_fresh_cache():
    try:
        pwd.getpwnam(USER)
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", USER], check=True)
    top = Path(tempfile.mkdtemp(prefix="kstall-user-test-"))
    try:
        top.chmod(0o755)
        repo = top / "repo"
        files = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                               capture_output=True, text=True, check=True).stdout
        for f in files.splitlines():
            (repo / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / f, repo / f)
        for d in ("guest", "kselftest"):  # as `make guest` left them: the user cannot write build/
            shutil.copytree(REPO / "build" / d, repo / "build" / d)
        work = top / "work"
        work.mkdir()
        uid = pwd.getpwnam(USER).pw_uid
        os.chown(work, uid, uid)
        subprocess.run(["chmod", "-R", "a+rX", str(repo)], check=True)
        p = subprocess.run(["runuser", "-u", USER, "--", "env", f"KSTALL_CACHE={work / 'cache'}", "HOME=" + str(work),
                            sys.executable, str(repo / "harness" / "kstall"), "verify", "debian:6.16.12",
                            "perf-refresh", "--json", "--results", str(work / "results")],
                           capture_output=True, text=True, timeout=900)
        doc = json.loads(p.stdout) if p.stdout.strip().startswith("{") else {}
        assert p.returncode == 1 and doc.get("verdict") == "VULNERABLE", p.stderr[-3000:]
        assert all(f.stat().st_uid == uid for f in (work / "results").iterdir())
    finally:
        shutil.rmtree(top, ignore_errors=True)
    assert kstall_processes() == []


# what kstall says as it starts to read the vCPUs of a hung guest
SAMPLING = "reading every vCPU with gdb"


def _said(proc: subprocess.Popen, cue: str) -> bool:
    """Read kstall's progress until it says cue (False: it ended first)."""
    return any(cue in line for line in iter(proc.stderr.readline, ""))


def _while_gdb_reads(proc: subprocess.Popen) -> None:
    """Return as kstall starts to read a hung guest's vCPUs: a fault done then
    lands while GDB reads (a fraction of a second; GDB's process is started
    earlier, so it cannot tell). Find QEMU before calling this."""
    assert _said(proc, SAMPLING), "kstall never read the vCPUs"


def _running(proc: subprocess.Popen) -> None:
    """Return with the guest up and its reproducer running for 2 s."""
    assert _said(proc, "guest up in"), "the guest never came up"
    time.sleep(2)


def _qemu_of(proc: subprocess.Popen) -> int:
    """The QEMU of a kstall verify started by the test (its child)."""
    def find():
        for p in Path("/proc").iterdir():
            if p.name.isdigit():
                try:
                    cmd = (p / "cmdline").read_bytes()
                except OSError:
                    continue
                if b"qemu-system" in cmd and procs.stat_fields(p / "stat")[1:2] == [str(proc.pid)]:
                    return int(p.name)
        return None
    return wait_for(find, 120)


@pytest.mark.parametrize("stage,kernel", [("boot", "debian:6.17.8"), ("running", "debian:6.17.8"),
                                          ("sampling", "debian:6.16.12")], ids=["boot", "running", "sampling"])
@pytest.mark.parametrize("sig,words", [(signal.SIGKILL, "QEMU exited unexpectedly"),
                                       (signal.SIGSTOP, "QEMU was stopped from outside kstall")],
                         ids=["killed", "stopped"])
def test_qemu_killed_or_stopped_is_an_error_naming_it(tmp_path, stage, kernel, sig, words):
    def fault(proc):
        qemu = _qemu_of(proc)
        assert qemu
        if stage == "sampling":
            _while_gdb_reads(proc)
        elif stage == "running":
            _running(proc)
        else:
            time.sleep(0.5)
        # this attempt's: an attempt before it may have been retried (an emulator fault at boot; a
        # restore that failed, which boots cold), and its QEMU is gone (CI met that when sampling)
        qemu = _qemu_of(proc)
        os.kill(qemu, sig)
    count = [] if stage == "sampling" else ["--count", "100000000"]
    rc, doc, err = verify_with_fault(tmp_path, [kernel, "perf-refresh", *count], fault)
    assert rc == 4 and doc["verdict"] == "ERROR" and words in doc["reason"], err[-2000:]
    assert wait_for(lambda: not kstall_processes(), 10) is not None


def test_qemu_crash_while_gdb_reads_is_an_emulator_fault_retried_on_one_host_thread(tmp_path):
    """QEMU's own crash (a signal no one sends to end it) says nothing of the
    kernel: the attempt is an emulator fault, and the next one, from the same
    snapshot with every vCPU on one host thread, judges the kernel. (CI met a
    real SIGSEGV of qemu-system-aarch64 here; a SIGSEGV sent to QEMU ends it the
    same way. Either architecture's QEMU takes the same path in kstall: x86-64's
    here, whose perf-refresh guest has shown no kernel flake of its own.)"""
    def fault(proc):
        qemu = _qemu_of(proc)
        _while_gdb_reads(proc)
        # an attempt before the one read may have been retried and its QEMU be gone (CI met that)
        state = procs.stat_fields(f"/proc/{qemu}/stat")[:2]
        if not state or state[0] == "Z" or state[1] != str(proc.pid):
            qemu = _qemu_of(proc)
        os.kill(qemu, signal.SIGSEGV)
    rc, doc, err = verify_with_fault(tmp_path, ["debian:6.16.12", "perf-refresh"], fault)
    assert rc == 1 and doc["verdict"] == "VULNERABLE", err[-2000:]
    first, second = doc["attempts"][-2:]  # the attempt crashed and the one that judged the kernel
    assert first["verdict"] == "ERROR" and first["reason"].startswith("emulator fault: QEMU crashed (SIGSEGV)"), first
    assert (first["accel"], second["accel"]) == ("tcg", "tcg-single") and doc["vm"]["snapshot"]["restored"]
    assert wait_for(lambda: not kstall_processes(), 10) is not None


# (stage, kernel, the progress line that says the stage has begun, what a whole run says)
STAGES = [
    ("index", "debian:6.17.8", "updating Debian package lists", "NOT_REPRODUCED"),
    ("download", "debian:6.17.8", "linux-image-6.17.8+deb13-amd64: ", "NOT_REPRODUCED"),
    # a kernel without cached symbols exports them right after its agent's hello
    ("symbols", "debian:6.17.8", "guest up in", "NOT_REPRODUCED"),
    ("boot", "debian:6.17.8", "booting debian:6.17.8", "NOT_REPRODUCED"),
    ("running", "debian:6.17.8", "guest up in", "NOT_REPRODUCED"),  # and 3 s more, of a run made long
    ("sampling", "debian:6.16.12", SAMPLING, "VULNERABLE"),
]
EXIT = {signal.SIGINT: 130, signal.SIGTERM: 143, signal.SIGKILL: -9}
# SIGKILL at every stage; Ctrl-C and SIGTERM (one handler's two ways in) at
# every other stage each, so that each meets a cold stage and a guest's
SIGNALS_AT = {stage: (signal.SIGINT if i % 2 == 0 else signal.SIGTERM, signal.SIGKILL)
              for i, (stage, *_) in enumerate(STAGES)}


def _stage_cache(tmp_path: Path, stage: str) -> Path:
    """A private cache at the right point: cold for the index, with the apt
    lists for the download, with the kernel but no symbols for their capture,
    a copy of the whole kernel entry otherwise."""
    from harness.base import paths
    from images.kernels import symcache
    cache = tmp_path / "cache"
    if stage == "index":
        return cache
    shutil.copytree(paths.cache_dir() / "apt", cache / "apt", symlinks=True)
    if stage != "download":
        for k in ("6.17.8", "6.16.12"):
            src = next((paths.cache_dir() / "kernels" / "debian").glob(f"{k}+*"))
            shutil.copytree(src, cache / "kernels" / "debian" / src.name, ignore=shutil.ignore_patterns("lock"))
            if stage in ("boot", "running", "sampling"):
                meta = json.loads((src / "kernel.json").read_text())
                syms = symcache.path_for(KernelKey(meta["sha256"], meta.get("arch") or arch.DEFAULT))
                dest = cache / syms.relative_to(paths.cache_dir())
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(syms, dest)
    return cache


@pytest.mark.parametrize("stage,kernel,cue,whole", STAGES, ids=[s[0] for s in STAGES])
def test_signals_at_each_stage_leave_no_orphans_no_half_results_and_a_usable_cache(tmp_path, stage, kernel, cue,
                                                                                   whole):
    cache = _stage_cache(tmp_path, stage)
    env = dict(os.environ, KSTALL_CACHE=str(cache))
    results = tmp_path / "results"
    for sig in SIGNALS_AT[stage]:
        rc = EXIT[sig]
        if stage in ("index", "download", "symbols"):  # the stage has to come again
            shutil.rmtree(cache, ignore_errors=True)
            cache = _stage_cache(tmp_path, stage)
        # (a fixed kernel's run to its minimum count can be over within those 3 s)
        count = ["--count", "100000000"] if stage == "running" else []
        proc = subprocess.Popen([*KSTALL, "verify", kernel, "perf-refresh", *count, "--results", str(results)],
                                stderr=subprocess.PIPE, text=True, env=env, preexec_fn=interruptible)
        seen = []
        try:
            for line in proc.stderr:
                seen.append(line)
                if cue in line:
                    break
            assert any(cue in l for l in seen), "".join(seen)[-1500:]
            if stage == "running":
                time.sleep(3)
            proc.send_signal(sig)
            proc.stderr.read()
            assert proc.wait(60) == rc, f"{sig.name}: " + "".join(seen)[-1500:]
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        assert wait_for(lambda: not children_using(cache), 10), (sig.name, children_using(cache))
        for run in (p for p in results.glob("*") if not p.name.startswith(".")):
            doc = json.loads((run / "run.json").read_text())
            assert doc["verdict"] == "ERROR" and ("interrupt" in doc["reason"] or "terminated" in doc["reason"]), doc
        if sig != signal.SIGKILL:
            assert not list(results.glob(".*.incomplete")), f"{sig.name} left a half-written run"
    # the cache is usable, and what SIGKILL left is swept: killed in the index, the index is made
    # again (the stages after it are the other cases': a whole run here took 20 s more)
    if stage == "index":
        p = subprocess.run([*KSTALL, "kernels", "--available"], capture_output=True, text=True, env=env, timeout=600)
        assert p.returncode == 0 and kernel in p.stdout.split(), p.stderr[-2000:]
        return
    repro = SERVES if whole == "NOT_REPRODUCED" else "perf-refresh"
    p = subprocess.run([*KSTALL, "verify", kernel, repro, "--json", "--results", str(results)],
                       capture_output=True, text=True, env=env, timeout=600)
    assert json.loads(p.stdout)["verdict"] == whole, p.stderr[-2000:]
    assert not list(results.glob(".*.incomplete"))


SIGNAL_AT = Path(__file__).with_name("signal_at.py")
# stages over in milliseconds, hit on entry by tests/e2e/signal_at.py:
# (stage, function, kstall arguments, the verdict of a whole run, how a run interrupted there ends)
POINTS = [
    ("classification", "harness.analysis.classify.classify_samples", ["verify", "debian:6.16.12", "perf-refresh"],
     "VULNERABLE", "interrupted"),
    ("results", "harness.drivers.verify._write_run", ["verify", "debian:6.17.8", "perf-refresh"],
     "NOT_REPRODUCED", "whole"),  # the run is written whole first
    ("report-merge", "harness.reports.formats.write_all", ["matrix", "MATRIX"], "NOT_REPRODUCED", "whole"),
]


def _verdicts(results: Path) -> list[str]:
    """The verdicts of the finished runs (or matrices) under results."""
    out = []
    for d in sorted(p for p in results.glob("*") if not p.name.startswith(".")):
        doc = json.loads((d / "run.json").read_text()) if (d / "run.json").exists() else \
            json.loads((d / "matrix.json").read_text())
        if "cells" in doc:  # a matrix must also have written every report
            assert {"summary.md", "report.html", "junit.xml", "matrix.ktap", "kcidb.json"} <= \
                {p.name for p in d.iterdir()}, d
            out += [c["verdict"] for c in doc["cells"]]
        else:
            out.append("interrupted" if "interrupt" in doc["reason"] or "terminated" in doc["reason"]
                       else doc["verdict"])
    return out


@pytest.mark.parametrize("stage,function,args,whole,interrupted", POINTS, ids=[p[0] for p in POINTS])
def test_signals_at_short_stages_end_in_a_whole_run_or_a_clearly_interrupted_one(tmp_path, stage, function, args,
                                                                                  whole, interrupted):
    results = tmp_path / "results"
    matrix = tmp_path / "m.toml"
    matrix.write_text('[[reproducer]]\nname = "perf-refresh"\n\n[[kernel]]\nspec = "debian:6.17.8"\n'
                      'expect = { perf-refresh = "not_reproduced" }\n')
    args = [str(matrix) if a == "MATRIX" else a for a in args] + ["--results", str(results)]
    # SIGKILL first: each later run must find the cache usable and sweep what the killed one left
    for sig, rc in ((signal.SIGKILL, -9), (signal.SIGINT, 130), (signal.SIGTERM, 143)):
        before = _verdicts(results)
        p = subprocess.run([sys.executable, str(SIGNAL_AT), function, sig.name[3:], *args], capture_output=True,
                           text=True, timeout=600, preexec_fn=interruptible)
        assert f"signal_at: {sig.name} at {function}" in p.stderr, p.stderr[-2000:]
        assert p.returncode == rc, f"{sig.name}: {p.returncode}: {p.stderr[-2000:]}"
        assert wait_for(lambda: not kstall_processes(), 10) is not None, kstall_processes()
        new = _verdicts(results)[len(before):]
        if sig == signal.SIGKILL:
            assert new == [] and list(results.glob(".*.incomplete")), "SIGKILL leaves only an .incomplete run"
        else:
            if sig == signal.SIGINT:  # the first run after the SIGKILL
                assert "leftover(s) of killed kstall runs" in p.stderr, "the killed run's leftovers were not swept"
            assert not list(results.glob(".*.incomplete")), f"{sig.name} left a half-written run"
            assert new == [whole if interrupted == "whole" else "interrupted"], new
    if interrupted != "whole":  # the cache still serves a whole run
        p = subprocess.run([*KSTALL, *args], capture_output=True, text=True, timeout=600)
        assert _verdicts(results)[-1] == whole, p.stderr[-2000:]
