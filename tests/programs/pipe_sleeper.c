// SPDX-License-Identifier: GPL-2.0
/*
 * A user's program that makes a sleeping hang, for the "your own reproducer"
 * tests: one writer faults on a userfaultfd page nobody ever supplies while
 * it holds a pipe's mutex (inside write()), and a second writer sleeps on
 * that mutex in D state for good. The kernel stays alive; only these tasks
 * never come back. No kstall protocol: it prints what a person would, and
 * exits 4 (kselftest's skip) on a kernel without userfaultfd.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#define PAGE 4096

static int fds[2];
static char *missing;

static void *faulting_writer(void *arg)
{
	(void)arg;
	if (write(fds[1], missing, PAGE) < 0)	/* faults with the pipe's mutex held */
		perror("faulting writer");
	return NULL;
}

static void *blocked_writer(void *arg)
{
	(void)arg;
	if (write(fds[1], "x", 1) < 0)	/* sleeps in mutex_lock(&pipe->mutex) */
		perror("blocked writer");
	return NULL;
}

int main(void)
{
	struct uffdio_api api = { .api = UFFD_API };
	struct uffdio_register reg = { .mode = UFFDIO_REGISTER_MODE_MISSING };
	int uffd = syscall(SYS_userfaultfd, O_CLOEXEC);
	pthread_t a, b;

	missing = mmap(NULL, PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	reg.range.start = (unsigned long)missing;
	reg.range.len = PAGE;
	if (uffd < 0 || ioctl(uffd, UFFDIO_API, &api) < 0 || missing == MAP_FAILED ||
	    ioctl(uffd, UFFDIO_REGISTER, &reg) < 0 || pipe(fds) < 0) {
		printf("no userfaultfd here: %s\n", strerror(errno));
		return 4;
	}
	pthread_create(&a, NULL, faulting_writer, NULL);
	usleep(300000);
	pthread_create(&b, NULL, blocked_writer, NULL);
	printf("two writers started; the second waits for the first's pipe mutex\n");
	fflush(stdout);
	pthread_join(b, NULL);	/* never */
	printf("the blocked writer came back\n");
	return 0;
}
