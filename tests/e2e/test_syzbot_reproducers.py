# SPDX-License-Identifier: GPL-2.0
"""syzkaller's reproducers, run as syzbot runs them, on a real Debian kernel:
kstall's own programs in syzkaller's format (tests/fixtures/syzkaller-programs/)
as one matrix over debian:6.1.170. A hung task the kernel's own detector
reports is syzbot's title reproduced; a busy program that forks for ever
runs for its time and is not reproduced, never "stuck"; a socket family the
kernel lacks is a need; the machine is the one a reproducer expects; a
program the OOM killer starves is no evidence; a device the kernel's config
leaves out is a need before anything boots; a task that cannot die when
the time is up, a worker whose process's leader exited, is a hang; a pid
namespace killed when its time is up leaves no clone failed behind; a
kernel report is a hang only once its task was blocked its time, and a
slow wait never is; a fuse mount that hangs a plain VM hangs kstall's
guest alike; a USB device the program emulates through raw_gadget,
built for the kernel, reaches the kernel's own drivers; two shards merged
give each kernel the page an unsharded run gives; a hang's run writes the
report a distribution's bug tracker would take."""
from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from helpers import KSTALL, REPO, kstall, kstall_processes

pytestmark = pytest.mark.e2e
PROGRAMS = REPO / "tests" / "fixtures" / "syzkaller-programs"
KERNEL = "debian:6.1.170"
NEEDS_S = 10  # the socket it needs is its first call: its time need not be long


@pytest.fixture(scope="module")
def matrix(tmp_path_factory) -> dict:
    d = tmp_path_factory.mktemp("syzkaller")
    m = d / "syzkaller.toml"
    # each its own time: the hung task needs the detector's 30 s and its 5 s checks; the starved
    # one is starved only once its 2 GiB of huge pages are reserved (zeroed, init_on_alloc), 10-25 s
    # under TCG, and must be starved for half the seconds the agent watched (on a busy host in CI
    # 22 of 47 in a 60 s run: NOT_REPRODUCED); one vCPU each, so that on two host cores the short
    # ones run beside the long one
    # the kernel's reports are hangs after 60 s here, not syzbot's 140 s scaled (280 s under TCG):
    # the same rule, in a make test's time
    m.write_text(f'[[reproducer]]\ndir = "{PROGRAMS}"\nbugs = ["aaaa", "a2a2"]\nduration = 90\ncpus = 1\n'
                 f'hang_after = 60\n'
                 f'[[reproducer]]\ndir = "{PROGRAMS}"\nbugs = ["adad"]\nduration = 60\ncpus = 1\nhang_after = 60\n'
                 f'[[reproducer]]\ndir = "{PROGRAMS}"\nbugs = ["aeae"]\nduration = 110\ncpus = 1\nhang_after = 60\n'
                 f'[[reproducer]]\ndir = "{PROGRAMS}"\nbugs = ["afaf"]\nduration = 10\ncpus = 1\n'
                 f'[[reproducer]]\ndir = "{PROGRAMS}"\nbugs = ["bbbb", "dddd"]\nduration = 20\ncpus = 1\n'
                 f'[[reproducer]]\ndir = "{PROGRAMS}"\nbugs = ["cccc"]\nduration = {NEEDS_S}\ncpus = 1\n'
                 f'[[reproducer]]\ndir = "{PROGRAMS}"\nbugs = ["eeee"]\nduration = 100\ncpus = 1\n'
                 f'[[reproducer]]\ndir = "{PROGRAMS}"\nbugs = ["ffff"]\nduration = 10\ncpus = 1\n'
                 # two vCPUs: a worker cloning on one while its namespace's first process dies on the other
                 f'[[reproducer]]\ndir = "{PROGRAMS}"\nbugs = ["abab"]\nduration = 10\ncpus = 2\n'
                 # what its one call opens, Debian's config leaves out: nothing boots
                 f'[[reproducer]]\ndir = "{PROGRAMS}"\nbugs = ["a1a1"]\nduration = 120\ncpus = 1\n'
                 # a USB device through raw_gadget, which kstall builds for the kernel
                 f'[[reproducer]]\ndir = "{PROGRAMS}"\nbugs = ["a0a0"]\nduration = 20\ncpus = 1\n'
                 f'[[kernel]]\nspec = "{KERNEL}"\n')
    p = kstall("matrix", str(m), "--results", str(d), "--json", timeout=900)
    assert p.stdout.strip().startswith("{"), p.stderr[-3000:]
    doc = json.loads(p.stdout)
    doc["_dir"] = next(d.glob("*-matrix-*"))
    return doc


def cell(doc: dict, bug: str) -> dict:
    return next(c for c in doc["cells"] if c["reproducer"].startswith(f"syz-{bug}"))


def run_json(doc: dict, c: dict) -> dict:
    return json.loads((Path(doc["_dir"]) / c["run_dir"] / "run.json").read_text())


def test_a_hung_task_the_kernel_reports_reproduces_syzbots_title(matrix):
    c = cell(matrix, "aaaa")
    assert c["verdict"] == "VULNERABLE", c["line"]
    assert c["line"] == 'VULNERABLE: reproduced syzbot\'s "INFO: task hung in pipe_write"'
    assert c["syzbot"]["matched"]["how"] == "title"
    run = run_json(matrix, c)
    assert run["outcome"]["kind"] == "kernel-report"
    assert "INFO: task hung in pipe_write" in [t["title"] for t in run["evidence"]["console_titles"]]
    # the detector spoke at 30 s and the task stayed blocked its 60 s: the run did not wait for its time
    assert run["timings"]["repro_s"] < 85, run["timings"]
    [hang] = [c for c in run["evidence"]["candidates"] if c["state"] == "hang"]
    assert hang["stuck_s"] >= 60 and hang["hang_s"] == 60 and hang["syzbot_s"] == 140, hang
    # the report to the distribution, beside the run: the bug, the kernel's report, what to attach
    report = (Path(matrix["_dir"]) / c["run_dir"] / "bug-report.md").read_text()
    assert report.startswith("# linux-image-") and "INFO: task hung in pipe_write" in report, report
    assert "`console.log`" in report.split("## Files to attach")[1] and "nothing was sent anywhere" in report


def test_a_fuse_mount_with_its_opens_fd_hangs_in_fuse_lookup_as_in_a_plain_vm(matrix):
    """One thread opens /dev/fuse while another mounts fuse with that fd
    50 ms later, and nothing answers the mount's lookups. In a plain Debian
    6.1.170 VM (TCG, 2 GiB, 2 CPUs, busybox's modprobe loading fuse on the
    open's demand, no kstall) it hung 3 times in 3, the kernel's report at
    30 s. kstall loads fuse before the program starts, as a kernel that
    builds it in has it, so the mount never runs without an fd ("fuse: Bad
    value for 'fd'"): the same hang, with syzbot's title."""
    c = cell(matrix, "a2a2")
    assert c["line"] == 'VULNERABLE: reproduced syzbot\'s "INFO: task hung in fuse_lookup"', c["line"]
    run = run_json(matrix, c)
    hangs = [x for x in run["evidence"]["candidates"] if x["state"] == "hang"]
    assert hangs and hangs[0]["title"] == "INFO: task hung in fuse_lookup", run["evidence"]["candidates"]
    console = (Path(matrix["_dir"]) / c["run_dir"] / "console.log").read_text(errors="replace")
    assert "Bad value for 'fd'" not in console and "fuse_lookup+" in console


def test_a_task_blocked_when_the_time_is_up_gets_the_kernels_time_to_report_it_and_to_be_a_hang(matrix):
    """Its writers block 40 s into a 60 s run: at the time-up the sleeper is
    20 s into its wait, unreported. Killed then, its holder (killable) would
    die and free it, and the run would be clean; the agent waits for the
    kernel's report (detect_s), the host holds the kill while it is a
    candidate, and it is a hang once blocked 60 s."""
    c = cell(matrix, "adad")
    assert c["verdict"] == "VULNERABLE", c["line"]
    assert c["line"] == "VULNERABLE: a different hang: INFO: task hung in __fdget_pos", c["line"]
    run = run_json(matrix, c)
    assert run["outcome"]["kind"] == "kernel-report", run["outcome"]
    [hang] = [x for x in run["evidence"]["candidates"] if x["state"] == "hang"]
    assert hang["stuck_s"] >= 60, hang
    agent_log = (Path(matrix["_dir"]) / c["run_dir"] / "agent.log").read_text()
    assert re.search(r"^KSTALL timeup asleep=[1-9]", agent_log, re.M), agent_log[-2000:]


def test_a_task_blocked_for_less_than_the_hang_time_is_a_slow_wait_never_a_hang(matrix):
    """Its sleeper waits 45 s in D state, twice, and goes on each time: the
    kernel reports it at 30 s, and it is never blocked for 60 s."""
    c = cell(matrix, "aeae")
    assert c["verdict"] == "NOT_REPRODUCED", c["line"]
    run = run_json(matrix, c)
    slow = [x for x in run["evidence"]["candidates"] if x["report"] == "hung-task"]
    assert len(slow) >= 2 and all(x["state"] == "went on" and 30 <= x["stuck_s"] < 60 for x in slow), slow
    assert "slow waits the kernel reported, none a hang: INFO: task hung in" in run["reason"], run["reason"]


def test_a_busy_forking_program_runs_for_its_time_and_is_not_reproduced(matrix):
    c = cell(matrix, "bbbb")
    assert c["verdict"] == "NOT_REPRODUCED", c["line"]
    run = run_json(matrix, c)
    ran = re.match(r"ran for (\d+) s", run["reason"])
    # its time, and the second or so the guest takes to stop it on a busy host
    assert "stuck" not in run["reason"] and ran and 20 <= int(ran[1]) <= 25, run["reason"]
    assert run["evidence"]["reach"]["reached"] == ["getpid"] and run["evidence"]["reach"]["needs"] == []
    assert run["cpus"] == [] and run["hang"] is None


def test_a_socket_family_the_kernel_lacks_is_what_the_reproducer_needs(matrix):
    c = cell(matrix, "cccc")
    assert c["verdict"] == "INCONCLUSIVE", c["line"]
    assert c["needs"] and c["needs"][0].startswith("socket family 12 (AF_DECnet): no module of this kernel answers")


def test_a_device_the_kernels_config_leaves_out_is_a_need_known_before_it_boots(matrix):
    """Its one call opens /dev/sequencer, the OSS sequencer Debian builds no
    more and no test module stands in for: the verdict the whole run would
    give after its 120 s, with no guest booted."""
    c = cell(matrix, "a1a1")
    assert c["verdict"] == "INCONCLUSIVE", c["line"]
    assert c["line"] == "INCONCLUSIVE: the reproducer needs /dev/sequencer, which this kernel's config leaves out"
    assert c["needs"] == ["/dev/sequencer: the program opens it; this kernel's config leaves it out "
                          "(CONFIG_SND_SEQUENCER_OSS is not set)"], c["needs"]
    run = run_json(matrix, c)
    assert run["outcome"]["kind"] == "preflight" and run["vm"]["accel"] == "none", run["outcome"]
    assert run["reason"].endswith("(checked before booting)"), run["reason"]


def test_a_usb_device_through_raw_gadget_built_for_the_kernel_binds_the_kernels_own_driver(matrix):
    """Debian's kernels build no raw gadget: kstall builds raw_gadget for
    6.1.170 from its own source, the guest loads it beside dummy_hcd, the
    program's keyboard enumerates on the emulated bus and the kernel's own
    usbhid and hid-generic bind to it; the run says the module was added."""
    c = cell(matrix, "a0a0")
    assert c["verdict"] == "NOT_REPRODUCED", c["line"]
    run = run_json(matrix, c)
    [mod] = run["kernel"]["test_modules"]
    assert mod["name"] == "raw_gadget" and mod["ko"] and mod["headers"].startswith("linux-headers-6.1.0-"), mod
    assert "the kernel ran with a test module kstall added: raw_gadget, built from" in run["reason"], run["reason"]
    console = (Path(matrix["_dir"]) / c["run_dir"] / "console.log").read_text()
    assert re.search(r"usb 1-1: new high-speed USB device number \d+ using dummy_hcd", console), console[-3000:]
    assert re.search(r"hid-generic .*USB HID v1.10 Keyboard .* on usb-dummy_hcd.0-1/input0", console), \
        console[-3000:]
    # its pseudo-calls are not counted: the verdict says what the device became, from the console
    usb = run["evidence"]["reach"]["usb"]
    assert usb["connects"] >= 1 and usb["ids"] and not usb["firmware_missing"], usb
    assert "its USB device connected " in run["reason"], run["reason"]


def test_the_guest_is_the_machine_a_reproducer_expects(matrix):
    """ext4 under its working directory, root, modules loaded on demand,
    tun, fuse, loop, a SCSI disk, ptys and network namespaces: every run exits 0."""
    c = cell(matrix, "dddd")
    assert c["verdict"] == "NOT_REPRODUCED", c["line"]
    run = run_json(matrix, c)
    assert "exited non-zero" not in run["reason"], run["reason"]
    assert run["evidence"]["count"] > 5
    assert run["evidence"]["reach"]["reached"] == ["pivot_root", "socket", "openat", "unshare"]
    assert run["vm"]["memory_mb"] == 2048  # syzbot's smallest machine


def test_a_run_the_oom_killer_starved_is_inconclusive_never_not_reproduced(matrix):
    c = cell(matrix, "eeee")
    assert c["verdict"] == "INCONCLUSIVE", c["line"]
    assert c["line"].startswith("INCONCLUSIVE: starved for "), c["line"]
    health = run_json(matrix, c)["evidence"]["health"]
    assert health["mostly"] and int(health["agent"]["oom_kills"]) >= 1, health
    assert any(e.startswith("the OOM killer killed") for e in health["events"]), health
    # its account so far every 10 s as well, what a run the guest never ends is judged on
    agent_log = (Path(matrix["_dir"]) / c["run_dir"] / "agent.log").read_text().splitlines()
    running = [l for l in agent_log if l.startswith("KSTALL health ") and l.endswith(" running=1")]
    assert len(running) >= 3 and "running" not in health["agent"], running


def test_a_task_that_cannot_die_behind_its_exited_leader_is_a_hang(matrix):
    """Killed when its time was up, its leader exited (a zombie) and its
    worker sleeps in D state for good: it used to be NOT_REPRODUCED, the
    leader's state hiding the worker's."""
    c = cell(matrix, "ffff")
    assert c["verdict"] == "VULNERABLE", c["line"]
    run = run_json(matrix, c)
    assert run["timings"]["repro_s"] > 10  # after its time: what it left behind


def test_a_pid_namespace_killed_at_its_time_leaves_no_failed_clone(matrix):
    """syzkaller's namespace sandbox: every process is stopped before any is
    killed, so that no worker clones into a namespace whose first process has
    died (ENOMEM, read as the sandbox ending before its time: the agent that
    killed them one by one had 3 such runs in 3, the one that stops them
    first none in 3, 6.1.170 on two vCPUs)."""
    c = cell(matrix, "abab")
    assert c["verdict"] == "NOT_REPRODUCED", c["line"]
    run = run_json(matrix, c)
    assert run["evidence"]["health"]["events"] == [], run["evidence"]["health"]
    assert "weaker" not in c["line"], c["line"]


def test_a_root_program_cannot_write_the_agents_account_of_what_it_asked_the_kernel_for(matrix):
    """It writes a failed request of a module no kernel has where the
    agent's modprobe account once was (/tmp, bound into its root), and where
    it is now: the account, and so the needs, are the kernel's requests alone."""
    c = cell(matrix, "afaf")
    assert c["verdict"] == "INCONCLUSIVE" and "socket family 12 (AF_DECnet)" in c["line"], c["line"]
    agent_log = (Path(matrix["_dir"]) / c["run_dir"] / "agent.log").read_text()
    assert "kstall-forged-module" not in agent_log, "the program wrote the agent's account"
    assert "name=net-pf-12" in agent_log, "the kernel's own request is missing from the account"


def test_the_reports_give_one_row_per_bug(matrix):
    summary = (Path(matrix["_dir"]) / "summary.md").read_text()
    rows = [l for l in summary.splitlines() if l.startswith("| [")]
    assert len(rows) == 13, summary
    assert any("INFO: task hung in pipe_write | reproduced: INFO: task hung in pipe_write" in r for r in rows)
    # ffff's hang is syzbot's title too when the kernel's detector speaks before the time is up
    assert re.search(f"- {KERNEL}: reproduced [23], ", summary) and "starved 1" in summary, summary
    assert any("not in the kernel: socket family 12 (AF_DECnet)" in r for r in rows)
    assert any("not in the kernel: /dev/sequencer" in r for r in rows) and "not in the kernel 3" in summary, summary
    # the kernel's own page: its open syzbot hangs first, each with its id and "open"
    page = summary.split(f"#### {KERNEL}", 1)[1]
    assert re.search(r"^- aaaa00000000 open: INFO: task hung in pipe_write \(reproduced", page, re.M), page
    assert kstall_processes() == []


def test_a_program_run_again_on_its_kernel_is_restored_from_its_snapshot(matrix, tmp_path):
    """A guest is saved at the agent's gate with its program in the initramfs:
    the same program on the same kernel and shape again is restored, not
    booted (the module tree's image, which each use touches, used to change
    the snapshot's key, and every syzkaller run booted cold). The matrix's
    cell made it on a cold cache, or found it on a warm one."""
    c = cell(matrix, "cccc")
    saved = run_json(matrix, c)["vm"]["snapshot"]
    assert saved and saved.get("key"), saved
    p = kstall("verify", KERNEL, str(PROGRAMS / "needs_decnet.c"), "--cpus", "1", "--duration", str(NEEDS_S),
               "--json", "--results", str(tmp_path), timeout=600)
    doc = json.loads(p.stdout) if p.stdout.strip().startswith("{") else {}
    assert doc.get("verdict") == c["verdict"], p.stderr[-2000:]
    again = doc["vm"]["snapshot"]
    assert again["restored"] and again["key"] == saved["key"], (saved, again)
    assert kstall_processes() == []


SHARDED = ("syz-ffff*", "syz-cccc*", "syz-a1a1*")  # a hang, a need found in the guest, one known before booting


def page_ids(doc: dict, reproducers: set[str]) -> dict[str, dict[str, list[str]]]:
    """matrix.json's page per kernel, as its sections and the bug ids in each (a run's own figures left out)."""
    return {k: {s: sorted(x.split()[0].rstrip(":") for x in items if x.split()[0].rstrip(":")[:4] in reproducers)
                for s, items in page.items()} for k, page in doc["per_kernel"].items()}


def test_two_merged_shards_give_the_same_page_per_kernel(matrix, tmp_path):
    """A CI spreads the syzbot suite over its jobs (--shard I/N) and merges
    them (`kstall report`): each kernel's page of the merged report is the
    unsharded run's. Three of the matrix's bugs again, as two shards side
    by side (restored from their snapshots)."""
    m = Path(matrix["_dir"]).parent / "syzkaller.toml"
    only = [a for r in SHARDED for a in ("--only", r)]
    shards = [subprocess.Popen([*KSTALL, "matrix", str(m), *only, "--shard", f"{i}/2", "--results",
                                str(tmp_path / "shards")], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
              for i in (1, 2)]
    for p in shards:
        out, err = p.communicate(timeout=900)
        assert p.returncode == 0, out + err  # every cell expects any verdict: only an ERROR fails
    dirs = sorted(d for d in (tmp_path / "shards").iterdir() if d.is_dir() and not d.name.startswith("."))
    assert len(dirs) == 2, dirs
    kstall("report", *map(str, dirs), "--out", str(tmp_path / "merged"))
    merged = json.loads(next((tmp_path / "merged").glob("*/matrix.json")).read_text())
    whole = json.loads((Path(matrix["_dir"]) / "matrix.json").read_text())
    ids = {s[4:8] for s in SHARDED}
    assert page_ids(merged, ids) == page_ids(whole, ids), (merged["per_kernel"], whole["per_kernel"])
    assert page_ids(merged, ids)[KERNEL]["open"] == ["ffff00000000"]
    summary = next((tmp_path / "merged").glob("*/summary.md")).read_text()
    assert re.search(r"^- ffff00000000 open: ", summary.split(f"#### {KERNEL}", 1)[1], re.M), summary
    assert kstall_processes() == []
