// SPDX-License-Identifier: GPL-2.0
/* bpf-timer: two BPF timers whose callbacks cancel each other.
 *
 * Timer A's callback cancels timer B and B's cancels A. Each timer is armed
 * (0 ns) by a tc program the loader runs through BPF_PROG_TEST_RUN on its
 * own CPU, so the two callbacks run at once on two CPUs. Before d4523831f07a
 * ("bpf: Fail bpf_timer_cancel when callback is being cancelled") each
 * waits in hrtimer_cancel() for the other's callback to finish, forever;
 * with it one of them gets -EDEADLK. Runs on kernels from 5.15 (no
 * BPF_F_TIMER_CPU_PIN, which 6.1 lacks: a timer fires on the CPU that armed it).
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "bpf_timer.h"

char LICENSE[] SEC("license") = "GPL";

#define CLOCK_MONOTONIC 1
#define EBUSY 16
#define EDEADLK 35

struct elem {
	struct bpf_timer t;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, int);
	__type(value, struct elem);
} timer_a SEC(".maps"), timer_b SEC(".maps");

/* per timer: callbacks run, cancels of the other timer that returned -EDEADLK */
__u64 callbacks[BT_TIMERS];
__u64 deadlk[BT_TIMERS];
/* per timer: the last error bpf_timer_init gave, other than -EBUSY (armed
 * already): a kernel that cannot make a timer never reaches the bug */
__s64 init_err[BT_TIMERS];

static __always_inline int cancel_other(void *other, int self)
{
	int key = 0;
	struct elem *e = bpf_map_lookup_elem(other, &key);

	if (e && bpf_timer_cancel(&e->t) == -EDEADLK)
		__sync_fetch_and_add(&deadlk[self], 1);
	__sync_fetch_and_add(&callbacks[self], 1);
	return 0;
}

static int on_a(void *map, int *key, struct elem *e)
{
	return cancel_other(&timer_b, 0);
}

static int on_b(void *map, int *key, struct elem *e)
{
	return cancel_other(&timer_a, 1);
}

static __always_inline int arm(void *map, void *cb, int self)
{
	int key = 0;
	struct elem *e = bpf_map_lookup_elem(map, &key);
	long err;

	if (!e)
		return 0;
	err = bpf_timer_init(&e->t, map, CLOCK_MONOTONIC);
	if (err && err != -EBUSY)
		init_err[self] = err;
	bpf_timer_set_callback(&e->t, cb);
	bpf_timer_start(&e->t, 0, 0);
	return 0;
}

SEC("tc")
int arm_a(struct __sk_buff *skb)
{
	return arm(&timer_a, on_a, 0);
}

SEC("tc")
int arm_b(struct __sk_buff *skb)
{
	return arm(&timer_b, on_b, 1);
}
