// SPDX-License-Identifier: GPL-2.0
/* perf-refresh: the async-profiler pattern that deadlocks affected kernels.
 *
 * Every worker thread opens a per-thread cpu-clock software event, routes its
 * overflow to a signal (O_ASYNC, F_SETSIG, F_SETOWN_EX to its own tid) and arms
 * it with PERF_EVENT_IOC_REFRESH 1. When the refresh count reaches zero inside
 * the cpu-clock hrtimer callback, affected kernels (18dbcbfabfff up to
 * eb3182ef0405) stop the event from within that callback and hrtimer_cancel()
 * waits for itself with interrupts off. The signal handler re-arms with
 * IOC_RESET + IOC_REFRESH 1, so each POLL_HUP signal is one completed pass
 * over the buggy path: that count is the evidence printed as progress.
 *
 * A bystander thread of the same process maps and unmaps memory so that the
 * kernel sends TLB-shootdown IPIs to the CPUs running the workers: on a hung
 * kernel it ends up in csd_lock_wait, the second half of the signature. It
 * pauses between unmaps: one IPI a millisecond still reaches a hung CPU at
 * once, while back-to-back IPIs made each REFRESH cycle 2.5 times slower
 * under TCG.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <linux/perf_event.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>

#include "repro.h"

struct options {
	int threads;
	int bystander;
	unsigned long long bystander_gap_us;
	unsigned long long period_ns;
	unsigned long long duration_ms;
	unsigned long long target;
	unsigned long long progress_ms;
};

static atomic_ullong hup_signals;	/* refresh-to-zero passes completed */
static atomic_ullong other_signals;	/* POLL_IN and friends */
static atomic_ullong unmaps;		/* bystander munmap calls */
static atomic_ullong rearms;		/* enables asked for again: none came through */
static atomic_int stop;
static atomic_int failed_errno;
static __thread int event_fd = -1;

static void on_overflow(int sig, siginfo_t *si, void *uc)
{
	int saved = errno;

	(void)sig;
	(void)uc;
	if (event_fd >= 0) {
		ioctl(event_fd, PERF_EVENT_IOC_RESET, 0);
		ioctl(event_fd, PERF_EVENT_IOC_REFRESH, 1);
	}
	if (si->si_code == POLL_HUP)
		atomic_fetch_add_explicit(&hup_signals, 1, memory_order_relaxed);
	else
		atomic_fetch_add_explicit(&other_signals, 1, memory_order_relaxed);
	errno = saved;
}

static int open_event(unsigned long long period_ns)
{
	struct perf_event_attr attr;
	struct f_owner_ex owner = { .type = F_OWNER_TID, .pid = gettid() };
	int fd;

	memset(&attr, 0, sizeof(attr));
	attr.size = sizeof(attr);
	attr.type = PERF_TYPE_SOFTWARE;
	attr.config = PERF_COUNT_SW_CPU_CLOCK;
	attr.sample_period = period_ns;
	attr.sample_type = PERF_SAMPLE_IP | PERF_SAMPLE_TID;
	attr.disabled = 1;
	attr.wakeup_events = 1;
	attr.exclude_idle = 1;

	fd = syscall(SYS_perf_event_open, &attr, 0, -1, -1, PERF_FLAG_FD_CLOEXEC);
	if (fd < 0)
		return -errno;
	/* async-profiler maps a sample buffer; keep that part of the pattern */
	if (mmap(NULL, 2 * getpagesize(), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) == MAP_FAILED ||
	    fcntl(fd, F_SETFL, O_ASYNC) < 0 ||
	    fcntl(fd, F_SETSIG, SIGPROF) < 0 ||
	    fcntl(fd, F_SETOWN_EX, &owner) < 0) {
		int err = errno;

		close(fd);
		return -err;
	}
	return fd;
}

static unsigned long long now_ms(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1000ULL + t.tv_nsec / 1000000;
}

/* An enable the kernel drops leaves the event silent for ever, which reads as
 * a hang with no culprit (seen on arm64 6.16.12: a WARNING in event_function
 * during the first REFRESH, then no overflow at all). A thousand periods
 * (100 ms at least) without any signal is a lost enable: ask again. On an
 * affected kernel the first overflow hangs this CPU, so this never runs there
 * once it matters. */
static void rearm_if_silent(int fd, unsigned long long quiet_ms, unsigned long long *seen,
			    unsigned long long *since)
{
	unsigned long long n = atomic_load(&hup_signals) + atomic_load(&other_signals), t = now_ms();

	if (n != *seen) {
		*seen = n;
		*since = t;
	} else if (t - *since >= quiet_ms) {
		ioctl(fd, PERF_EVENT_IOC_REFRESH, 1);
		atomic_fetch_add(&rearms, 1);
		*since = t;
	}
}

static void *worker(void *arg)
{
	const struct options *o = arg;
	volatile unsigned long spin = 0;
	unsigned long long seen = 0, since = now_ms();
	unsigned long long quiet_ms = o->period_ns / 1000 > 100 ? o->period_ns / 1000 : 100;
	int fd = open_event(o->period_ns);

	if (fd < 0) {
		atomic_store(&failed_errno, -fd);
		return NULL;
	}
	event_fd = fd;
	ioctl(fd, PERF_EVENT_IOC_RESET, 0);
	ioctl(fd, PERF_EVENT_IOC_REFRESH, 1);
	/* burn CPU time in user mode: cpu-clock only advances while we run */
	while (!atomic_load_explicit(&stop, memory_order_relaxed))
		if ((++spin & 0xffff) == 0)
			rearm_if_silent(fd, quiet_ms, &seen, &since);
	ioctl(fd, PERF_EVENT_IOC_DISABLE, 0);
	event_fd = -1;
	return NULL;
}

static void *bystander(void *arg)
{
	const struct options *o = arg;
	const struct timespec gap = { .tv_sec = o->bystander_gap_us / 1000000,
				      .tv_nsec = (o->bystander_gap_us % 1000000) * 1000 };
	const size_t len = 16 * 4096;

	while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
		char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

		if (p == MAP_FAILED)
			continue;
		for (size_t i = 0; i < len; i += 4096)
			p[i] = 1;
		munmap(p, len);
		atomic_fetch_add_explicit(&unmaps, 1, memory_order_relaxed);
		if (o->bystander_gap_us)
			nanosleep(&gap, NULL);
	}
	return NULL;
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: perf-refresh [options]\n"
		"  --threads N       worker threads (default: half the CPUs, at least 1)\n"
		"  --no-bystander    no mmap/munmap thread forcing TLB-shootdown IPIs\n"
		"  --bystander-gap-us US  pause between the bystander's unmaps (default 1000)\n"
		"  --period-ns NS    cpu-clock sample period (default 100000)\n"
		"  --duration S      stop after S seconds (default 30)\n"
		"  --cycles N        stop once N refresh cycles completed (default: no limit)\n"
		"  --progress-ms MS  progress line interval (default 100)\n");
}

static int parse(int argc, char **argv, struct options *o)
{
	static const struct option longopts[] = {
		{ "threads", required_argument, NULL, 't' },
		{ "no-bystander", no_argument, NULL, 'B' },
		{ "bystander-gap-us", required_argument, NULL, 'g' },
		{ "period-ns", required_argument, NULL, 'p' },
		{ "duration", required_argument, NULL, 'd' },
		{ "cycles", required_argument, NULL, 'c' },
		{ "progress-ms", required_argument, NULL, 'P' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 }
	};
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	int c;

	*o = (struct options){ .threads = cpus > 1 ? cpus / 2 : 1, .bystander = 1, .bystander_gap_us = 1000,
			       .period_ns = 100000, .duration_ms = 30000, .progress_ms = 100 };
	while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		switch (c) {
		case 't': o->threads = atoi(optarg); break;
		case 'B': o->bystander = 0; break;
		case 'g': o->bystander_gap_us = strtoull(optarg, NULL, 0); break;
		case 'p': o->period_ns = strtoull(optarg, NULL, 0); break;
		case 'd': o->duration_ms = (unsigned long long)(strtod(optarg, NULL) * 1000); break;
		case 'c': o->target = strtoull(optarg, NULL, 0); break;
		case 'P': o->progress_ms = strtoull(optarg, NULL, 0); break;
		case 'h': usage(stdout); exit(0);
		default: usage(stderr); return -1;
		}
	}
	if (o->threads < 1 || o->threads > 256 || o->period_ns < 10000 || o->progress_ms < 1) {
		usage(stderr);
		return -1;
	}
	return 0;
}

static int step(unsigned long long elapsed_ms, unsigned long long *count)
{
	*count = atomic_load(&hup_signals);
	ksft_print_msg("progress count=%llu elapsed_ms=%llu\n", *count, elapsed_ms);
	return atomic_load(&failed_errno);
}

int main(int argc, char **argv)
{
	struct sigaction sa = { .sa_sigaction = on_overflow, .sa_flags = SA_SIGINFO | SA_RESTART };
	struct options o;
	pthread_t tids[257];
	unsigned long long elapsed_ms;
	int n = 0, err;

	if (parse(argc, argv, &o))
		return 2;
	repro_start();
	ksft_print_msg("perf-refresh: threads=%d bystander=%d gap_us=%llu period_ns=%llu duration_ms=%llu target=%llu\n",
		       o.threads, o.bystander, o.bystander_gap_us, o.period_ns, o.duration_ms, o.target);
	sigemptyset(&sa.sa_mask);
	sigaction(SIGPROF, &sa, NULL);

	for (int i = 0; i < o.threads; i++)
		if (pthread_create(&tids[n], NULL, worker, &o) == 0)
			n++;
	if (o.bystander && pthread_create(&tids[n], NULL, bystander, &o) == 0)
		n++;
	elapsed_ms = repro_loop(o.progress_ms, o.duration_ms, o.target, step);
	atomic_store(&stop, 1);
	for (int i = 0; i < n; i++)
		pthread_join(tids[i], NULL);

	ksft_print_msg("result count=%llu elapsed_ms=%llu other_signals=%llu bystander_unmaps=%llu rearms=%llu\n",
		       (unsigned long long)atomic_load(&hup_signals), elapsed_ms,
		       (unsigned long long)atomic_load(&other_signals), (unsigned long long)atomic_load(&unmaps),
		       (unsigned long long)atomic_load(&rearms));
	err = atomic_load(&failed_errno);
	if (err)
		ksft_test_result_skip("perf-refresh: perf_event_open: %s\n", strerror(err));
	else
		ksft_test_result_pass("perf-refresh\n");
	ksft_finished();
}
