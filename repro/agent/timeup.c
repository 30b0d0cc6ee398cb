// SPDX-License-Identifier: GPL-2.0
/* When a time box's time is up: not while the host holds the kill (HOLD,
 * a kernel report it follows may yet be a hang), nor, for detect_s, while
 * a thread asleep in D state then sleeps on, so that the kernel's hung-task
 * detector reports it before its holder's death could free it. */
#include "agent.h"

/* the host's HOLD S: no time-up kill before then (mono_ns); the host holds
 * it while a kernel report it follows may yet be a hang */
static atomic_ullong hold_until;
/* a time box's wait for the kernel's detectors (GO detect=S): a user thread
 * asleep in D state when the time is up keeps the kill off this long, while
 * it sleeps on, so that the kernel's hung-task detector reports it first */
unsigned detect_s;

/* the host's HOLD S */
void hold_command(const char *arg)
{
	unsigned long long s = strtoull(arg, NULL, 10);

	atomic_store(&hold_until, mono_ns() + s * 1000000000ULL);
	say("KSTALL hold s=%llu", s);	/* the run's record of when its end was held */
}

/* whether the host holds the run's end now (its leases are 30 s at most) */
int held(void)
{
	return mono_ns() < atomic_load(&hold_until);
}

/* the user threads asleep in D state at the time-up, by tid and how often
 * they had been switched: one switched since, or gone, is asleep no longer */
#define MAX_ASLEEP 256
static struct { int tid; unsigned long long switches; int seen; } asleep[MAX_ASLEEP];
static int n_asleep;

static unsigned long long switches_of(const char *task_dir)
{
	char path[384], status[4096], *p;
	unsigned long long n = 0;

	snprintf(path, sizeof(path), "%s/status", task_dir);
	read_small(path, status, sizeof(status));
	for (p = status; (p = strstr(p, "ctxt_switches:")); p += 14)
		n += strtoull(p + 14, NULL, 10);
	return n;
}

/* first: note every thread in D state; later: keep those still there, unswitched */
static void walk_asleep(int first)
{
	DIR *d = opendir("/proc");
	struct dirent *e;

	for (int i = 0; i < n_asleep; i++)
		asleep[i].seen = 0;
	while (d && (e = readdir(d))) {
		char path[384], task_dir[300], stat[512], *p;
		int pid = atoi(e->d_name);
		struct dirent *t;
		DIR *td;

		if (pid <= 1 || pid == getpid())
			continue;
		snprintf(path, sizeof(path), "/proc/%d/task", pid);
		td = opendir(path);
		while (td && (t = readdir(td))) {
			int tid = atoi(t->d_name);

			if (tid <= 0)
				continue;
			snprintf(task_dir, sizeof(task_dir), "/proc/%d/task/%d", pid, tid);
			snprintf(path, sizeof(path), "%s/stat", task_dir);
			read_small(path, stat, sizeof(stat));
			p = strrchr(stat, ')');
			if (!p || !p[1] || p[2] != 'D')	/* a kernel thread too: a kworker behind the program */
				continue;
			if (first && n_asleep < MAX_ASLEEP) {
				asleep[n_asleep].tid = tid;
				asleep[n_asleep++].switches = switches_of(task_dir);
				continue;
			}
			for (int i = 0; i < n_asleep; i++)
				if (asleep[i].tid == tid && asleep[i].switches == switches_of(task_dir))
					asleep[i].seen = 1;
		}
		if (td)
			closedir(td);
	}
	if (d)
		closedir(d);
	if (!first) {
		int kept = 0;

		for (int i = 0; i < n_asleep; i++)
			if (asleep[i].seen)
				asleep[kept++] = asleep[i];
		n_asleep = kept;
	}
}

/* whether the time-up kill may come now: not while the host holds it, nor,
 * for up to detect_s after the time was up, while a thread asleep in D state
 * then sleeps on (a killable holder's death would free it, and the kernel's
 * report of it would never come) */
int time_up(unsigned long long *grace_from)
{
	unsigned long long now = mono_ns();

	if (!*grace_from) {
		*grace_from = now;
		n_asleep = 0;
		if (detect_s)
			walk_asleep(1);
		say("KSTALL timeup asleep=%d held_s=%llu", n_asleep,
		    atomic_load(&hold_until) > now ? (atomic_load(&hold_until) - now) / 1000000000ULL : 0);
	} else if (n_asleep) {
		walk_asleep(0);
	}
	if (now < atomic_load(&hold_until))
		return 0;
	return !n_asleep || now - *grace_from >= detect_s * 1000000000ULL;
}
