// SPDX-License-Identifier: GPL-2.0
/* console-trigger: makes the kernel's own hang reporters speak, so that kstall
 * records and titles their console reports (tests/fixtures/consoles/). It is
 * no bug reproducer: it ends once the kernel has printed its report.
 *
 * Hung task: a writer faults on a userfaultfd page while it holds a pipe's
 * mutex; a second writer sleeps on that mutex in D state until the hung-task
 * detector reports it. Then the page is supplied and both writers finish.
 * Works on any kernel with USERFAULTFD.
 *
 * The other reports of the corpus (soft lockups, RCU stalls, CSD lock and
 * workqueue lockups) come from perf-refresh freezing an affected kernel.
 *
 * It watches /dev/kmsg for the report and prints TAP 13: the count is the
 * number of matching reports seen, --reports N of them ends the wait.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>

#include "repro.h"

#define PAGE 4096

static int pipe_fds[2];
static char *stalled_page;

static void write_sysctl(const char *path, const char *value)
{
	int fd = open(path, O_WRONLY);

	if (fd < 0 || write(fd, value, strlen(value)) < 0)
		ksft_print_msg("cannot set %s: %s\n", path, strerror(errno));
	if (fd >= 0)
		close(fd);
}

/* The next kernel message within 200 ms, NUL-terminated in rec; 0 if none. */
static int read_kmsg(int kmsg, char *rec, size_t size)
{
	struct pollfd p = { .fd = kmsg, .events = POLLIN };
	ssize_t n;

	if (poll(&p, 1, 200) <= 0)
		return 0;
	n = read(kmsg, rec, size - 1);
	if (n <= 0)
		return 0;
	rec[n] = 0;
	return 1;
}

/* Waits up to wait_s for want_reports kernel messages containing needle;
 * returns how many it saw. After the last one it also waits (up to 3 s) for
 * the end of that report's stack trace: the detector unwinds the blocked
 * task's stack while it prints, and a task let go meanwhile gets an
 * unreliable trace ("? " frames only) instead of where it slept. */
static unsigned long long want_reports = 1;

static unsigned long long await_kmsg(int kmsg, const char *needle, unsigned wait_s)
{
	unsigned long long start = mono_ns(), seen = 0, last = 0, done_at;
	char rec[8192];

	while (!atomic_load(&terminate) && mono_ns() - start < wait_s * 1000000000ull) {
		if (read_kmsg(kmsg, rec, sizeof(rec)) && strstr(rec, needle)) {
			seen++;
			ksft_print_msg("kernel: %.200s\n", strchr(rec, ';') ? strchr(rec, ';') + 1 : rec);
		}
		if (seen >= want_reports) {
			done_at = mono_ns();
			while (!atomic_load(&terminate) && mono_ns() - done_at < 3000000000ull)
				if (read_kmsg(kmsg, rec, sizeof(rec)) && strstr(rec, "</TASK>"))
					break;
			return seen;
		}
		if (mono_ns() - last > 1000000000ull) {
			last = mono_ns();
			ksft_print_msg("progress count=%llu elapsed_ms=%llu\n", seen, (last - start) / 1000000);
		}
	}
	return seen;
}

static int open_kmsg(void)
{
	int fd = open("/dev/kmsg", O_RDONLY | O_NONBLOCK);

	if (fd >= 0)
		lseek(fd, 0, SEEK_END);	/* only what comes from now on */
	return fd;
}

/* Holds the pipe's mutex while it waits, in handle_userfault, for a page. */
static void *faulting_writer(void *arg)
{
	(void)arg;
	pthread_setname_np(pthread_self(), "uffd-writer");
	if (write(pipe_fds[1], stalled_page, PAGE) < 0)
		ksft_print_msg("faulting writer: %s\n", strerror(errno));
	return NULL;
}

/* Sleeps in mutex_lock(&pipe->mutex): TASK_UNINTERRUPTIBLE, a hung task. */
static void *blocked_writer(void *arg)
{
	(void)arg;
	pthread_setname_np(pthread_self(), "blocked-writer");
	if (write(pipe_fds[1], "x", 1) < 0)
		ksft_print_msg("blocked writer: %s\n", strerror(errno));
	return NULL;
}

static void hung_task(unsigned timeout_s, unsigned wait_s, unsigned hold_s)
{
	struct uffdio_api api = { .api = UFFD_API };
	struct uffdio_register reg = { .mode = UFFDIO_REGISTER_MODE_MISSING };
	struct uffdio_copy copy = { 0 };
	char timeout[16], *src, drain[PAGE + 1];
	pthread_t a, b;
	unsigned long long seen;
	int uffd, kmsg;

	snprintf(timeout, sizeof(timeout), "%u", timeout_s);
	write_sysctl("/proc/sys/kernel/hung_task_timeout_secs", timeout);
	kmsg = open_kmsg();
	uffd = syscall(SYS_userfaultfd, O_CLOEXEC);
	if (kmsg < 0 || uffd < 0 || ioctl(uffd, UFFDIO_API, &api) < 0 || pipe(pipe_fds) < 0) {
		ksft_exit_skip("hung-task: no /dev/kmsg, userfaultfd or pipe: %s\n", strerror(errno));
	}
	stalled_page = mmap(NULL, PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	src = mmap(NULL, PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	reg.range.start = (unsigned long)stalled_page;
	reg.range.len = PAGE;
	if (stalled_page == MAP_FAILED || src == MAP_FAILED || ioctl(uffd, UFFDIO_REGISTER, &reg) < 0) {
		ksft_exit_skip("hung-task: userfaultfd register: %s\n", strerror(errno));
	}
	pthread_create(&a, NULL, faulting_writer, NULL);
	usleep(300000);	/* the first writer is in the fault, holding the mutex */
	pthread_create(&b, NULL, blocked_writer, NULL);
	ksft_print_msg("a writer sleeps on the pipe mutex; hung_task_timeout_secs=%u\n", timeout_s);
	seen = await_kmsg(kmsg, "blocked for more than", wait_s);
	/* the host reads who holds what the writer waits for as the report
	 * comes (task_waits.py): the hang stays that long, of guest time */
	if (seen && hold_s)
		ksft_print_msg("holding the hang %us more\n", hold_s);
	for (unsigned long long t0 = mono_ns(); seen && !atomic_load(&terminate) &&
	     mono_ns() - t0 < hold_s * 1000000000ull;)
		usleep(100000);

	memset(src, 'k', PAGE);
	copy.dst = (unsigned long)stalled_page;
	copy.src = (unsigned long)src;
	copy.len = PAGE;
	if (ioctl(uffd, UFFDIO_COPY, &copy) < 0)
		ksft_print_msg("UFFDIO_COPY: %s\n", strerror(errno));
	if (read(pipe_fds[0], drain, sizeof(drain)) < 0)
		ksft_print_msg("drain: %s\n", strerror(errno));
	pthread_join(a, NULL);
	pthread_join(b, NULL);
	ksft_print_msg("result count=%llu\n", seen);
	if (seen)
		ksft_test_result_pass("hung-task\n");
	else
		ksft_test_result_fail("hung-task: no hung-task report within %us\n", wait_s);
	ksft_finished();
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "timeout", required_argument, NULL, 't' },
		{ "wait", required_argument, NULL, 'w' },
		{ "reports", required_argument, NULL, 'r' },
		{ "hold", required_argument, NULL, 'H' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 }
	};
	unsigned timeout_s = 2, wait_s = 40, hold_s = 3;
	int c;

	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 't': timeout_s = strtoul(optarg, NULL, 0); break;
		case 'w': wait_s = strtoul(optarg, NULL, 0); break;
		case 'r': want_reports = strtoull(optarg, NULL, 0) ?: 1; break;
		case 'H': hold_s = strtoul(optarg, NULL, 0); break;
		default:
			dprintf(STDERR_FILENO, "usage: %s [--timeout S] [--wait S] [--reports N] [--hold S]\n"
				"  --timeout S  hung_task_timeout_secs for hung-task (default 2)\n"
				"  --wait S     how long to wait for the kernel's report (default 40)\n"
				"  --reports N  end the wait after N reports (default 1)\n"
				"  --hold S     keep the hang S seconds after the report, for the host's\n"
				"               wait-for graph (default 3)\n", argv[0]);
			return c == 'h' ? 0 : 2;
		}
	}
	repro_start();
	hung_task(timeout_s, wait_s, hold_s);
	return 0;	/* not reached: hung_task() exits through kselftest */
}
