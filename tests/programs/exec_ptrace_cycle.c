// SPDX-License-Identifier: GPL-2.0
/*
 * A deadlock among sleeping tasks that user space drives, on every kernel
 * kstall runs (tests/e2e/test_wait_graph.py): the one the kernel's own
 * selftest tools/testing/selftests/ptrace/vmaccess.c ("attach") describes.
 *
 *   - the child's second thread asks to be traced by the parent
 *     (PTRACE_TRACEME) and exits: a traced thread stays a zombie until its
 *     tracer reaps it;
 *   - the child execs: de_thread (in begin_new_exec) holds the process's
 *     cred_guard_mutex and sleeps until every other thread is released,
 *     the zombie too;
 *   - the parent, the zombie's tracer, attaches to the child: ptrace_attach
 *     sleeps on that cred_guard_mutex, and so never reaps the zombie.
 *
 * The parent waits on a lock the exec holds, the exec on a thread the parent
 * must reap. Nothing ends it but a signal. It prints "attaching" just before.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/ptrace.h>
#include <unistd.h>

static void *traced_thread(void *arg)
{
	(void)arg;
	ptrace(PTRACE_TRACEME, 0, 0L, 0L);
	return NULL;
}

int main(int argc, char **argv)
{
	pid_t pid;

	if (argc > 1 && !strcmp(argv[1], "--execd"))
		return 0;
	pid = fork();
	if (pid < 0)
		return 1;
	if (!pid) {
		pthread_t t;

		pthread_create(&t, NULL, traced_thread, NULL);
		pthread_join(t, NULL);
		execl("/proc/self/exe", argv[0], "--execd", (char *)NULL);
		return 1;
	}
	sleep(1);	/* the child is in de_thread by then */
	printf("attaching to %d\n", pid);
	fflush(stdout);
	if (ptrace(PTRACE_ATTACH, pid, 0L, 0L) < 0)
		printf("attach: %s\n", strerror(errno));
	printf("attached: this kernel does not deadlock here\n");
	return 0;
}
