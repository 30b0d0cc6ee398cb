/* SPDX-License-Identifier: GPL-2.0 */
/* What kstall's reproducers share, on top of the kernel's kselftest.h.
 *
 * They print TAP 13 exactly as kselftest.h prints it, so they run the same
 * under kstall's agent, the kselftest runner and a terminal. kselftest.h
 * makes stdout line buffered: each line leaves in one write(2), and a guest
 * that freezes mid-run leaves no half line behind. Print from the main thread
 * only (ksft_print_msg writes a line in two stdio calls).
 *
 * kstall reads two diagnostics of its own: "# progress count=N elapsed_ms=M"
 * while a reproducer runs (N: passes over the buggy path so far; the agent
 * folds it into its heartbeats and the host tells a frozen reproducer from a
 * busy one by it) and "# result count=N ..." once it is done.
 */
#ifndef KSTALL_REPRO_H
#define KSTALL_REPRO_H

#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <time.h>

#include "kselftest.h"

static inline unsigned long long mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (unsigned long long)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

/* Pins the calling thread to one CPU (the reproducers define _GNU_SOURCE);
 * 0 or an errno. */
static inline int repro_pin_cpu(int cpu)
{
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	return pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
}

/* SIGTERM (the agent's STOP) ends a run early; the reproducer still prints
 * its final counters. */
static atomic_int terminate;

static inline void repro_on_term(int sig)
{
	(void)sig;
	atomic_store(&terminate, 1);
}

/* The TAP header and plan of a one-test reproducer, and SIGTERM handling. */
static inline void repro_start(void)
{
	struct sigaction sa = { .sa_handler = repro_on_term };

	ksft_print_header();
	ksft_set_plan(1);
	sigemptyset(&sa.sa_mask);
	sigaction(SIGTERM, &sa, NULL);
}

/* The main loop every reproducer runs while its threads work: every
 * progress_ms, step(elapsed_ms, &count) prints the progress line and sets
 * the count; the loop ends when step returns non-zero (the reproducer
 * failed), at the target count (0: none), after duration_ms or on SIGTERM.
 * Returns the elapsed milliseconds. */
static inline unsigned long long repro_loop(unsigned long long progress_ms, unsigned long long duration_ms,
					    unsigned long long target,
					    int (*step)(unsigned long long elapsed_ms, unsigned long long *count))
{
	struct timespec tick = { progress_ms / 1000, (progress_ms % 1000) * 1000000 };
	unsigned long long start = mono_ns(), elapsed_ms, count = 0;

	for (;;) {
		nanosleep(&tick, NULL);
		elapsed_ms = (mono_ns() - start) / 1000000;
		if (step(elapsed_ms, &count) || elapsed_ms >= duration_ms || (target && count >= target) ||
		    atomic_load(&terminate))
			return elapsed_ms;
	}
}

#endif
