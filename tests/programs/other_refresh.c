// SPDX-License-Identifier: GPL-2.0
/*
 * A user's reproducer in another shape than repro/perf_refresh.c, for the
 * "your own reproducer" tests: one thread arms a cpu-clock event with
 * PERF_EVENT_IOC_REFRESH 1 and re-arms it from its own loop (the signal
 * handler only counts), while a second thread flips a page's protection so
 * the kernel sends TLB-shootdown IPIs. On a kernel with the REFRESH-to-zero
 * hrtimer self-deadlock the first overflow freezes the CPU; elsewhere it runs
 * for its seconds (argv[1], default 3) and exits 0. No kstall protocol: it
 * prints what a person would.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <linux/perf_event.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static atomic_ulong overflows;
static atomic_int done;

static void on_signal(int sig)
{
	(void)sig;
	atomic_fetch_add(&overflows, 1);
}

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void *flipper(void *arg)
{
	char *page = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	(void)arg;
	while (page != MAP_FAILED && !atomic_load(&done)) {
		page[0] = 1;
		mprotect(page, 4096, PROT_READ);
		mprotect(page, 4096, PROT_READ | PROT_WRITE);
		usleep(500);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	double seconds = argc > 1 ? atof(argv[1]) : 3, end;
	struct perf_event_attr attr = { .size = sizeof(attr), .type = PERF_TYPE_SOFTWARE,
					.config = PERF_COUNT_SW_CPU_CLOCK, .sample_period = 100000,
					.disabled = 1, .wakeup_events = 1 };
	struct f_owner_ex owner = { .type = F_OWNER_TID, .pid = gettid() };
	unsigned long armed = 0, seen = 0;
	pthread_t t;
	int fd;

	signal(SIGIO, on_signal);
	fd = syscall(SYS_perf_event_open, &attr, 0, -1, -1, 0);
	if (fd < 0 || fcntl(fd, F_SETFL, O_ASYNC) < 0 || fcntl(fd, F_SETOWN_EX, &owner) < 0) {
		perror("perf_event_open");
		return 4;	/* kselftest's skip: this kernel cannot run it */
	}
	pthread_create(&t, NULL, flipper, NULL);
	end = now() + seconds;
	while (now() < end) {
		if (armed == seen) {	/* the last arming has fired: again */
			ioctl(fd, PERF_EVENT_IOC_REFRESH, 1);
			armed++;
		}
		seen = atomic_load(&overflows) >= armed ? armed : seen;
	}
	atomic_store(&done, 1);
	pthread_join(t, NULL);
	printf("other-refresh: %lu refreshes in %.1f s, no hang\n", armed, seconds);
	return 0;
}
