// SPDX-License-Identifier: GPL-2.0
/* Running the program: once, again and again, or time-boxed; its output
 * forwarded; every process killed and reaped at its end, what cannot die said. */
#include "agent.h"

atomic_int repro_pid;
atomic_int stop_sent;	/* the host's STOP: the agent signalled the program */
/* the host's STOP: end the program early with SIGTERM, so it still prints its final results */
void stop_command(const char *arg)
{
	(void)arg;
	if (atomic_load(&repro_pid) > 0) {
		atomic_store(&stop_sent, 1);
		kill(atomic_load(&repro_pid), SIGTERM);
	}
}

/* the status of the program's own process, when a reaper took it first */
static atomic_int reaped_status = -1;

/* the threads of user process pid whose state is none of skip's; with say,
 * each is said as "KSTALL leftover ..." with the seconds since it was killed */
static int threads_not_in(int pid, const char *skip, int say, unsigned long long secs)
{
	char path[384], task_dir[300], stat[512], *p;
	struct dirent *e;
	DIR *d;
	int live = 0;

	snprintf(path, sizeof(path), "/proc/%d/task", pid);
	d = opendir(path);
	while (d && (e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		snprintf(task_dir, sizeof(task_dir), "/proc/%d/task/%s", pid, e->d_name);
		snprintf(path, sizeof(path), "%s/stat", task_dir);
		read_small(path, stat, sizeof(stat));
		p = strrchr(stat, ')');
		if (!p || !p[1] || kernel_thread(p) || strchr(skip, p[2]))
			continue;
		live++;
		if (say)
			say_task("leftover", task_dir, e->d_name, pid, secs, NULL);
	}
	if (d)
		closedir(d);
	return live;
}

/* threads that live on: not exited (a leader that exited leaves its workers
 * to run or sleep on) */
#define DEAD "ZX"
/* threads that a SIGSTOP has not stopped yet: D-state sleepers never will */
#define NOT_MOVING "ZXTtD"
#define STOP_WAIT_MS 300

/* user processes (every one but this agent and PID 1) with a thread whose
 * state is none of skip's */
static int user_processes_not_in(const char *skip)
{
	DIR *d = opendir("/proc");
	struct dirent *e;
	int n = 0;

	while (d && (e = readdir(d))) {
		int pid = atoi(e->d_name);

		if (pid > 1 && pid != getpid() && threads_not_in(pid, skip, 0, 0))
			n++;
	}
	if (d)
		closedir(d);
	return n;
}

/* SIGKILL every user process but this agent, reaping them. Every thread of
 * each is looked at; those still there after bound_ms cannot die (asleep in
 * D state, or running on in the kernel) and are said, once, as
 * "KSTALL leftover ..." lines, whatever their state.
 * All are stopped first, at once (kill(-1): every process but this one and
 * PID 1, in one walk of the task list), and killed once none moves on:
 * killed one by one, a pid namespace's first process (syzkaller's sandbox)
 * could die before its workers, whose clone() then fails ENOMEM, which the
 * host reads as the sandbox ending before its time. */
void kill_all(unsigned bound_ms, int say_leftovers)
{
	kill(-1, SIGSTOP);
	for (unsigned waited = 0; waited < STOP_WAIT_MS && user_processes_not_in(NOT_MOVING); waited += 10)
		usleep(10000);
	kill(-1, SIGKILL);
	for (unsigned waited = 0;; waited += 50) {
		DIR *d = opendir("/proc");
		struct dirent *e;
		int left = 0, status;
		pid_t pid;

		while (d && (e = readdir(d))) {
			int n = atoi(e->d_name);

			if (n <= 1 || n == getpid())
				continue;
			if (!threads_not_in(n, DEAD, say_leftovers && waited >= bound_ms, waited / 1000))
				continue;
			left++;
			kill(n, SIGKILL);
		}
		if (d)
			closedir(d);
		while ((pid = waitpid(-1, &status, WNOHANG)) > 0)
			if (pid == atomic_load(&repro_pid))
				atomic_store(&reaped_status, status);
		if (!left || waited >= bound_ms)
			return;
		usleep(50000);
	}
}

/* As PID 1 the agent inherits the processes whose parent died (the OOM
 * killer's victims' children): reaped as the program runs, so that they
 * hold no pid, and counted when a signal ended them */
static void reap_orphans(pid_t program)
{
	int status;
	pid_t pid;

	while ((pid = waitpid(-1, &status, WNOHANG)) > 0)
		if (pid == program)
			atomic_store(&reaped_status, status);
		else
			health_reaped(status, 0);
}

/* DIR as the program's root: in a mount namespace of its own, DIR moved
 * onto / and entered, as switch_root does, so that the root is its
 * namespace's own and not a chroot(2), in which the kernel refuses a user
 * namespace (clone(CLONE_NEWUSER) EPERM): syzkaller's namespace sandbox
 * never started there, and 9 of the 2023-2025 reproducers' calls never ran */
static int enter_root(const char *dir)
{
	if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 || chdir(dir) < 0 ||
	    mount(dir, "/", NULL, MS_MOVE, NULL) < 0 || chroot(".") < 0 || chdir("/") < 0)
		return -errno;
	return 0;
}

/* the program's child, before it becomes the program: where it runs, and
 * (env trace) its system calls counted from here on, its children's too */
static void enter_env(void)
{
	int err;

	if (env_trace) {
		char pid[16];

		snprintf(pid, sizeof(pid), "%d", getpid());
		write_file(TRACING "/set_event_pid", pid);
	}
	if (env_root[0] && (err = enter_root(env_root)) < 0)
		dprintf(STDOUT_FILENO, "# kstall-agent: root %s: %s\n", env_root, strerror(-err));
	if (env_cwd[0] && chdir(env_cwd) < 0)
		dprintf(STDOUT_FILENO, "# kstall-agent: cd %s: %s\n", env_cwd, strerror(errno));
}

/* run /bin/NAME ARGS..., forward its output a line at a time; exit code.
 * deadline (mono_ns, 0: none): then every process is killed (env timebox)
 * and *cut is set */
int run_repro(const char *name, char *args, unsigned long long deadline, int *cut)
{
	char path[512], *argv[64], linebuf[4096];
	int argc = 0, pfd[2], status = 0;
	unsigned long long killed_at = 0, reaped_at = 0, grace_from = 0;
	size_t have = 0;
	pid_t pid;

	snprintf(path, sizeof(path), "%s/bin/%s", base_dir, name);
	argv[argc++] = path;
	for (char *tok = strtok(args, ","); tok && argc < 63; tok = strtok(NULL, ","))
		argv[argc++] = tok;
	argv[argc] = NULL;

	if (pipe2(pfd, O_CLOEXEC) < 0)
		return -errno;
	pid = fork();
	if (pid == 0) {
		setpgid(0, 0);	/* its own process group: the tasks sleep_watch looks at */
		dup2(pfd[1], STDOUT_FILENO);
		dup2(pfd[1], STDERR_FILENO);
		if (host_cmd[0])
			exec_host_command();
		enter_env();
		execv(path, argv);
		dprintf(STDOUT_FILENO, "# kstall-agent: exec %s: %s\n", path, strerror(errno));
		_exit(127);
	}
	close(pfd[1]);
	if (pid < 0)
		return -errno;
	atomic_store(&repro_pid, pid);
	atomic_store(&reaped_status, -1);
	for (;;) {
		struct pollfd pf = { .fd = pfd[0], .events = POLLIN };
		ssize_t n;
		char *start = linebuf, *nl;

		if (deadline && !killed_at && mono_ns() >= deadline && time_up(&grace_from)) {
			kill_all(0, 0);	/* its time is up: it and everything it started */
			killed_at = mono_ns();
			*cut = 1;
		}
		if (deadline && !killed_at && mono_ns() - reaped_at > 200000000ULL) {
			reap_orphans(pid);
			reaped_at = mono_ns();
		}
		/* a task that cannot die keeps the pipe open: the run ends anyway */
		if (killed_at && mono_ns() - killed_at > 10000000000ULL)
			break;
		if (deadline && poll(&pf, 1, 200) == 0)
			continue;
		n = read(pfd[0], linebuf + have, sizeof(linebuf) - 1 - have);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		have += n;
		linebuf[have] = 0;
		while ((nl = memchr(start, '\n', have - (start - linebuf)))) {
			const char *line = start;

			*nl = 0;
			/* the kselftest runner nests a test's output under "# " */
			while (strncmp(line, "# # ", 4) == 0)
				line += 2;
			if (strncmp(line, "# progress count=", 17) == 0)
				atomic_store(&progress_count, strtoull(line + 17, NULL, 10));
			say("| %s", start);
			start = nl + 1;
		}
		have -= start - linebuf;
		memmove(linebuf, start, have);
		if (have == sizeof(linebuf) - 1) {	/* overlong line: pass it on */
			say("| %s", linebuf);
			have = 0;
		}
	}
	close(pfd[0]);
	if (killed_at) {	/* reaped by kill_all, or not there to wait for (bounded) */
		kill_all(2000, 0);
		status = atomic_load(&reaped_status);
		if (status < 0 && waitpid(pid, &status, WNOHANG) <= 0)
			status = SIGKILL;
	} else if (atomic_load(&reaped_status) >= 0) {
		status = atomic_load(&reaped_status);
	} else {
		while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
			;
	}
	health_reaped(status, killed_at != 0 || atomic_load(&stop_sent));
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/*
 * env timebox: a program that may never end on its own (syzkaller's fork
 * their workers for ever) is run, and run again when it ends, until its
 * seconds are up; then every process is killed. Each run that ended on its
 * own is one pass, the one cut at the end too. Exit codes are counted, not
 * obeyed: the host judges them. The kill waits while the host holds it
 * (HOLD) and, up to detect seconds, for a thread asleep in D state at the
 * time-up to be reported (time_up). Tasks still there dying_s after the kill
 * (the GO's dying=S: long enough for the kernel's hung-task detector to
 * speak first) cannot die, and are said.
 */
int run_timeboxed(const char *name, const char *args, unsigned long long seconds, unsigned dying_s,
		  unsigned detect)
{
	unsigned long long start = mono_ns(), deadline = start + seconds * 1000000000ULL, done = 0, failed = 0;
	char argv_copy[1024], codes[256] = "";
	int cut = 0, last = 0;

	detect_s = detect;
	say("KTAP version 1");
	say("1..1");
	while (!cut && mono_ns() < deadline) {
		int code;

		snprintf(argv_copy, sizeof(argv_copy), "%s", args);
		code = run_repro(name, argv_copy, deadline, &cut);
		atomic_store(&progress_count, ++done);
		if (!cut && code) {
			size_t len = strlen(codes);

			failed++;
			if (code != last && len < sizeof(codes) - 8)
				snprintf(codes + len, sizeof(codes) - len, "%s%d", len ? "," : "", code);
			last = code;
		}
		say("# progress count=%llu elapsed_ms=%llu", done, (mono_ns() - start) / 1000000);
	}
	if (!cut) {	/* it ended on its own past its time: the time-up's waits hold for the end too */
		unsigned long long grace_from = 0;

		while (!time_up(&grace_from))
			usleep(200000);
	}
	kill_all(dying_s * 1000, 1);	/* what runs still, and what does not die */
	while (held())	/* a report of what the kill left the host still follows */
		usleep(200000);
	say("# result count=%llu elapsed_ms=%llu exit=0 timebox=1 cut=%d failed=%llu codes=%s", done,
	    (mono_ns() - start) / 1000000, cut, failed, codes[0] ? codes : "-");
	say("ok 1 %s # ran for %llu s", name, seconds);
	return 0;
}

/*
 * A program that knows nothing of kstall: run it again and again (up to
 * repeat times, or until seconds have passed), each completed run one pass,
 * and report it as a reproducer would: progress after each run, then one
 * KTAP result. A run that fails ends it: exit 4 (kselftest's skip) is a
 * skip, any other non-zero exit the program's own failure, never a hang.
 */
int run_repeated(const char *name, const char *args, unsigned long long repeat,
			unsigned long long seconds)
{
	unsigned long long done = 0, start = mono_ns();
	char argv_copy[1024];
	int code = 0;

	say("KTAP version 1");
	say("1..1");
	while (done < repeat && (!seconds || mono_ns() - start < seconds * 1000000000ULL)) {
		snprintf(argv_copy, sizeof(argv_copy), "%s", args);	/* run_repro's strtok cuts it */
		code = run_repro(name, argv_copy, 0, NULL);
		if (code != 0)
			break;
		atomic_store(&progress_count, ++done);
		say("# progress count=%llu elapsed_ms=%llu", done, (mono_ns() - start) / 1000000);
	}
	say("# result count=%llu elapsed_ms=%llu exit=%d", done, (mono_ns() - start) / 1000000, code);
	if (code == 4)
		say("ok 1 %s # SKIP it exited 4 (kselftest's skip)", name);
	else if (code)
		say("not ok 1 %s # FAIL it exited %d on run %llu", name, code, done + 1);
	else
		say("ok 1 %s", name);
	return code;
}
