// SPDX-License-Identifier: GPL-2.0
/* perf-sigtrap: free a SIGTRAP perf event while its signal is still queued
 * as task work (CVE-2025-37747, "perf: Fix hang while freeing sigtrap event").
 *
 * A waiter thread opens a software context-switch event on itself with
 * sigtrap=1 and a period of 1, maps its ring buffer (without one, poll()
 * says POLLHUP at once) and sleeps in poll() on it. Going to sleep switches
 * it out, which overflows the event inside __schedule(), where interrupts
 * are off: the SIGTRAP is queued as task work (the event's pending_task).
 * While it sleeps, a closer thread on the other CPU closes the fd and
 * unmaps the buffer; the unmap wakes the poll, whose own reference is now
 * the event's last. Dropping it on the way out of poll() queues ____fput()
 * as task work after the SIGTRAP's, and task work runs newest first: the
 * event is freed before its SIGTRAP is sent. An affected kernel waits in
 * perf_pending_task_sync() for work that can only run after it, in D state
 * for ever; a fixed one holds a reference for the queued work and goes on.
 *
 * A pass is a round whose close landed while the waiter slept in poll():
 * the closer saw it asleep first ('S' in its /proc stat), and its poll came
 * back after the unmap (with POLLNVAL, as the fd is gone when it looks again).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <linux/perf_event.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "repro.h"

struct options {
	unsigned long long duration_ms;
	unsigned long long target;
	unsigned long long progress_ms;
	unsigned poll_ms;
};

static struct options opt;
static atomic_int stop;
static atomic_int failed_errno;
static atomic_ullong passes, rounds, sigtraps;
/* the round's fd and buffer, set by the waiter just before poll(); the
 * closer closes and unmaps them */
static atomic_int round_fd = -1;
static void *round_buf;
static atomic_int waiter_tid;
static atomic_int closed_asleep;	/* the closer saw the waiter asleep before it closed */
static atomic_ullong closed_ns;

/* one metadata page and one data page */
#define BUF_PAGES 2

static void on_sigtrap(int sig, siginfo_t *si, void *uc)
{
	(void)sig; (void)si; (void)uc;
	atomic_fetch_add_explicit(&sigtraps, 1, memory_order_relaxed);
}

static int open_sigtrap_event(void)
{
	struct perf_event_attr attr = {
		.type = PERF_TYPE_SOFTWARE,
		.size = sizeof(attr),
		.config = PERF_COUNT_SW_CONTEXT_SWITCHES,
		.sample_period = 1,
		.sigtrap = 1,
		.remove_on_exec = 1,	/* the kernel takes sigtrap only with it */
		/* the samples this writes must not wake the poll: only the unmap may */
		.watermark = 1,
		.wakeup_watermark = 1u << 30,
	};

	return (int)syscall(SYS_perf_event_open, &attr, 0, -1, -1, PERF_FLAG_FD_CLOEXEC);
}

static void *waiter(void *arg)
{
	long page = sysconf(_SC_PAGESIZE);

	(void)arg;
	repro_pin_cpu(0);
	atomic_store(&waiter_tid, gettid());
	while (!atomic_load(&stop)) {
		struct pollfd p = { .events = POLLIN };
		unsigned long long returned;
		int fd = open_sigtrap_event();
		void *buf;

		if (fd < 0) {
			atomic_store(&failed_errno, errno);
			break;
		}
		buf = mmap(NULL, BUF_PAGES * page, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		if (buf == MAP_FAILED) {
			atomic_store(&failed_errno, errno);
			close(fd);
			break;
		}
		p.fd = fd;
		round_buf = buf;
		atomic_store(&closed_asleep, 0);
		atomic_store(&closed_ns, 0);
		atomic_store(&round_fd, fd);
		poll(&p, 1, (int)opt.poll_ms);
		returned = mono_ns();
		/* the closer owns the fd and the buffer now; wait for it before
		 * the next open can take the same number */
		while (atomic_load(&round_fd) >= 0 && !atomic_load(&stop))
			sched_yield();
		if (atomic_load(&closed_asleep) && atomic_load(&closed_ns) < returned)
			atomic_fetch_add(&passes, 1);
		atomic_fetch_add(&rounds, 1);
	}
	return NULL;
}

/* the waiter's scheduler state, from /proc: 'S' while it sleeps in poll() */
static char waiter_state(void)
{
	char path[64], stat[256], *p;
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/proc/self/task/%d/stat", atomic_load(&waiter_tid));
	fd = open(path, O_RDONLY);
	if (fd < 0)
		return '?';
	n = read(fd, stat, sizeof(stat) - 1);
	close(fd);
	stat[n > 0 ? n : 0] = 0;
	p = strrchr(stat, ')');
	return p && p[1] && p[2] ? p[2] : '?';
}

static void *closer(void *arg)
{
	struct timespec wait = { 0, 50 * 1000 };
	long page = sysconf(_SC_PAGESIZE);

	(void)arg;
	repro_pin_cpu(1);
	while (!atomic_load(&stop)) {
		int fd = atomic_load(&round_fd), asleep = 0;

		if (fd < 0) {
			sched_yield();
			continue;
		}
		/* until the waiter sleeps in poll(), or its timeout is near */
		for (unsigned i = 0; i < opt.poll_ms * 10 && !(asleep = waiter_state() == 'S'); i++)
			nanosleep(&wait, NULL);
		atomic_store(&closed_asleep, asleep);
		close(fd);
		munmap(round_buf, BUF_PAGES * page);	/* wakes the poll */
		atomic_store(&closed_ns, mono_ns());
		atomic_store(&round_fd, -1);
	}
	return NULL;
}

static int step(unsigned long long elapsed_ms, unsigned long long *count)
{
	*count = atomic_load(&passes);
	ksft_print_msg("progress count=%llu elapsed_ms=%llu\n", *count, elapsed_ms);
	return atomic_load(&failed_errno);
}

static void usage(FILE *f)
{
	fprintf(f, "usage: perf-sigtrap [--rounds N] [--duration S] [--poll-ms MS] [--progress-ms MS]\n"
		"  --rounds N       stop after N closes that landed while the waiter slept in poll()\n"
		"  --duration S     stop after S seconds (default 30)\n"
		"  --poll-ms MS     the waiter's poll() timeout (default 20)\n"
		"  --progress-ms MS progress line period (default 100)\n");
}

static int parse(int argc, char **argv, struct options *o)
{
	static const struct option longopts[] = {
		{ "rounds", required_argument, NULL, 'r' },
		{ "duration", required_argument, NULL, 'd' },
		{ "poll-ms", required_argument, NULL, 'p' },
		{ "progress-ms", required_argument, NULL, 'P' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 }
	};
	int c;

	*o = (struct options){ .duration_ms = 30000, .progress_ms = 100, .poll_ms = 20 };
	while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		switch (c) {
		case 'r': o->target = strtoull(optarg, NULL, 0); break;
		case 'd': o->duration_ms = (unsigned long long)(strtod(optarg, NULL) * 1000); break;
		case 'p': o->poll_ms = (unsigned)strtoul(optarg, NULL, 0); break;
		case 'P': o->progress_ms = strtoull(optarg, NULL, 0); break;
		case 'h': usage(stdout); exit(0);
		default: usage(stderr); return -1;
		}
	}
	if (o->poll_ms < 1 || o->progress_ms < 1) {
		usage(stderr);
		return -1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct sigaction sa = { .sa_sigaction = on_sigtrap, .sa_flags = SA_SIGINFO | SA_RESTART };
	unsigned long long elapsed_ms;
	pthread_t w, c;
	int probe, err;

	if (parse(argc, argv, &opt))
		return 2;
	repro_start();
	ksft_print_msg("perf-sigtrap: poll_ms=%u duration_ms=%llu target=%llu\n", opt.poll_ms, opt.duration_ms,
		       opt.target);
	if (sysconf(_SC_NPROCESSORS_ONLN) < 2)
		ksft_exit_skip("perf-sigtrap: needs two CPUs, one to sleep and one to close\n");
	sigemptyset(&sa.sa_mask);
	sigaction(SIGTRAP, &sa, NULL);
	/* kept open for the whole run: the static keys behind context-switch
	 * events stay on, so the kernel does not patch its text at each round's
	 * open and close (under TCG that patching can oops, and is slow) */
	probe = open_sigtrap_event();
	if (probe < 0)
		ksft_exit_skip("perf-sigtrap: perf_event_open(sigtrap): %s\n", strerror(errno));
	pthread_create(&c, NULL, closer, NULL);
	pthread_create(&w, NULL, waiter, NULL);
	elapsed_ms = repro_loop(opt.progress_ms, opt.duration_ms, opt.target, step);
	atomic_store(&stop, 1);
	pthread_join(w, NULL);
	pthread_join(c, NULL);
	close(probe);

	ksft_print_msg("result count=%llu elapsed_ms=%llu rounds=%llu sigtraps=%llu\n", atomic_load(&passes),
		       elapsed_ms, atomic_load(&rounds), atomic_load(&sigtraps));
	err = atomic_load(&failed_errno);
	if (err)
		ksft_test_result_skip("perf-sigtrap: perf_event_open: %s\n", strerror(err));
	else
		ksft_test_result_pass("perf-sigtrap\n");
	ksft_finished();
}
