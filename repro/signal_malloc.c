// SPDX-License-Identifier: GPL-2.0
/* signal-malloc: a profiler's SIGPROF handler that allocates (user space).
 *
 * Worker threads churn allocations. Each has its own CPU-time profiling timer
 * (timer_create(CLOCK_THREAD_CPUTIME_ID) + SIGEV_THREAD_ID, SIGPROF at --hz),
 * the way continuous profilers sample. The handler takes a "sample" by
 * allocating a record, writing the interrupted pc into it and freeing it.
 * When the signal lands while the interrupted thread holds the allocator's
 * lock, the handler waits for that lock in the same thread, forever, and every
 * thread that later needs the allocator queues behind it on the same futex
 * word. The kernel stays healthy: only this process stops making progress.
 *
 * Which allocation: the sample record is --sample-bytes (default 64 KiB, a
 * record of 8192 frame addresses). That is above what the per-thread caches
 * serve without a lock (glibc's tcache: up to 1032 bytes; jemalloc 5.3's
 * tcache: up to 32 KiB) and below glibc's mmap threshold (128 KiB), so both
 * allocators take an arena lock for it, as a real profiler's larger
 * allocations do. The workers allocate a mix of sizes, some of them above
 * those caches too, so they hold that lock often.
 *
 * One arena (glibc M_ARENA_MAX=1, jemalloc narenas:1): a service with more
 * threads than arenas shares them; here every worker queues on the one lock.
 * jemalloc also runs without its thread cache (see malloc_conf below).
 *
 * --safe is the fixed profiler: the handler writes into a buffer allocated
 * per thread before its timer starts and never allocates.
 *
 * --allocator glibc|jemalloc: the jemalloc build is a second binary from this
 * source (signal-malloc-jemalloc, linked with Debian's static libjemalloc);
 * each binary execs the other when asked for the allocator it does not have.
 *
 * Progress count: completed allocations (malloc + free pairs by workers).
 * The process makes itself dumpable with no core size limit, so that the
 * kstall agent can have the kernel dump it when it is stuck.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <ucontext.h>

#ifdef KSTALL_JEMALLOC
#define ALLOCATOR "jemalloc"
#define OTHER_ALLOCATOR "glibc"
#define OTHER_BINARY "signal-malloc"
/* read by jemalloc at its first allocation. No thread cache: re-entered from
 * the handler in the middle of a cache flush, jemalloc's tcache corrupts and
 * the process crashes (measured: SIGSEGV in tcache_bin_flush in 1 of 5 runs)
 * instead of showing the lock self-deadlock this reproducer is about. */
const char *malloc_conf = "narenas:1,tcache:false";
#else
#include <malloc.h>
#define ALLOCATOR "glibc"
#define OTHER_ALLOCATOR "jemalloc"
#define OTHER_BINARY "signal-malloc-jemalloc"
#endif

#include "repro.h"

#ifndef sigev_notify_thread_id	/* glibc before 2.35 names it only in the union */
#define sigev_notify_thread_id _sigev_un._tid
#endif

#define MAX_THREADS 64
#define LIVE_SLOTS 16

struct options {
	int threads;
	unsigned hz;
	size_t sample_bytes;
	int safe;
	unsigned long long duration_ms;
	unsigned long long target;
	unsigned long long progress_ms;
	const char *allocator;
};

static struct options opt;
static atomic_ullong allocs;	/* completed allocations: the progress count */
static atomic_ullong samples;	/* SIGPROF samples taken */
static atomic_ullong in_alloc_samples;	/* ... of them landing inside the allocator */
static atomic_int started, stop, failed_errno;
static __thread volatile sig_atomic_t in_alloc;
static __thread uintptr_t *safe_buf;	/* --safe: the preallocated sample record */

/* worker allocation sizes: most under the caches, some above them */
static const size_t sizes[] = { 24, 64, 200, 512, 2048, 8192, 40000, 100000 };

/* the interrupted pc, as a profiler's sample records it */
static uintptr_t interrupted_pc(const ucontext_t *uc)
{
#if defined(__x86_64__)
	return uc->uc_mcontext.gregs[REG_RIP];
#elif defined(__aarch64__)
	return uc->uc_mcontext.pc;
#else
	(void)uc;
	return 0;
#endif
}

static void on_sigprof(int sig, siginfo_t *si, void *ucv)
{
	uintptr_t pc = interrupted_pc(ucv);
	int saved = errno;
	uintptr_t *rec;

	(void)sig;
	(void)si;
	if (in_alloc)
		atomic_fetch_add_explicit(&in_alloc_samples, 1, memory_order_relaxed);
	if (opt.safe) {
		rec = safe_buf;
		rec[0] = pc;
	} else {
		/* the bug: an allocation in a signal handler */
		rec = malloc(opt.sample_bytes);
		if (rec) {
			rec[0] = pc;
			rec[opt.sample_bytes / sizeof(*rec) - 1] = pc;
			free(rec);
		}
	}
	atomic_fetch_add_explicit(&samples, 1, memory_order_relaxed);
	errno = saved;
}

static int start_profiling_timer(timer_t *timer)
{
	struct sigevent sev = { .sigev_notify = SIGEV_THREAD_ID, .sigev_signo = SIGPROF };
	long period_ns = 1000000000L / opt.hz;
	struct itimerspec its = { .it_interval = { period_ns / 1000000000L, period_ns % 1000000000L },
				  .it_value = { period_ns / 1000000000L, period_ns % 1000000000L } };

	sev.sigev_notify_thread_id = gettid();
	if (timer_create(CLOCK_THREAD_CPUTIME_ID, &sev, timer) || timer_settime(*timer, 0, &its, NULL))
		return -errno;
	return 0;
}

static void *worker(void *arg)
{
	void *live[LIVE_SLOTS] = { 0 };
	unsigned long i = (uintptr_t)arg * 7;
	char name[16];
	timer_t timer;
	int err;

	snprintf(name, sizeof(name), "worker-%lu", (unsigned long)(uintptr_t)arg);
	prctl(PR_SET_NAME, name);
	/* the allocator sets up its per-thread state (glibc's tcache, jemalloc's
	 * tsd) at a thread's first allocation: done before the timer starts, as
	 * in a long-running service (jemalloc crashes when a handler allocates
	 * in the middle of it) */
	free(malloc(1));
	if (opt.safe && !(safe_buf = malloc(opt.sample_bytes))) {
		atomic_store(&failed_errno, ENOMEM);
		return NULL;
	}
	while (!atomic_load(&started))
		sched_yield();
	err = start_profiling_timer(&timer);
	if (err) {
		atomic_store(&failed_errno, -err);
		return NULL;
	}
	while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
		size_t slot = i % LIVE_SLOTS, size = sizes[(i * 2654435761u >> 7) % (sizeof(sizes) / sizeof(*sizes))];
		char *p;

		in_alloc = 1;
		free(live[slot]);
		p = malloc(size);
		in_alloc = 0;
		if (p) {
			p[0] = (char)i;
			p[size - 1] = (char)i;
		}
		live[slot] = p;
		i++;
		atomic_fetch_add_explicit(&allocs, 1, memory_order_relaxed);
	}
	timer_delete(timer);
	for (int s = 0; s < LIVE_SLOTS; s++)
		free(live[s]);
	free(safe_buf);
	return NULL;
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: signal-malloc [options]\n"
		"  --threads N          worker threads (default 4, at most %d)\n"
		"  --hz N               SIGPROF samples per second of each thread's CPU time (default 1000)\n"
		"  --sample-bytes N     the handler's sample record (default 65536)\n"
		"  --safe               the fixed profiler: preallocated record, no allocation in the handler\n"
		"  --allocator NAME     glibc or jemalloc (default: this binary's, " ALLOCATOR ")\n"
		"  --duration S         stop after S seconds (default 30)\n"
		"  --allocs N           stop once N allocations completed (default: no limit)\n"
		"  --progress-ms MS     progress line interval (default 100)\n", MAX_THREADS);
}

static int parse(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "threads", required_argument, NULL, 't' }, { "hz", required_argument, NULL, 'z' },
		{ "sample-bytes", required_argument, NULL, 's' }, { "safe", no_argument, NULL, 'S' },
		{ "allocator", required_argument, NULL, 'a' }, { "duration", required_argument, NULL, 'd' },
		{ "allocs", required_argument, NULL, 'c' }, { "progress-ms", required_argument, NULL, 'P' },
		{ "help", no_argument, NULL, 'h' }, { 0 }
	};
	int c;

	opt = (struct options){ .threads = 4, .hz = 1000, .sample_bytes = 65536, .duration_ms = 30000,
				.progress_ms = 100, .allocator = ALLOCATOR };
	while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		switch (c) {
		case 't': opt.threads = atoi(optarg); break;
		case 'z': opt.hz = strtoul(optarg, NULL, 0); break;
		case 's': opt.sample_bytes = strtoull(optarg, NULL, 0); break;
		case 'S': opt.safe = 1; break;
		case 'a': opt.allocator = optarg; break;
		case 'd': opt.duration_ms = (unsigned long long)(strtod(optarg, NULL) * 1000); break;
		case 'c': opt.target = strtoull(optarg, NULL, 0); break;
		case 'P': opt.progress_ms = strtoull(optarg, NULL, 0); break;
		case 'h': usage(stdout); exit(0);
		default: usage(stderr); return -1;
		}
	}
	if (opt.threads < 1 || opt.threads > MAX_THREADS || opt.hz < 1 || opt.hz > 100000 ||
	    opt.sample_bytes < 2 * sizeof(uintptr_t) || opt.progress_ms < 1 ||
	    (strcmp(opt.allocator, "glibc") && strcmp(opt.allocator, "jemalloc"))) {
		usage(stderr);
		return -1;
	}
	return 0;
}

/* --allocator names the other build: run that binary, from beside this one */
static void exec_other_allocator(char **argv)
{
	char exe[PATH_MAX], *slash;
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - sizeof(OTHER_BINARY) - 1);

	if (n > 0) {
		exe[n] = 0;
		slash = strrchr(exe, '/');
		strcpy(slash ? slash + 1 : exe, OTHER_BINARY);
		execv(exe, argv);
	}
	repro_start();
	ksft_exit_skip("signal-malloc: allocator %s: no %s beside this binary (%s)\n", OTHER_ALLOCATOR,
		       OTHER_BINARY, strerror(errno));
}

static int step(unsigned long long elapsed_ms, unsigned long long *count)
{
	*count = atomic_load(&allocs);
	ksft_print_msg("progress count=%llu elapsed_ms=%llu samples=%llu in_alloc_samples=%llu\n", *count,
		       elapsed_ms, (unsigned long long)atomic_load(&samples),
		       (unsigned long long)atomic_load(&in_alloc_samples));
	return atomic_load(&failed_errno);
}

int main(int argc, char **argv)
{
	struct sigaction sa = { .sa_sigaction = on_sigprof, .sa_flags = SA_SIGINFO | SA_RESTART };
	struct rlimit core = { RLIM_INFINITY, RLIM_INFINITY };
	pthread_attr_t attr;
	pthread_t tids[MAX_THREADS];
	unsigned long long elapsed_ms;
	int n = 0, err;

	if (parse(argc, argv))
		return 2;
	if (strcmp(opt.allocator, ALLOCATOR))
		exec_other_allocator(argv);
	if (setrlimit(RLIMIT_CORE, &core))
		getrlimit(RLIMIT_CORE, &core);
	prctl(PR_SET_DUMPABLE, 1);
#ifndef KSTALL_JEMALLOC
	mallopt(M_ARENA_MAX, 1);
#endif
	/* the first line allocates stdout's buffer: before any timer runs */
	repro_start();
	ksft_print_msg("signal-malloc: allocator=%s threads=%d hz=%u sample_bytes=%zu safe=%d duration_ms=%llu "
		       "target=%llu pid=%d\n", ALLOCATOR, opt.threads, opt.hz, opt.sample_bytes, opt.safe,
		       opt.duration_ms, opt.target, getpid());
	sigemptyset(&sa.sa_mask);
	sigaction(SIGPROF, &sa, NULL);

	/* small stacks keep the core small (the kernel writes untouched stack
	 * pages into a piped core as zeros) */
	pthread_attr_init(&attr);
	pthread_attr_setstacksize(&attr, 256 << 10);
	for (int i = 0; i < opt.threads; i++)
		if (pthread_create(&tids[n], &attr, worker, (void *)(uintptr_t)i) == 0)
			n++;
	/* from here on the main thread never allocates: its progress lines must
	 * not queue on the allocator they report on */
	atomic_store(&started, 1);
	elapsed_ms = repro_loop(opt.progress_ms, opt.duration_ms, opt.target, step);
	atomic_store(&stop, 1);
	for (int i = 0; i < n; i++)
		pthread_join(tids[i], NULL);
	ksft_print_msg("result count=%llu elapsed_ms=%llu samples=%llu in_alloc_samples=%llu core_limit=%s\n",
		       (unsigned long long)atomic_load(&allocs), elapsed_ms, (unsigned long long)atomic_load(&samples),
		       (unsigned long long)atomic_load(&in_alloc_samples),
		       core.rlim_cur == RLIM_INFINITY ? "unlimited" : "limited");
	err = atomic_load(&failed_errno);
	if (err)
		ksft_test_result_skip("signal-malloc: profiling timer: %s\n", strerror(err));
	else
		ksft_test_result_pass("signal-malloc\n");
	ksft_finished();
}
