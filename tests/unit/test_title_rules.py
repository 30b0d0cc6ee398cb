# SPDX-License-Identifier: GPL-2.0
"""The title rules are written for kinds of frames, not for the spellings
one corpus shows: each kind also passes over members the corpus never
showed, and keeps the frames that are a report's subject."""
import re

import pytest

from harness.analysis import console, report_title

RULES = console.load_patterns().rules
SKIP = re.compile("|".join(RULES.skip))


@pytest.mark.parametrize("name", [
    # allocators of every family and age
    "__kmalloc_node", "kmalloc_trace", "kvzalloc", "kvfree", "kvrealloc", "kmem_cache_alloc_lru",
    "__alloc_pages_nodemask", "vzalloc_node",
    "kfree_sensitive", "__vmalloc_node_range",
    # locking and waiting primitives
    "mutex_lock_interruptible_nested", "rt_mutex_slowlock", "complete_all", "spin_trylock_bh",
    # library helpers
    "__memcpy_flushcache", "strscpy_pad", "test_and_set_bit_lock", "_copy_from_iter", "copy_page_from_iter",
    "vscnprintf", "rb_insert_color", "rb_next_postorder",
    # the report's own machinery and instrumentation
    "fortify_panic", "do_translation_fault", "el1_abort", "kasan_report_invalid_free", "trace_hardirqs_off_caller",
    "mark_lock_irq",
    # a semaphore's and an rwsem's waits, and their slow paths; and its trylock, which syzkaller's
    # skipPatterns pass over too (pkg/report/linux.go): a lock-order report taken there names its caller
    "down", "__down_common", "down_read_killable", "down_write_nested", "rwsem_down_write_slowpath", "down_trylock",
])
def test_a_kind_of_frame_that_never_names_a_report_covers_its_members(name):
    assert SKIP.search(name), name


@pytest.mark.parametrize("name", [
    "__alloc_skb", "tun_device_event", "strp_check_rcv", "rtnl_newlink", "ext4_expand_extra_isize_ea",
    "do_one_initcall", "nci_send_cmd", "perf_event_release_kernel", "completion_done_checker_of_driver",
    # "down" inside a name is the subsystem's own teardown or shutdown
    "l2cap_sock_teardown_cb", "tcp_shutdown", "hci_dev_do_shutdown", "download_firmware",
])
def test_a_reports_subject_is_not_passed_over(name):
    assert not SKIP.search(name), name


def test_a_cpp_symbol_is_titled_by_its_plain_name():
    assert report_title.plain_name("_Z8fakeNameiii") == "fakeName"
    assert report_title.plain_name("_Z99short") == "_Z99short"  # not a name it can hold
    assert report_title.plain_name("tun_device_event") == "tun_device_event"


@pytest.mark.parametrize("frame", ["__hrtimer_run_queues", "hrtimer_run_softirq", "tasklet_action_common",
                                   "tasklet_hi_action", "handle_softirqs", "ret_fast_syscall"])
def test_every_dispatcher_of_deferred_work_and_every_syscall_entry_anchors_a_stall(frame):
    """A stall is named after the code a dispatcher ran: timers of both kinds,
    tasklets, softirqs as 6.10 on runs them, arm's syscall return path."""
    assert report_title._stall(["loop_helper", "the_callback", frame, "outer"], RULES) == "the_callback"


@pytest.mark.parametrize("title,want", [
    # syzkaller's dynamicTitleReplacement (pkg/report/report.go), each rule until nothing changes
    ("BUG: Dentry ffff888119d8a000{i=0} still in use", "BUG: Dentry ADDR{i=NUM} still in use"),
    ("WARNING: at 0xffffffff81234567 pid 12345", "WARNING: at ADDR pid NUM"),
    ("WARNING in fs/ext4/inode.c:1234", "WARNING in fs/ext4/inode.c:LINE"),
    ("BUG: soft lockup - CPU#1 stuck", "BUG: soft lockup - CPU stuck"),
    ("general protection fault in nl802154_add_llsec_key", "general protection fault in nl802154_add_llsec_key"),
    # a panic's address after an underscore, an executor's pid, an IP, numbers that overlap
    ("kernel panic: bad at_ffffffff81234567 in syz-executor.3:1234", "kernel panic: bad at_ADDR in syz-executor"),
    ("WARNING: to 10.0.2.15 port 0,1,2", "WARNING: to IP port NUM,NUM,NUM"),
    ("WARNING in foo+0x1f/0x40 once", "WARNING in foo once"),
    # sanitized: control characters dropped, spaces run together, at most 120 characters read
    ("BUG:\x01 bad\t\tthing ", "BUG: bad thing"),
    ("WARNING in " + "x" * 200, "WARNING in " + "x" * 109),
])
def test_a_title_keeps_nothing_that_differs_between_runs(title, want):
    assert RULES.steady(title) == want


def test_a_sleeping_task_is_named_past_its_context_switch_not_by_a_stale_slot_before_it():
    # ppc64's stack of a switched-out task (6.1.170, perf-sigtrap): its first
    # frame is its callee's old link-register save, which the kernel prints "(unreliable)"
    frames = ["update_blocked_averages", "__switch_to", "__schedule", "schedule", "_free_event",
              "perf_event_release_kernel", "perf_release", "__fput"]
    assert report_title._hung(frames, RULES) == "_free_event"
    assert report_title._hung(["__schedule", "schedule", "rtnl_lock", "x"], RULES) == "rtnl_lock"
