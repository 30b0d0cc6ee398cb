// SPDX-License-Identifier: GPL-2.0
/*
 * Two threads take two mutexes in opposite orders and deadlock; a third
 * joins the first and so waits for it forever. For `kstall threads` on a
 * live process (tests/e2e/test_threads_deadlock.py). Prints "ready" once
 * both workers hold their first mutex, then blocks in the main thread.
 */
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>

static pthread_mutex_t a = PTHREAD_MUTEX_INITIALIZER, b = PTHREAD_MUTEX_INITIALIZER;
static pthread_barrier_t both_hold;

static void *first_a_then_b(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&a);
	pthread_barrier_wait(&both_hold);
	pthread_mutex_lock(&b);	/* held by the other: never */
	return NULL;
}

static void *first_b_then_a(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&b);
	pthread_barrier_wait(&both_hold);
	pthread_mutex_lock(&a);
	return NULL;
}

static void *joiner(void *arg)
{
	pthread_join(*(pthread_t *)arg, NULL);
	return NULL;
}

int main(void)
{
	pthread_t t1, t2, t3;

	pthread_barrier_init(&both_hold, NULL, 3);
	pthread_create(&t1, NULL, first_a_then_b, NULL);
	pthread_create(&t2, NULL, first_b_then_a, NULL);
	pthread_barrier_wait(&both_hold);
	pthread_create(&t3, NULL, joiner, &t1);
	usleep(200 * 1000);	/* let both reach their second lock */
	printf("ready\n");
	fflush(stdout);
	pthread_join(t3, NULL);
	return 0;
}
