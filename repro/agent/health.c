// SPDX-License-Identifier: GPL-2.0
/* Whether the program ran as intended: the kernel's starvation of it,
 * sampled once a second while it runs. */
#include "agent.h"

/*
 * Whether the program ran as intended: a run that hangs nothing is evidence
 * only if the kernel let the program run (harness/analysis/starvation.py
 * judges it). While the program runs, health_watch samples the kernel once a
 * second; a second is starved when in it the OOM killer killed a task
 * (/proc/vmstat oom_kill), the guest's available memory was under
 * lowmem_pct of its total, every runnable task was stalled on memory for
 * over memstall_pct of it (PSI's "full"), or its tasks reached pids_pct of
 * the kernel's limit (threads-max, pid_max). The GO's health=L,P,M sets the
 * three (the host's data). Every HEALTH_EVERY_S while it runs, and after it:
 *   KSTALL health secs=N starved_s=N oom_kills=N oom_s=N lowmem_s=N memstall_s=N pids_s=N
 *                 min_avail_kb=K total_kb=K max_tasks=T task_limit=L psi=0|1
 *                 killed=SIG:N,.. cpu_ms=C busy_ms=B [running=1]
 * running=1: an account so far. The host keeps the last one: a run the
 * kernel starved so badly that the agent never ended it still has its
 * account (the host's bound ends it, INCONCLUSIVE, not an error).
 * killed: the program's processes the agent reaped (its own, and orphans)
 * that a signal ended while the agent had sent none; cpu_ms: the CPU time
 * of the program's reaped processes; busy_ms: the guest's, all CPUs.
 */
struct health {
	unsigned long long secs, starved, oom_s, lowmem_s, memstall_s, pids_s, oom_kills;
	unsigned long long min_avail_kb, total_kb, max_tasks, task_limit;
	unsigned long long killed[65];
	int psi;
};

static struct health health;
#define HEALTH_EVERY_S 10
static void health_line(int running);
static unsigned health_lowmem_pct = 3, health_pids_pct = 90, health_memstall_pct = 50;
static atomic_int health_stop;

/* the number after key in a /proc file of "key value" or "key=value" words; -1 if none */
static long long proc_value(const char *path, const char *key)
{
	char text[8192], *p = text;
	size_t k = strlen(key);

	read_small(path, text, sizeof(text));
	while ((p = strstr(p, key))) {
		if ((p == text || p[-1] == '\n' || p[-1] == ' ') && (p[k] == ' ' || p[k] == '=' || p[k] == ':'))
			return strtoll(p + k + 1 + strspn(p + k + 1, " "), NULL, 10);
		p += k;
	}
	return -1;
}

/* PSI's memory "full" stall total, in microseconds (-1: no PSI) */
static long long memstall_us(void)
{
	char text[512], *full;

	read_small("/proc/pressure/memory", text, sizeof(text));
	full = strstr(text, "full ");
	full = full ? strstr(full, "total=") : NULL;
	return full ? strtoll(full + strlen("total="), NULL, 10) : -1;
}

/* every task the kernel has now (/proc/loadavg's "running/total") */
static unsigned long long task_count(void)
{
	char text[128], *slash;

	read_small("/proc/loadavg", text, sizeof(text));
	slash = strchr(text, '/');
	return slash ? strtoull(slash + 1, NULL, 10) : 0;
}

/* the guest's busy CPU time so far, all CPUs (/proc/stat's "cpu" line), in ms */
static unsigned long long busy_ms(void)
{
	unsigned long long v[8] = { 0 };
	char text[256];

	read_small("/proc/stat", text, sizeof(text));
	if (sscanf(text, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5],
		   &v[6], &v[7]) < 4)
		return 0;
	/* user nice system [idle iowait] irq softirq steal, in USER_HZ (100/s) */
	return (v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) * 10;
}

static void *health_watch(void *arg)
{
	long long oom = proc_value("/proc/vmstat", "oom_kill"), stall = memstall_us();
	unsigned long long limit, pid_max;
	char val[32];

	(void)arg;
	read_small("/proc/sys/kernel/threads-max", val, sizeof(val));
	limit = strtoull(val, NULL, 10);
	read_small("/proc/sys/kernel/pid_max", val, sizeof(val));
	pid_max = strtoull(val, NULL, 10);
	if (!limit || (pid_max && pid_max < limit))
		limit = pid_max;
	health.task_limit = limit;
	health.psi = stall >= 0;
	health.min_avail_kb = ~0ULL;
	while (!atomic_load(&health_stop)) {
		long long oom_now, stall_now, avail;
		unsigned long long tasks;
		int starved = 0;

		for (int i = 0; i < 10 && !atomic_load(&health_stop); i++)
			usleep(100000);
		oom_now = proc_value("/proc/vmstat", "oom_kill");
		stall_now = memstall_us();
		health.total_kb = proc_value("/proc/meminfo", "MemTotal");
		avail = proc_value("/proc/meminfo", "MemAvailable");
		tasks = task_count();
		health.secs++;
		if (oom >= 0 && oom_now > oom) {
			health.oom_kills += oom_now - oom;
			health.oom_s++;
			starved = 1;
		}
		if (avail >= 0 && (unsigned long long)avail < health.min_avail_kb)
			health.min_avail_kb = avail;
		if (avail >= 0 && (unsigned long long)avail * 100 < health.total_kb * health_lowmem_pct) {
			health.lowmem_s++;
			starved = 1;
		}
		if (stall >= 0 && stall_now - stall > 10000LL * health_memstall_pct) {	/* of 1 s, in us */
			health.memstall_s++;
			starved = 1;
		}
		if (tasks > health.max_tasks)
			health.max_tasks = tasks;
		if (limit && tasks * 100 >= limit * health_pids_pct) {
			health.pids_s++;
			starved = 1;
		}
		health.starved += starved;
		oom = oom_now;
		stall = stall_now;
		if (health.secs % HEALTH_EVERY_S == 0)
			health_line(1);
	}
	return NULL;
}

/* a process of the program's that the agent reaped: a signal that ended it
 * while the agent had sent none (kill_all) is counted */
void health_reaped(int status, int agent_killed)
{
	if (WIFSIGNALED(status) && !agent_killed && WTERMSIG(status) > 0 && WTERMSIG(status) < 65)
		health.killed[WTERMSIG(status)]++;
}

static pthread_t health_thread;
static unsigned long long health_busy0;
static struct rusage health_usage0;

void health_start(void)
{
	char val[64];

	if (cmdline_get(go_line, "health", val, sizeof(val)))
		sscanf(val, "%u,%u,%u", &health_lowmem_pct, &health_pids_pct, &health_memstall_pct);
	health_busy0 = busy_ms();
	getrusage(RUSAGE_CHILDREN, &health_usage0);
	pthread_create(&health_thread, NULL, health_watch, NULL);
}

static unsigned long long tv_ms(struct timeval tv)
{
	return tv.tv_sec * 1000ULL + tv.tv_usec / 1000;
}

static void health_line(int running)
{
	char killed[256] = "";
	struct rusage u;

	getrusage(RUSAGE_CHILDREN, &u);
	for (int s = 1; s < 65; s++) {
		size_t len = strlen(killed);

		if (health.killed[s] && len < sizeof(killed) - 32)
			snprintf(killed + len, sizeof(killed) - len, "%s%d:%llu", len ? "," : "", s, health.killed[s]);
	}
	say("KSTALL health secs=%llu starved_s=%llu oom_kills=%llu oom_s=%llu lowmem_s=%llu memstall_s=%llu "
	    "pids_s=%llu min_avail_kb=%llu total_kb=%llu max_tasks=%llu task_limit=%llu psi=%d killed=%s "
	    "cpu_ms=%llu busy_ms=%llu%s",
	    health.secs, health.starved, health.oom_kills, health.oom_s, health.lowmem_s, health.memstall_s,
	    health.pids_s, health.min_avail_kb == ~0ULL ? 0 : health.min_avail_kb, health.total_kb,
	    health.max_tasks, health.task_limit, health.psi, killed[0] ? killed : "-",
	    tv_ms(u.ru_utime) + tv_ms(u.ru_stime) - tv_ms(health_usage0.ru_utime) - tv_ms(health_usage0.ru_stime),
	    busy_ms() - health_busy0, running ? " running=1" : "");
}

void health_say(void)
{
	atomic_store(&health_stop, 1);
	pthread_join(health_thread, NULL);
	health_line(0);
}
