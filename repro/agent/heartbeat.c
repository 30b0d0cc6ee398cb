// SPDX-License-Identifier: GPL-2.0
/* The heartbeat (guest time and the progress count, 20 times a second), and
 * what a GO brings that a restored guest cannot have had: a fresh RNG seed, the time. */
#include "agent.h"

atomic_ullong progress_count;
atomic_int hb_stop;
unsigned hb_ms = 50;

void *heartbeat(void *arg)
{
	struct sched_param sp = { .sched_priority = 50 };
	struct timespec next;
	unsigned long long seq = 0;

	(void)arg;
	/* above the reproducer's spinning threads: silence must mean a frozen
	 * kernel, not a starved heartbeat */
	pthread_setschedparam(pthread_self(), SCHED_FIFO, &sp);
	clock_gettime(CLOCK_MONOTONIC, &next);
	while (!atomic_load(&hb_stop)) {
		say("HB %llu %llu %llu", seq++, mono_ns(), (unsigned long long)atomic_load(&progress_count));
		next.tv_nsec += hb_ms * 1000000L;
		while (next.tv_nsec >= 1000000000L) {
			next.tv_nsec -= 1000000000L;
			next.tv_sec++;
		}
		clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, NULL);
	}
	return NULL;
}

/* a guest restored from a snapshot shares its RNG state and its clock with
 * every other guest restored from it: the host's GO brings fresh ones */
void apply_go(void)
{
	char val[160];
	unsigned char seed[64];
	size_t n = 0;

	if (cmdline_get(go_line, "seed", val, sizeof(val))) {
		for (; n < sizeof(seed) && sscanf(val + 2 * n, "%2hhx", &seed[n]) == 1; n++)
			;
		int fd = open("/dev/urandom", O_WRONLY | O_CLOEXEC);

		if (fd >= 0) {
			say_fd(fd, (const char *)seed, n);
			if (ioctl(fd, RNDRESEEDCRNG) < 0)
				say("# kstall-agent: RNDRESEEDCRNG: %s", strerror(errno));
			close(fd);
		}
	}
	if (cmdline_get(go_line, "time", val, sizeof(val))) {
		struct timespec ts = { 0 };
		char *dot;

		ts.tv_sec = strtoll(val, &dot, 10);
		if (*dot == '.')
			ts.tv_nsec = strtol(dot + 1, NULL, 10);
		if (clock_settime(CLOCK_REALTIME, &ts) < 0)
			say("# kstall-agent: clock_settime: %s", strerror(errno));
	}
}
