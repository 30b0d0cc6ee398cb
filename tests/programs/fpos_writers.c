// SPDX-License-Identifier: GPL-2.0
/*
 * Two writers through one open file, for the wait-for graph's tests: the
 * first faults on a userfaultfd page nobody supplies while it holds the
 * file's f_pos_lock (a mutex, taken in fdget_pos because threads share the
 * file), the second sleeps on that mutex in D state for good. On 6.1 the
 * word before f_pos_lock in struct file and the mutex's own owner word,
 * read as an rwsem's, once made "an rwsem held by 34635136368768
 * readers". No kstall protocol; exits 4 without userfaultfd.
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

static int fd;
static char *missing;

static void *faulting_writer(void *arg)
{
	(void)arg;
	if (write(fd, missing, PAGE) < 0)	/* faults with the file's f_pos_lock held */
		perror("faulting writer");
	return NULL;
}

static void *blocked_writer(void *arg)
{
	(void)arg;
	if (write(fd, "x", 1) < 0)	/* sleeps in fdget_pos, on f_pos_lock */
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
	fd = open("/tmp/fpos-writers", O_RDWR | O_CREAT | O_TRUNC, 0600);
	if (uffd < 0 || ioctl(uffd, UFFDIO_API, &api) < 0 || missing == MAP_FAILED ||
	    ioctl(uffd, UFFDIO_REGISTER, &reg) < 0 || fd < 0) {
		printf("no userfaultfd here: %s\n", strerror(errno));
		return 4;
	}
	pthread_create(&a, NULL, faulting_writer, NULL);
	usleep(300000);
	pthread_create(&b, NULL, blocked_writer, NULL);
	printf("two writers started; the second waits for the first's f_pos_lock\n");
	fflush(stdout);
	pthread_join(b, NULL);	/* never */
	printf("the blocked writer came back\n");
	return 0;
}
