// SPDX-License-Identifier: GPL-2.0
/* bpf-timer: load two BPF timers whose callbacks cancel each other, and arm
 * them on two CPUs at once (repro/bpf_timer.bpf.c).
 *
 * One thread pinned to CPU0 runs arm_a and one pinned to CPU1 runs arm_b
 * through BPF_PROG_TEST_RUN, again and again. Progress counts the callbacks
 * that cancelled the other timer: each is a pass over the racy path. On an
 * affected kernel both CPUs end up waiting in hrtimer_cancel() for each
 * other and the guest freezes; a fixed one returns -EDEADLK to one of the
 * two, which the result line counts (edeadlk=).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "bpf_timer.h"
#include "repro.h"
#include "bpf_repro.h"
#include "bpf_timer.skel.h"

struct options {
	unsigned long long duration_ms;
	unsigned long long target;
	unsigned long long progress_ms;
	unsigned repeat;
};

static atomic_int stop;
static atomic_int failed_errno;
static const char *failed_call = "BPF_PROG_TEST_RUN";
static struct timer_pair *skel;

struct arm_thread {
	int cpu;
	int prog_fd;
	unsigned repeat;
};

static void *arm_loop(void *arg)
{
	struct arm_thread *t = arg;
	char pkt[64] = { 0 };  /* a tc program's test run needs an Ethernet header's worth */

	repro_pin_cpu(t->cpu);
	while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
		LIBBPF_OPTS(bpf_test_run_opts, opts, .data_in = pkt, .data_size_in = sizeof(pkt), .repeat = t->repeat);

		if (bpf_prog_test_run_opts(t->prog_fd, &opts)) {
			atomic_store(&failed_errno, errno);
			break;
		}
	}
	return NULL;
}

static unsigned long long callbacks(void)
{
	unsigned long long n = 0;

	for (int i = 0; i < BT_TIMERS; i++)
		n += __atomic_load_n(&skel->bss->callbacks[i], __ATOMIC_RELAXED);
	return n;
}

static int step(unsigned long long elapsed_ms, unsigned long long *count)
{
	long long init_err = skel->bss->init_err[0] ? skel->bss->init_err[0] : skel->bss->init_err[1];

	*count = callbacks();
	ksft_print_msg("progress count=%llu elapsed_ms=%llu\n", *count, elapsed_ms);
	/* no timer could be made, so none ran: the kernel cannot reach the bug
	 * this way (7.2's bpf_timer_init allocates with kmalloc_nolock(), which
	 * fails where the slab has no double-word cmpxchg and kstall did not boot
	 * with debug kmalloc caches: repro/bpf-timer.toml) */
	if (!*count && init_err < 0 && !atomic_load(&failed_errno)) {
		failed_call = "bpf_timer_init";
		atomic_store(&failed_errno, (int)-init_err);
	}
	return atomic_load(&failed_errno);
}

static void usage(FILE *f)
{
	fprintf(f, "usage: bpf-timer [--rounds N] [--duration S] [--repeat N] [--progress-ms MS]\n"
		"  --rounds N       stop after N timer callbacks (each cancels the other timer)\n"
		"  --duration S     stop after S seconds (default 30)\n"
		"  --repeat N       runs of the arming program per BPF_PROG_TEST_RUN (default 100)\n"
		"  --progress-ms MS progress line period (default 100)\n");
}

static int parse(int argc, char **argv, struct options *o)
{
	static const struct option longopts[] = {
		{ "rounds", required_argument, NULL, 'r' },
		{ "duration", required_argument, NULL, 'd' },
		{ "repeat", required_argument, NULL, 'R' },
		{ "progress-ms", required_argument, NULL, 'P' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 }
	};
	int c;

	*o = (struct options){ .duration_ms = 30000, .progress_ms = 100, .repeat = 100 };
	while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		switch (c) {
		case 'r': o->target = strtoull(optarg, NULL, 0); break;
		case 'd': o->duration_ms = (unsigned long long)(strtod(optarg, NULL) * 1000); break;
		case 'R': o->repeat = (unsigned)strtoul(optarg, NULL, 0); break;
		case 'P': o->progress_ms = strtoull(optarg, NULL, 0); break;
		case 'h': usage(stdout); exit(0);
		default: usage(stderr); return -1;
		}
	}
	if (o->repeat < 1 || o->progress_ms < 1) {
		usage(stderr);
		return -1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct arm_thread threads[BT_TIMERS];
	pthread_t tids[BT_TIMERS];
	unsigned long long elapsed_ms;
	struct options o;
	int n = 0, err;

	if (parse(argc, argv, &o))
		return 2;
	repro_start();
	ksft_print_msg("bpf-timer: repeat=%u duration_ms=%llu target=%llu\n", o.repeat, o.duration_ms, o.target);
	if (sysconf(_SC_NPROCESSORS_ONLN) < 2)
		ksft_exit_skip("bpf-timer: needs two CPUs, one per timer\n");
	libbpf_set_print(libbpf_print);
	bpf_jit_on();
	skel = timer_pair__open_and_load();
	if (!skel)
		ksft_exit_skip("bpf-timer: BPF load: %s\n", strerror(errno));
	threads[0] = (struct arm_thread){ 0, bpf_program__fd(skel->progs.arm_a), o.repeat };
	threads[1] = (struct arm_thread){ 1, bpf_program__fd(skel->progs.arm_b), o.repeat };
	for (int i = 0; i < BT_TIMERS; i++)
		if (pthread_create(&tids[n], NULL, arm_loop, &threads[i]) == 0)
			n++;
	elapsed_ms = repro_loop(o.progress_ms, o.duration_ms, o.target, step);
	atomic_store(&stop, 1);
	for (int i = 0; i < n; i++)
		pthread_join(tids[i], NULL);

	ksft_print_msg("result count=%llu elapsed_ms=%llu edeadlk=%llu\n", callbacks(), elapsed_ms,
		       (unsigned long long)(skel->bss->deadlk[0] + skel->bss->deadlk[1]));
	err = atomic_load(&failed_errno);
	timer_pair__destroy(skel);
	if (err)
		ksft_test_result_skip("bpf-timer: %s: %s\n", failed_call, strerror(err));
	else
		ksft_test_result_pass("bpf-timer\n");
	ksft_finished();
}
