# SPDX-License-Identifier: GPL-2.0
"""The title rules of console-patterns.toml (harness/analysis/report_title.py),
one console per rule: which frame a report is named after, the way syzbot
names it. The consoles are small, in the kernel's own formats; the recorded
ones are in tests/fixtures/consoles/ and the syzkaller corpus is measured by
tests/bench/syzkaller_reports.py."""
from pathlib import Path

import pytest

from harness.analysis import console


def title(text: str) -> str:
    reports = [r for r in console.scan(text.strip("\n")) if r.kind in console.TITLED_KINDS]
    return reports[0].title


SYSCALL_STALL = """
[  100.000001][    C0] rcu: INFO: rcu_preempt self-detected stall on CPU
[  100.000002][    C0] rcu: \t0-....: (10500 ticks this GP) idle=1234/1/0x4000000000000000
[  100.000003][    C0] Call Trace:
[  100.000004][    C0]  <IRQ>
[  100.000005][    C0]  rcu_sched_clock_irq+0x1/0x2
[  100.000006][    C0]  update_process_times+0x1/0x2
[  100.000007][    C0]  sysvec_apic_timer_interrupt+0x1/0x2
[  100.000008][    C0]  </IRQ>
[  100.000009][    C0]  <TASK>
[  100.000010][    C0]  asm_sysvec_apic_timer_interrupt+0x1/0x2
[  100.000011][    C0] RIP: 0010:hrtimer_cancel+0x12/0x16
[  100.000012][    C0]  perf_swevent_cancel_hrtimer+0x1/0x2
[  100.000013][    C0]  ? cpu_clock_event_stop+0x1/0x2
[  100.000014][    C0]  perf_ioctl+0x1/0x2
[  100.000015][    C0]  __x64_sys_ioctl+0x1/0x2
[  100.000016][    C0]  do_syscall_64+0x1/0x2
[  100.000017][    C0]  entry_SYSCALL_64_after_hwframe+0x1/0x2
"""


@pytest.mark.parametrize("text,want", [
    # a stall is named after the code under the dispatcher it loops in (here
    # the ioctl entry), not the helper the timer interrupt happened to catch
    (SYSCALL_STALL, "INFO: rcu detected stall in perf_ioctl"),
    # waiting for other CPUs is one bucket, whichever helper was caught
    ("""
[  50.1] watchdog: BUG: soft lockup - CPU#1 stuck for 22s! [perf:77]
[  50.2] RIP: 0010:smp_call_function_many_cond+0x1/0x2
[  50.3] Call Trace:
[  50.4]  on_each_cpu_cond_mask+0x1/0x2
[  50.5]  __x64_sys_munmap+0x1/0x2
[  50.6]  do_syscall_64+0x1/0x2
""", "BUG: soft lockup in smp_call_function"),
    # a hung task is named past its waits; tasks waiting for RTNL are one bucket
    ("""
[  9.0] INFO: task kworker/0:1:12 blocked for more than 143 seconds.
[  9.1] Call Trace:
[  9.2]  __schedule+0x1/0x2
[  9.3]  schedule_preempt_disabled+0x1/0x2
[  9.4]  __mutex_lock+0x1/0x2
[  9.5]  rtnl_lock+0x1/0x2
[  9.6]  addrconf_dad_work+0x1/0x2
""", "INFO: task hung in rtnl_lock"),
    ("""
[  9.0] INFO: task syz:4433 blocked in I/O wait for more than 143 seconds.
[  9.1] Call trace:
[  9.2]  __switch_to+0x1/0x2 (T)
[  9.3]  io_schedule+0x1/0x2
[  9.4]  folio_wait_bit_common+0x1/0x2
[  9.5]  filemap_read+0x1/0x2
""", "INFO: task hung in filemap_read"),
    # lockdep names the acquisition it was told about ("at:")
    ("""
[  3.0] WARNING: possible circular locking dependency detected
[  3.1] 6.1.0 #1 Not tainted
[  3.2] syz/42 is trying to acquire lock:
[  3.3] ffff888012345678 (&dev->mutex){+.+.}-{3:3}, at: vcs_read+0x1/0x2
[  3.4] but task is already holding lock:
""", "possible deadlock in vcs_read"),
    # ... and without those lines it is titled by its first one
    ("[  3.0] WARNING: possible recursive locking detected\n", "WARNING: possible recursive locking detected"),
    # a fault-injection stack mixed into the report: no frame can be trusted
    ("""
[  7.0] INFO: task syz:9 blocked for more than 143 seconds.
[  7.1] Call Trace:
[  7.2]  should_fail+0x1/0x2
[  7.3]  pipe_write+0x1/0x2
""", "INFO: task hung in corrupted"),
    # a report whose stack never came is "in corrupted"
    ("[  2.0] BUG: scheduling while atomic: kworker/0:1/12/0x00000002\n", "BUG: scheduling while atomic in corrupted"),
    # the WARNINGs of common helpers are their caller's, with the helper's kind
    ("""
[  4.0] WARNING: CPU: 0 PID: 7 at mm/slab_common.c:1012 kmalloc_slab+0x1/0x2
[  4.1] RIP: 0010:kmalloc_slab+0x1/0x2
[  4.2]  __kmalloc+0x1/0x2
[  4.3]  relay_open_buf+0x1/0x2
""", "WARNING: kmalloc bug in relay_open_buf"),
    # a BUG_ON() in an skb helper is its caller's
    ("""
[  5.0] kernel BUG at net/core/skbuff.c:105!
[  5.1] RIP: 0010:skb_panic+0x1/0x2
[  5.2] Call Trace:
[  5.3]  skb_put+0x1/0x2
[  5.4]  ipgre_header+0x1/0x2
""", "kernel BUG in ipgre_header"),
    # a jump to a null address: the RIP line names nothing, the trace does
    ("""
[  8.0] BUG: unable to handle kernel NULL pointer dereference at           (null)
[  8.1] IP: [<          (null)>]           (null)
[  8.2] Call Trace:
[  8.3]  sock_poll+0x1/0x2
[  8.4] Code:  Bad RIP value.
""", "BUG: unable to handle kernel NULL pointer dereference in sock_poll"),
    # old KASAN: Read or Write comes on a later line when it comes
    ("""
[  1.0] BUG: KASAN: use-after-free in consume_skb+0x1/0x2 at addr ffff8800aa
[  1.1] Read of size 4 by task syz/1
""", "KASAN: use-after-free Read in consume_skb"),
    ("[  1.0] BUG: KASAN: slab-out-of-bounds in gup_huge_pmd+0x1/0x2 at addr ffff8800aa\n",
     "KASAN: slab-out-of-bounds in gup_huge_pmd at addr ADDR"),
    # ODEBUG: lines are not BUG: reports
    ("[  6.0] ODEBUG: free active (active state 0) object type: work_struct hint: f+0x0/0x1\n"
     "[  6.1] WARNING: CPU: 0 PID: 1 at lib/debugobjects.c:505 debug_print_object+0x1/0x2\n"
     "[  6.2] RIP: 0010:debug_print_object+0x1/0x2\n[  6.3]  debug_check_no_obj_freed+0x1/0x2\n"
     "[  6.4]  kfree+0x1/0x2\n[  6.5]  strp_done+0x1/0x2\n", "WARNING: ODEBUG bug in strp_done"),
])
def test_a_report_is_named_after_the_frame_syzbot_names(text, want):
    assert title(text) == want


def test_another_callers_report_does_not_cut_a_report_short():
    lines = SYSCALL_STALL.strip("\n").splitlines()
    intruder = "[  100.000012][ T999] INFO: task kworker/1:2:99 blocked for more than 143 seconds."
    assert title("\n".join(lines[:12] + [intruder] + lines[12:])) == "INFO: rcu detected stall in perf_ioctl"


X86_NULL_DEREF = """
[   12.1] BUG: kernel NULL pointer dereference, address: 0000000000000028
[   12.2] #PF: supervisor read access in kernel mode
[   12.3] #PF: error_code(0x0000) - not-present page
[   12.4] PGD 0 P4D 0
[   12.5] Oops: Oops: 0000 [#1] PREEMPT SMP NOPTI
[   12.6] RIP: 0010:perf_ctx_sched_task_cb+0x1c/0x98
[   12.7] Call Trace:
[   12.8]  <TASK>
[   12.9]  __perf_event_task_sched_in+0x1d4/0x2f0
"""
ARM64_OOPS = Path(__file__).resolve().parents[1] / "fixtures" / "consoles" / "6.17.8-arm64-perf-ctx-sched-in-oops.log"


def titled(reports: list) -> list[str]:
    return [r["title"] for r in console.titles([r.to_json() for r in reports])]


@pytest.mark.parametrize("text,want", [
    (X86_NULL_DEREF, ["BUG: unable to handle kernel NULL pointer dereference in perf_ctx_sched_task_cb"]),
    # recorded on the fixed 6.17.8 arm64 kernel: 14 lines of abort decoding between the fault and its die()
    # header, and a pc : line and a Call trace: rather than x86's RIP and Call Trace:
    (ARM64_OOPS.read_text(), ["WARNING in ctx_sched_in",
                              "BUG: unable to handle kernel NULL pointer dereference in perf_ctx_sched_task_cb"]),
])
def test_an_oops_and_its_die_header_are_one_report(text, want):
    """die()'s header ("Oops: 0000 [#1] SMP", arm64's "Internal error: Oops: ...
    [#1]") is the second part of the oops whose first line came just before:
    no report of its own, titled by its error code, whether a whole log is
    scanned or a live console fed a line at a time."""
    assert titled(console.scan(text.strip("\n"))) == want
    tracker = console.Tracker(console.default_patterns())
    for i, line in enumerate(text.strip("\n").splitlines()):
        tracker.feed(line, float(i))
    assert titled(tracker.reports) == want


def test_a_die_header_alone_is_a_report_and_a_gpf_after_x86s_oops_prefix_is_a_gpf():
    # its counter is a number like any other (syzkaller's dynamicTitleReplacement)
    assert title("[  9.1] Oops: 0002 [#1] SMP\n[  9.2] RIP: 0010:ext4_fill_super+0x1/0x2\n") == "0002 [#NUM] SMP"
    gpf = ("[ 89.1] Oops: general protection fault, probably for non-canonical address 0xdffffc0000000004: "
           "0000 [#1] SMP KASAN PTI\n[ 89.2] RIP: 0010:move_page_tables+0x1/0x2\n")
    assert title(gpf) == "general protection fault in move_page_tables"


ARM64_LIST_BUG = """
[  531.96] kernel BUG at lib/list_debug.c:64!
[  531.96] Internal error: Oops - BUG: 00000000f2000800 [#1] PREEMPT SMP
[  531.97] pc : __list_del_entry_valid+0xcc/0xd0
[  531.97] lr : __list_del_entry_valid+0xcc/0xd0
[  531.99] Call trace:
[  531.99]  __list_del_entry_valid+0xcc/0xd0
[  531.99]  __kobject_del+0xa8/0x1f8
[  531.99]  kobject_cleanup+0xfc/0x280
[  532.00]  kobject_put+0x94/0xf8
[  532.00]  ext4_unregister_sysfs+0x50/0x7c
"""


def test_arm64s_pc_line_is_where_the_cpu_was_as_x86s_rip_is():
    """A rule that starts from where the CPU was reads arm64's "pc : " as it
    reads x86's RIP; kobject teardown is the caller's, whoever's object it is."""
    assert title(ARM64_LIST_BUG) == "BUG: corrupted list in ext4_unregister_sysfs"


def warning(first_line: str, rip: str, *trace: str) -> str:
    return "\n".join([f"[  7.1] {first_line}", f"[  7.2] RIP: 0010:{rip}", "[  7.3] Call Trace:",
                      *(f"[  7.4]  {f}" for f in trace)])


@pytest.mark.parametrize("first_line", [
    "WARNING: CPU: 1 PID: 77 at kernel/events/core.c:4091 ctx_sched_in+0xc0/0x1a0",  # before 6.19
    "WARNING: kernel/events/core.c:4091 at ctx_sched_in+0xc0/0x1a0, CPU#1: perf-refresh/77",  # 6.19 on
    "WARNING: at ctx_sched_in+0xc0/0x1a0, CPU#1: perf-refresh/77",  # 6.19 on, a WARN() with no file
])
def test_a_warning_is_titled_in_the_kernels_old_and_new_line_formats(first_line):
    """Since 6.19 a WARNING's line puts the file first and the CPU and task
    last (Debian's 6.19.14 and 7.3.4 print it so): the same WARN() gets the
    same title, scanned whole or fed a line at a time."""
    text = warning(first_line, "ctx_sched_in+0xc0/0x1a0", "perf_event_sched_in+0x1/0x2", "ctx_resched+0x1/0x2")
    assert title(text) == "WARNING in ctx_sched_in"
    tracker = console.Tracker(console.default_patterns())
    for i, line in enumerate(text.splitlines()):
        tracker.feed(line, float(i))
    assert titled(tracker.reports) == ["WARNING in ctx_sched_in"]


def test_a_helpers_warning_without_its_function_is_named_by_its_file():
    """6.19's line can lack the function ("at 0x0"): a WARN() in refcount.c
    is still a refcount bug, named after the refcount's user."""
    text = warning("WARNING: lib/refcount.c:19 at 0x0, CPU#1: mmap/61", "refcount_warn_saturate+0xc5/0x110",
                   "__vma_enter_locked+0x62e/0x6a0", "__vma_start_write+0x23/0x140")
    assert title(text) == "WARNING: refcount bug in __vma_enter_locked"


def test_a_title_names_a_function_never_where_in_it():
    """KCSAN's assert report prints the racing function with its offset and
    size; another build of the same code has other ones, the same title."""
    text = ("[ 67.0] BUG: KCSAN: assert: race in dequeue_entities+0x6df/0x760\n"
            "[ 67.1] race at unknown origin, with assert no writes to 0xffff8881001cb1e8 of 4 bytes by task 9 "
            "on cpu 0:\n"
            "[ 67.2]  dequeue_entities+0x6df/0x760\n")
    assert title(text) == "KCSAN: assert: race in dequeue_entities"


ARM_STALL = """
[  30.1] rcu: INFO: rcu_sched self-detected stall on CPU
[  30.2] NMI backtrace for cpu 0
[  30.3] [<80118054>] (unwind_backtrace) from [<80110ce4>] (show_stack+0x20/0x24)
[  30.4] [<80110ce4>] (show_stack) from [<80c16564>] (dump_stack+0x104/0x138)
[  30.5] [<806ab444>] (gic_handle_irq) from [<80100b6c>] (__irq_svc+0x6c/0x90)
[  30.6] Exception stack(0x91883f00 to 0x91883f48)
[  30.7] [<80100b6c>] (__irq_svc) from [<80616f94>] (check_zeroed_user+0x140/0x1dc)
[  30.8] [<80616f94>] (check_zeroed_user) from [<80321578>] (sys_openat2+0x124/0x170)
[  30.9] [<80321578>] (sys_openat2) from [<80100080>] (ret_fast_syscall+0x0/0x54)
[  31.0] Exception stack(0x91883fa8 to 0x91883ff0)
"""

ARM_WARNING = """
[  83.1] WARNING: CPU: 1 PID: 46 at lib/refcount.c:28 refcount_warn_saturate+0x13c/0x174
[  83.2] Call trace:
[  83.3] [<8195d4bc>] (dump_stack) from [<8195df7c>] (panic+0x120/0x368)
[  83.4] [<8195de5c>] (panic) from [<802421e4>] (get_taint+0x0/0x1c)
[  83.5] [<80242170>] (check_panic_on_warn) from [<80242338>] (__warn+0x7c/0x180)
[  83.6] [<80242440>] (warn_slowpath_fmt) from [<80813f4c>] (refcount_warn_saturate+0x13c/0x174)
[  83.7] [<80813e10>] (refcount_warn_saturate) from [<819372e0>] (kobject_put+0x158/0x1f4)
[  83.8] [<81937188>] (kobject_put) from [<81344bf8>] (usb_drv_disconnect+0x98/0x9c)
"""


def test_an_arm_frame_line_names_its_caller_too_unless_the_call_never_returned():
    """arm prints "(callee) from (caller+off)": the last line's caller is the
    syscall entry a stall is named beside (syzbot names arm's sys_openat2
    "openat2"); a caller at +0x0 after a call that never returns (panic) is
    only the next function's first byte."""
    assert title(ARM_STALL) == "INFO: rcu detected stall in openat2"
    assert title(ARM_WARNING) == "WARNING: refcount bug in usb_drv_disconnect"


@pytest.mark.parametrize("text,want", [
    # the device and the error number are this run's, not the bug's
    ("[ 1.0] Kernel panic - not syncing: Couldn't open N_TTY ldisc for ptm1 --- error -12.",
     "kernel panic: Couldn't open N_TTY ldisc"),
    ("[ 1.0] Kernel panic - not syncing: Fatal exception in interrupt", "kernel panic: Fatal exception"),
    ("[ 1.0] Kernel panic - not syncing: Attempted to kill the idle task!",
     "kernel panic: Attempted to kill the idle task!"),
    # a lock-order report cut before the trace of where the lock became irq-safe
    # is named where the lock was being taken, as lockdep's other reports are
    ("""[ 121.1] [ INFO: SOFTIRQ-safe -> SOFTIRQ-unsafe lock order detected ]
[ 121.2] syz-executor1/19557 [HC0[0]:SC0[0]:HE0:SE1] is trying to acquire:
[ 121.3]  (&(&r->consumer_lock)->rlock){+.+...}, at: [<ffffffff82df4347>] tun_device_event+0x897/0xc70""",
     "possible deadlock in tun_device_event"),
])
def test_a_report_is_titled_by_its_kind_not_by_this_runs_details(text, want):
    assert title(text) == want


def test_a_boot_timer_check_a_starved_vcpu_fails_is_the_hosts_not_the_kernels():
    """Four guests on two loaded cores: one 6.16.12 guest panicked in its
    boot-time IO-APIC timer check before the reproducer ran."""
    (r,) = console.scan("[    0.4] Kernel panic - not syncing: IO-APIC + timer doesn't work!  Boot with apic=debug "
                        "and send a report.  Then try booting with the 'noapic' option.")
    assert r.kind == "infra" and r.name == "boot-timer-check" and "starved" in r.reason
