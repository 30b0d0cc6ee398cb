/* SPDX-License-Identifier: GPL-2.0 */
/* Layout of bpf-ringbuf's maps, shared by the BPF programs and the loader. */
#ifndef KSTALL_BPF_RINGBUF_H
#define KSTALL_BPF_RINGBUF_H

enum rb_path { RB_PATH_SWITCH, RB_PATH_NMI, RB_PATHS };
enum rb_stat { RB_RESERVES, RB_NULLS, RB_MAX_NS, RB_OVER, RB_SUM_NS, RB_STATS };
#define RB_BUCKETS 40	/* log2(ns) buckets: 1 ns .. 2^39 ns (~9 min) */

#endif
