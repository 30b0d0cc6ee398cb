// SPDX-License-Identifier: GPL-2.0
/* Sleeping hangs: the program's tasks watched for a D-state wait that does
 * not end, and any task the host asks about (TASKS). */
#include "agent.h"

/*
 * Sleeping hangs: a task of the reproducer's (its process group) that stays
 * in D state, in the same kernel wait, for sleep_after_s seconds is reported
 * once, with its wait channel and kernel stack:
 *   KSTALL dstate tid=T pid=P comm=C secs=S wchan=W kstack=F1,F2..
 * Sampled every 250 ms; a task whose stack changes between samples (I/O
 * that goes on) starts over.
 */
unsigned sleep_after_s;	/* 0: not watched (GO sleep=S) */
int watch_all;		/* env watch-all: every user process, not the program's group */

/* PF_KTHREAD in a /proc/PID/stat's flags; p points at its ')' */
int kernel_thread(const char *p)
{
	unsigned flags = 0;

	return sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %u", &flags) == 1 && (flags & 0x00200000);
}

struct dtask {
	int tid;
	unsigned long long since;
	unsigned long stack_hash;
	int reported;
	int seen;
};

static unsigned long hash_text(const char *s)
{
	unsigned long h = 5381;

	while (*s)
		h = h * 33 + (unsigned char)*s++;
	return h;
}

static struct dtask *dtask_slot(struct dtask *t, int n, int tid)
{
	struct dtask *free_slot = NULL;

	for (int i = 0; i < n; i++) {
		if (t[i].tid == tid)
			return &t[i];
		if (!t[i].tid && !free_slot)
			free_slot = &t[i];
	}
	if (free_slot)
		*free_slot = (struct dtask){ .tid = tid };
	return free_slot;
}

/* "KSTALL TAG tid=T pid=P comm=C state=S secs=S wchan=W kstack=F1,F2..": a task, as the
 * kernel shows it (stack: its /proc stack already read, or NULL) */
void say_task(const char *tag, const char *task_dir, const char *tid, int pid, unsigned long long secs,
		     char *stack)
{
	char path[384], stat[512], wchan[128], comm[64], own[2048], *p;

	if (!stack) {
		snprintf(path, sizeof(path), "%s/stack", task_dir);
		read_small(path, own, sizeof(own));
		stack = own;
	}
	snprintf(path, sizeof(path), "%s/stat", task_dir);
	read_small(path, stat, sizeof(stat));
	p = strrchr(stat, ')');
	snprintf(path, sizeof(path), "%s/wchan", task_dir);
	read_small(path, wchan, sizeof(wchan));
	snprintf(path, sizeof(path), "%s/comm", task_dir);
	read_small(path, comm, sizeof(comm));
	for (char *c = comm; *c; c++)
		if (*c == ' ' || *c == '=')
			*c = '_';
	flatten_stack(stack);
	say("KSTALL %s tid=%s pid=%d comm=%s state=%c secs=%llu wchan=%s kstack=%s", tag, tid, pid, comm,
	    p && p[1] && p[2] ? p[2] : '?', secs, wchan[0] ? wchan : "-", stack[0] ? stack : "-");
}

static void check_task(struct dtask *tasks, int n, int pid, const char *task_dir, const char *tid,
		       unsigned long long now)
{
	char path[384], stat[512], stack[2048], *p;
	struct dtask *slot;

	snprintf(path, sizeof(path), "%s/stat", task_dir);
	read_small(path, stat, sizeof(stat));
	p = strrchr(stat, ')');
	if (!p || !p[1] || p[2] != 'D')
		return;		/* not seen: forgotten after this pass */
	slot = dtask_slot(tasks, n, atoi(tid));
	if (!slot)
		return;
	snprintf(path, sizeof(path), "%s/stack", task_dir);
	read_small(path, stack, sizeof(stack));
	slot->seen = 1;
	if (slot->stack_hash != hash_text(stack) || !slot->since) {
		slot->stack_hash = hash_text(stack);
		slot->since = now;
		slot->reported = 0;
	}
	if (slot->reported || now - slot->since < sleep_after_s * 1000000000ULL)
		return;
	slot->reported = 1;
	say_task("dstate", task_dir, tid, pid, (now - slot->since) / 1000000000ULL, stack);
}

/* How long a task has not run: now, less the scheduler's clock when it last
 * ran (/proc/TID/sched's se.exec_start, in ms since boot, as CLOCK_MONOTONIC
 * counts: close enough for seconds); 0 when the kernel does not say. */
static unsigned long long idle_secs(const char *task_dir)
{
	char path[384], text[4096], *p;
	double ms;

	snprintf(path, sizeof(path), "%s/sched", task_dir);
	read_small(path, text, sizeof(text));
	p = strstr(text, "se.exec_start");
	if (!p || !(p = strchr(p, ':')) || sscanf(p + 1, "%lf", &ms) != 1 || ms * 1e6 > (double)mono_ns())
		return 0;
	return (mono_ns() - (unsigned long long)(ms * 1e6)) / 1000000000ULL;
}

/*
 * TASKS tid,tid,..: the host's wait-for graph (harness/analysis/task_waits.py)
 * found these tasks in its walk of the kernel's memory; their stacks, wait
 * channels and states, as the kernel shows them, then an end line:
 *   KSTALL task tid=T pid=0 comm=C state=S secs=S wchan=W kstack=F1,F2..
 *   KSTALL tasks-end
 */
void tasks_command(const char *arg)
{
	char list[2048], *tid, *save = NULL;
	int n = 0;

	snprintf(list, sizeof(list), "%s", arg);
	for (tid = strtok_r(list, ",", &save); tid && n < 256; tid = strtok_r(NULL, ",", &save), n++) {
		char task_dir[64];

		if (atoi(tid) <= 0)
			continue;
		snprintf(task_dir, sizeof(task_dir), "/proc/%d", atoi(tid));
		if (access(task_dir, F_OK) == 0)
			say_task("task", task_dir, tid, 0, idle_secs(task_dir), NULL);
	}
	say("KSTALL tasks-end");
}

void *sleep_watch(void *arg)
{
	static struct dtask tasks[256];
	char path[320], stat[512], *p;
	struct dirent *e, *te;

	(void)arg;
	while (!atomic_load(&hb_stop)) {
		int group = atomic_load(&repro_pid);
		unsigned long long now = mono_ns();
		DIR *d = group > 0 ? opendir("/proc") : NULL;

		for (int i = 0; i < 256; i++)
			tasks[i].seen = 0;
		while (d && (e = readdir(d))) {
			int pid = atoi(e->d_name);
			DIR *td;
			int pgrp = 0;

			if (pid <= 1)
				continue;
			snprintf(path, sizeof(path), "/proc/%d/stat", pid);
			read_small(path, stat, sizeof(stat));
			p = strrchr(stat, ')');
			/* ") S ppid pgrp ...": the reproducer's process group only, or
			 * every user process (env watch-all: a program whose children
			 * leave its group, as syzkaller's do with setpgrp) */
			if (!p || !p[1] || sscanf(p + 2, "%*c %*d %d", &pgrp) != 1 ||
			    (watch_all ? kernel_thread(p) : pgrp != group))
				continue;
			snprintf(path, sizeof(path), "/proc/%d/task", pid);
			td = opendir(path);
			while (td && (te = readdir(td))) {
				char task_dir[320];

				if (te->d_name[0] == '.')
					continue;
				snprintf(task_dir, sizeof(task_dir), "/proc/%d/task/%s", pid, te->d_name);
				check_task(tasks, 256, pid, task_dir, te->d_name, now);
			}
			if (td)
				closedir(td);
		}
		if (d)
			closedir(d);
		for (int i = 0; i < 256; i++)
			if (!tasks[i].seen)
				tasks[i] = (struct dtask){ 0 };
		usleep(250000);
	}
	return NULL;
}
