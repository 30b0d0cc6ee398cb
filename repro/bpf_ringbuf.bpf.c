// SPDX-License-Identifier: GPL-2.0
/* BPF side of bpf-ringbuf: the Superluminal pattern.
 *
 * One BPF_MAP_TYPE_RINGBUF shared by a tp_btf/sched_switch program and an
 * NMI-context program (a perf_event program on hardware cycles where there is
 * a PMU, else tp_btf/nmi_handler driven by NMIs the host injects). Each does
 * bpf_ringbuf_reserve + bpf_ringbuf_discard and times the reserve with
 * bpf_ktime_get_ns, keeping per-CPU log2 latency histograms and counters.
 * Since 6.15 the ringbuf lock is an rqspinlock; on affected kernels an NMI
 * reserve that lands while its CPU holds the lock spins to the lock's timeout
 * instead of failing fast, and the sched_switch reserves behind it stall too.
 */
#include <stdbool.h>
#include <linux/types.h>
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "bpf_ringbuf.h"

struct task_struct;

const volatile __u32 reserves_per_switch = 1;
const volatile __u64 stall_ns[RB_PATHS] = { 300000000, 50000000 };

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 16 << 20);	/* set by the loader */
} rb SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, RB_PATHS * RB_BUCKETS);
	__type(key, __u32);
	__type(value, __u64);
} hist SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, RB_PATHS * RB_STATS);
	__type(key, __u32);
	__type(value, __u64);
} stats SEC(".maps");

static __always_inline void add(__u32 path, __u32 stat, __u64 v)
{
	__u32 key = path * RB_STATS + stat;
	__u64 *p = bpf_map_lookup_elem(&stats, &key);

	if (p)
		*p += v;
}

static __always_inline void reserve_once(__u32 path)
{
	__u64 t0 = bpf_ktime_get_ns(), dt, *slot;
	void *rec = bpf_ringbuf_reserve(&rb, 8, 0);
	__u32 key, b;

	dt = bpf_ktime_get_ns() - t0;
	if (rec)
		bpf_ringbuf_discard(rec, BPF_RB_NO_WAKEUP);
	else
		add(path, RB_NULLS, 1);
	add(path, RB_RESERVES, 1);
	add(path, RB_SUM_NS, dt);
	if (dt >= stall_ns[path])
		add(path, RB_OVER, 1);
	key = path * RB_STATS + RB_MAX_NS;
	slot = bpf_map_lookup_elem(&stats, &key);
	if (slot && dt > *slot)
		*slot = dt;
	/* log2 bucket: b such that 2^b <= dt < 2^(b+1) */
	for (b = 0; b < RB_BUCKETS - 1; b++)
		if (!(dt >> (b + 1)))
			break;
	key = path * RB_BUCKETS + b;
	slot = bpf_map_lookup_elem(&hist, &key);
	if (slot)
		*slot += 1;
}

SEC("tp_btf/sched_switch")
int BPF_PROG(on_switch, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	for (__u32 i = 0; i < 64 && i < reserves_per_switch; i++)
		reserve_once(RB_PATH_SWITCH);
	return 0;
}

SEC("tp_btf/nmi_handler")
int BPF_PROG(on_nmi_handler, void *handler, __s64 delta_ns, int handled)
{
	reserve_once(RB_PATH_NMI);
	return 0;
}

SEC("perf_event")
int on_perf_nmi(void *ctx)
{
	reserve_once(RB_PATH_NMI);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
