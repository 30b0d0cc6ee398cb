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
])
def test_a_kind_of_frame_that_never_names_a_report_covers_its_members(name):
    assert SKIP.search(name), name


@pytest.mark.parametrize("name", [
    "__alloc_skb", "tun_device_event", "strp_check_rcv", "rtnl_newlink", "ext4_expand_extra_isize_ea",
    "do_one_initcall", "nci_send_cmd", "perf_event_release_kernel", "completion_done_checker_of_driver",
])
def test_a_reports_subject_is_not_passed_over(name):
    assert not SKIP.search(name), name


def test_a_cpp_symbol_is_titled_by_its_plain_name():
    assert report_title.plain_name("_Z8fakeNameiii") == "fakeName"
    assert report_title.plain_name("_Z99short") == "_Z99short"  # not a name it can hold
    assert report_title.plain_name("tun_device_event") == "tun_device_event"
