// SPDX-License-Identifier: GPL-2.0
/* futex-requeue-pi: the requeue-PI lockup on a timed-out waiter
 * (CVE-2026-52977, "futex: Prevent lockup in requeue-PI during signal/
 * timeout wakeup").
 *
 * On CPU0 a waiter (SCHED_FIFO 10) waits in FUTEX_WAIT_REQUEUE_PI with a
 * short timeout, and a requeuer (SCHED_FIFO 20) calls FUTEX_CMP_REQUEUE_PI
 * on it again and again onto a PI futex the main thread owns, so the waiter
 * stays queued. The requeuer starves the waiter, which times out but can run
 * only when the requeuer blocks in the kernel. On CPU1 a waker takes the
 * waiter's hash-bucket lock over and over (FUTEX_WAKE), and a SCHED_FIFO 5
 * preempter interrupts it at random, sometimes while it holds that lock.
 *
 * On PREEMPT_RT the hash-bucket lock sleeps. When the requeuer blocks on it
 * behind a preempted waker, the timed-out waiter runs: it marks itself
 * Q_REQUEUE_PI_IGNORE and blocks on the same lock. The requeuer then takes
 * both bucket locks, finds the top waiter ignoring requeues, drops the locks
 * and retries; being of higher priority on the same CPU it takes them again
 * before the waiter can, for ever, never returning to user space. A fixed
 * kernel removes that waiter from the queue and goes on. Without PREEMPT_RT
 * the waiter spins for the lock instead and the race cannot happen.
 *
 * A pass is a completed, timed-out wait of the waiter's.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "repro.h"

struct options {
	unsigned long long duration_ms;
	unsigned long long target;
	unsigned long long progress_ms;
	unsigned timeout_us;
	unsigned burst_us;
};

static struct options opt;
static _Atomic unsigned f1;	/* the waiter's futex */
static _Atomic unsigned f2;	/* the PI futex, owned by the main thread */
static atomic_int stop;
static atomic_int a_waiting;	/* the waiter is in (or about to enter) its wait */
static atomic_int failed_errno;
static atomic_ullong waits, requeues;

static long futex(void *uaddr, int op, unsigned val, void *timeout_or_val2, void *uaddr2, unsigned val3)
{
	return syscall(SYS_futex, uaddr, op, val, timeout_or_val2, uaddr2, val3);
}

/* No printing from these threads: stdio's lock between threads of
 * different real-time priorities would invert them. */
static int pin(int cpu, int policy, int prio)
{
	struct sched_param sp = { .sched_priority = prio };

	repro_pin_cpu(cpu);
	return pthread_setschedparam(pthread_self(), policy, &sp);
}

static void *waiter(void *arg)
{
	unsigned seed = 1;

	(void)arg;
	if ((errno = pin(0, SCHED_FIFO, 10))) {
		atomic_store(&failed_errno, errno);
		return NULL;
	}
	while (!atomic_load(&stop)) {
		struct timespec ts;
		long r;

		clock_gettime(CLOCK_MONOTONIC, &ts);
		ts.tv_nsec += (long)(opt.timeout_us / 2 + (unsigned)rand_r(&seed) % (opt.timeout_us + 1)) * 1000;
		while (ts.tv_nsec >= 1000000000) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000;
		}
		atomic_store(&a_waiting, 1);
		r = futex(&f1, FUTEX_WAIT_REQUEUE_PI | FUTEX_PRIVATE_FLAG, 0, &ts, &f2, 0);
		atomic_store(&a_waiting, 0);
		if (r == 0)	/* requeued and given f2 after all: give it back */
			futex(&f2, FUTEX_UNLOCK_PI | FUTEX_PRIVATE_FLAG, 0, NULL, NULL, 0);
		else if (errno != ETIMEDOUT && errno != EAGAIN && errno != EINTR) {
			atomic_store(&failed_errno, errno);
			break;
		}
		atomic_fetch_add(&waits, 1);
	}
	return NULL;
}

static void *requeuer(void *arg)
{
	(void)arg;
	if (pin(0, SCHED_FIFO, 20))
		return NULL;
	while (!atomic_load(&stop)) {
		struct timespec nap = { 0, 20000 };
		unsigned long long deadline;

		if (!atomic_load(&a_waiting)) {
			nanosleep(&nap, NULL);
			continue;
		}
		/* for as long as the waiter waits, up to a burst: it times
		 * out, and runs again only when this thread blocks in the
		 * kernel or naps after the burst */
		deadline = mono_ns() + opt.burst_us * 1000ull;
		while (atomic_load(&a_waiting) && mono_ns() < deadline && !atomic_load(&stop)) {
			futex(&f1, FUTEX_CMP_REQUEUE_PI | FUTEX_PRIVATE_FLAG, 1, (void *)0, &f2, 0);
			atomic_fetch_add_explicit(&requeues, 1, memory_order_relaxed);
		}
		nap.tv_nsec = 200000;	/* let it finish its wait */
		nanosleep(&nap, NULL);
	}
	return NULL;
}

/* takes the waiter's hash-bucket lock again and again from CPU1 */
static void *waker(void *arg)
{
	(void)arg;
	pin(1, SCHED_OTHER, 0);
	while (!atomic_load(&stop))
		futex(&f1, FUTEX_WAKE | FUTEX_PRIVATE_FLAG, 1, NULL, NULL, 0);
	return NULL;
}

/* preempts the waker at random moments, sometimes while it holds that lock */
static void *preempter(void *arg)
{
	unsigned seed = 2;

	(void)arg;
	if (pin(1, SCHED_FIFO, 5))
		return NULL;
	while (!atomic_load(&stop)) {
		struct timespec d = { 0, (20 + rand_r(&seed) % 200) * 1000 };
		unsigned long long until;

		nanosleep(&d, NULL);
		until = mono_ns() + 30000 + (unsigned)(rand_r(&seed) % 100) * 1000;
		while (mono_ns() < until)
			;
	}
	return NULL;
}

static int step(unsigned long long elapsed_ms, unsigned long long *count)
{
	*count = atomic_load(&waits);
	ksft_print_msg("progress count=%llu elapsed_ms=%llu requeues=%llu\n", *count, elapsed_ms,
		       atomic_load(&requeues));
	return atomic_load(&failed_errno);
}

static void usage(FILE *f)
{
	fprintf(f, "usage: futex-requeue-pi [--rounds N] [--duration S] [--timeout-us US] [--progress-ms MS]\n"
		"  --rounds N       stop after N timed-out waits\n"
		"  --duration S     stop after S seconds (default 30)\n"
		"  --timeout-us US  the waiter's timeout, varied from US/2 to 3*US/2 (default 200)\n"
		"  --burst-us US    how long the requeuer keeps at a waiter before it naps (default 5000)\n"
		"  --progress-ms MS progress line period (default 100)\n");
}

static int parse(int argc, char **argv, struct options *o)
{
	static const struct option longopts[] = {
		{ "rounds", required_argument, NULL, 'r' },
		{ "duration", required_argument, NULL, 'd' },
		{ "timeout-us", required_argument, NULL, 't' },
		{ "burst-us", required_argument, NULL, 'b' },
		{ "progress-ms", required_argument, NULL, 'P' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 }
	};
	int c;

	*o = (struct options){ .duration_ms = 30000, .progress_ms = 100, .timeout_us = 200, .burst_us = 5000 };
	while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		switch (c) {
		case 'r': o->target = strtoull(optarg, NULL, 0); break;
		case 'd': o->duration_ms = (unsigned long long)(strtod(optarg, NULL) * 1000); break;
		case 't': o->timeout_us = (unsigned)strtoul(optarg, NULL, 0); break;
		case 'b': o->burst_us = (unsigned)strtoul(optarg, NULL, 0); break;
		case 'P': o->progress_ms = strtoull(optarg, NULL, 0); break;
		case 'h': usage(stdout); exit(0);
		default: usage(stderr); return -1;
		}
	}
	if (o->timeout_us < 2 || o->progress_ms < 1 || o->burst_us < 1) {
		usage(stderr);
		return -1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	void *(*roles[])(void *) = { waiter, requeuer, waker, preempter };
	pthread_t t[4];
	unsigned long long elapsed_ms;
	int n = 0, err;

	if (parse(argc, argv, &opt))
		return 2;
	repro_start();
	ksft_print_msg("futex-requeue-pi: timeout_us=%u burst_us=%u duration_ms=%llu target=%llu\n", opt.timeout_us,
		       opt.burst_us, opt.duration_ms, opt.target);
	if (sysconf(_SC_NPROCESSORS_ONLN) < 2)
		ksft_exit_skip("futex-requeue-pi: needs two CPUs\n");
	if (pin(1, SCHED_OTHER, 0))	/* the main thread keeps off the real-time CPU */
		ksft_exit_skip("futex-requeue-pi: sched_setaffinity: %s\n", strerror(errno));
	atomic_store(&f2, (unsigned)gettid());	/* the PI futex is owned: requeues never take it */
	for (int i = 0; i < 4; i++)
		if (pthread_create(&t[n], NULL, roles[i], NULL) == 0)
			n++;
	elapsed_ms = repro_loop(opt.progress_ms, opt.duration_ms, opt.target, step);
	atomic_store(&stop, 1);
	for (int i = 0; i < n; i++)
		pthread_join(t[i], NULL);

	ksft_print_msg("result count=%llu elapsed_ms=%llu requeues=%llu\n", atomic_load(&waits), elapsed_ms,
		       atomic_load(&requeues));
	err = atomic_load(&failed_errno);
	if (err == EPERM)
		ksft_test_result_skip("futex-requeue-pi: SCHED_FIFO: %s\n", strerror(err));
	else if (err)
		ksft_test_result_skip("futex-requeue-pi: FUTEX_WAIT_REQUEUE_PI: %s\n", strerror(err));
	else
		ksft_test_result_pass("futex-requeue-pi\n");
	ksft_finished();
}
