/* SPDX-License-Identifier: GPL-2.0 */
/* KTAP v1 output and the progress line shared by kstall's reproducers.
 *
 * Reproducers print KTAP (Documentation/dev-tools/ktap.rst) on stdout so that
 * they read the same under kstall's agent, kselftest runners and a terminal.
 * Each line goes out with a single write(2): the agent forwards lines as they
 * come and a guest that freezes mid-line must not leave half a line behind.
 */
#ifndef KSTALL_KTAP_H
#define KSTALL_KTAP_H

#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static inline void ktap_line(const char *fmt, ...)
{
	char buf[512];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(buf, sizeof(buf) - 1, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if (n > (int)sizeof(buf) - 2)
		n = sizeof(buf) - 2;
	buf[n++] = '\n';
	if (write(STDOUT_FILENO, buf, n) < 0) {
		/* stdout gone: nothing left to report to */
	}
}

static inline void ktap_header(int tests)
{
	ktap_line("KTAP version 1");
	ktap_line("1..%d", tests);
}

static inline unsigned long long mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (unsigned long long)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

/* "# progress count=N": N is the reproducer's own count of times the buggy
 * path was exercised. The agent folds the latest value into its heartbeats
 * and the host uses it to tell a frozen reproducer from a busy one. */
static inline void ktap_progress(unsigned long long count, unsigned long long elapsed_ms)
{
	ktap_line("# progress count=%llu elapsed_ms=%llu", count, elapsed_ms);
}

/* SIGTERM (the agent's STOP) ends a reproducer early; it still prints its
 * final counters. Call ktap_handle_term() once in main(). */
static atomic_int terminate;

static inline void ktap_on_term(int sig)
{
	(void)sig;
	atomic_store(&terminate, 1);
}

static inline void ktap_handle_term(void)
{
	struct sigaction sa = { .sa_handler = ktap_on_term };

	sigemptyset(&sa.sa_mask);
	sigaction(SIGTERM, &sa, NULL);
}

#endif
