/* SPDX-License-Identifier: GPL-2.0 */
/* Shared by repro/bpf_timer.bpf.c and repro/bpf_timer.c. */
#ifndef KSTALL_BPF_TIMER_H
#define KSTALL_BPF_TIMER_H

#define BT_TIMERS 2

#endif
