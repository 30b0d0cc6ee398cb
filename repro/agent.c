// SPDX-License-Identifier: GPL-2.0
/* kstall guest agent: the initramfs's /init.
 *
 * Prepares a bare guest for the reproducers (mounts, perf_event_paranoid=-1,
 * kptr_restrict=0), sends /proc/kallsyms to the host when asked, runs the
 * reproducer named on the kernel command line and forwards its TAP output,
 * and heartbeats with guest CLOCK_MONOTONIC so the host can tell the moment
 * the guest freezes. Everything goes over virtio-serial ports; the UART stays
 * for the kernel's own console.
 *
 * Kernel command line:
 *   kstall.repro=NAME   reproducer to run (/bin/NAME); "none" just reports
 *   kstall.args=A,B,C   its arguments, comma separated
 *   kstall.syms=1       send /proc/kallsyms (text and variables) and the BTF on the syms port
 *   kstall.hb_ms=N      heartbeat interval (default 50 ms)
 *   kstall.gate=1       after booting, say "ready" and wait for the host's "GO"
 *                       before starting the reproducer (the host boots guests
 *                       ahead while others still use the CPUs, and saves the
 *                       guest there as a snapshot that later runs restore)
 *
 * The host's GO line may carry what a restored guest cannot have had on its
 * command line, and what must differ between guests restored from one
 * snapshot:
 *   GO repro=NAME args=A,B,C syms=1 seed=HEX time=SEC.NSEC repeat=N seconds=S sleep=S
 *      hostfs=TAG cmd=HEX cwd=HEX health=L,P,M dying=S
 * repro, args and syms as on the command line (they override it), seed mixed
 * into the kernel's RNG and the CRNG reseeded, time set as CLOCK_REALTIME.
 * repeat: a program that knows nothing of kstall (a user's own) is run up to
 * N times, for at most S seconds, each completed run one pass of the count.
 * sleep: report a task of the reproducer's that sleeps in D state for S
 * seconds (see sleep_watch). hostfs: run a host command over the host's
 * root filesystem (see mount_host).
 *
 * Modules: a kernel whose virtio console or PCI transport is a module (=m)
 * cannot reach the host until they are loaded, so /etc/kstall/modules lists
 * the modules of lib/modules/kstall/ (beside the agent) to load first, in
 * dependency order; the host works out that list.
 *
 * As PID 1 (the initramfs's /init) the agent mounts the pseudo filesystems and
 * powers off when done. Started any other way (a service in a booted image,
 * `kstall verify --boot-image`) it finds them mounted and still powers off.
 * Reproducers are in bin/ beside the agent's own executable.
 *
 * Anything that keeps the agent from doing its job (a module that does not
 * load, no virtio port) is printed on the console as
 *   kstall-agent: error: WHAT
 * and the guest powers off at once: the host turns that line into the verdict.
 *
 * Host commands on the agent port: "GO" (see kstall.gate), "STOP": end the
 * reproducer early with SIGTERM, so it still prints its final results, and
 * "CORE": a stuck user-space reproducer (signal-malloc) is dumped. The agent
 * reports every thread's state, syscall and kernel stack from /proc, points
 * the kernel's core_pattern at itself (`init --core`, which stores the piped
 * core in /tmp) and sends SIGABRT; once the reproducer is gone the core goes
 * to the host on the syms port, as "CORE <bytes>" and the bytes, and the
 * agent waits (bounded) for the host's "CORE-OK" before it powers off.
 * Likewise after sending the symbols: "SYMS-OK" (a guest with nothing to run
 * powered off before its symbols had crossed, and the capture lost them).
 *
 * The reproducer's own output is forwarded a line at a time behind "| ", so
 * that nothing it prints can be read as one of the agent's lines (a program
 * that printed "KSTALL exit code=0" or "HB ..." once spoke for the agent);
 * the agent's own KTAP for a program that knows nothing of kstall is not.
 * Agent channel lines (host parses these; "| LINE" is the reproducer's):
 *   KSTALL hello uname=R cpus=N init=COMM  (COMM: PID 1's name: init, the agent, or the
 *                                          image's own init under --boot-image)
 *   KSTALL syms bytes=B lines=L data_lines=D btf_bytes=N ms=T  (blobs KALLSYMS, KDATA, BTF)
 *   KSTALL thread tid=T comm=C state=S syscall=NR,ARG0,.. kstack=F1,F2..  (on CORE)
 *   KSTALL core bytes=B exe=PATH ms=T | KSTALL core error=WHAT
 *   KSTALL ready                      (gated: waiting for "GO" from the host)
 *   KSTALL dstate tid=T pid=P comm=C secs=S wchan=W kstack=F1,F2..  (GO sleep=S)
 *   HB seq mono_ns count
 *   KSTALL health secs=N starved_s=N oom_kills=N ...  (after the program: see health_watch)
 *   KSTALL exit code=C
 *   KSTALL poweroff
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <net/if.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/sysmacros.h>
#include <sys/syscall.h>
#include <sys/reboot.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include <stdarg.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <linux/random.h>

static unsigned long long mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (unsigned long long)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

#define AGENT_PORT "org.kstall.agent"
#define SYMS_PORT "org.kstall.syms"
#define CORE_FILE "/tmp/kstall-core"

static int agent_fd = -1;
static pthread_mutex_t agent_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_ullong progress_count;
static atomic_int hb_stop;
static atomic_int repro_pid;
static atomic_int core_requested;
static atomic_int stop_sent;	/* the host's STOP: the agent signalled the program */
static atomic_int core_acked;	/* the host has the whole core ("CORE-OK") */
static atomic_int syms_sent;	/* the symbols went to the host... */
static atomic_int syms_acked;	/* ...and it has them all ("SYMS-OK") */
static char repro_exe[256];
static unsigned hb_ms = 50;
static char base_dir[256] = "";	/* where the agent's executable is: "" for / */
static char go_line[8192];	/* the host's GO, with its parameters */
static char host_cmd[2048];	/* GO hostfs: the host command, run by the host's /bin/sh */
static char host_cwd[1024];

static void say_fd(int fd, const char *buf, size_t len)
{
	while (len) {
		ssize_t n = write(fd, buf, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return;
		buf += n;
		len -= n;
	}
}

/* one line to the host, never interleaved with the heartbeat thread's */
static void say(const char *fmt, ...)
{
	char buf[1024];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(buf, sizeof(buf) - 1, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if (n > (int)sizeof(buf) - 2)
		n = sizeof(buf) - 2;
	if (buf[n - 1] != '\n')
		buf[n++] = '\n';
	pthread_mutex_lock(&agent_lock);
	say_fd(agent_fd >= 0 ? agent_fd : STDOUT_FILENO, buf, n);
	pthread_mutex_unlock(&agent_lock);
}

static void write_file(const char *path, const char *val)
{
	int fd = open(path, O_WRONLY);

	if (fd < 0) {
		fprintf(stderr, "kstall-agent: %s: %s\n", path, strerror(errno));
		return;
	}
	say_fd(fd, val, strlen(val));
	close(fd);
}

static void power_off(void)
{
	sync();
	reboot(RB_POWER_OFF);
	_exit(0);	/* not allowed to (not root): the host sees the exit */
}

/* The agent cannot do its job: say why on the console (which the host always
 * reads, whatever else is missing) and on the agent port if there is one. */
static void fatal(const char *fmt, ...)
{
	char buf[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	fprintf(stderr, "kstall-agent: error: %s\n", buf);
	fflush(stderr);
	if (agent_fd >= 0)
		say("KSTALL error %s", buf);
	power_off();
}

/* bin/ and lib/ sit beside the agent: / in the initramfs, the install
 * directory in a booted image */
static void find_base_dir(void)
{
	char exe[256];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	char *slash;

	if (n <= 0)
		return;
	exe[n] = 0;
	slash = strrchr(exe, '/');
	if (slash && slash != exe) {
		*slash = 0;
		snprintf(base_dir, sizeof(base_dir), "%s", exe);
	}
}

/* Load the modules listed in etc/kstall/modules (dependency order) from
 * lib/modules/kstall/NAME.ko. The host stores them uncompressed. */
static void load_modules(void)
{
	char path[512], name[128];
	FILE *list;
	int loaded = 0;

	snprintf(path, sizeof(path), "%s/etc/kstall/modules", base_dir);
	list = fopen(path, "r");
	if (!list)
		return;
	while (fgets(name, sizeof(name), list)) {
		int fd;

		name[strcspn(name, "\n")] = 0;
		if (!name[0])
			continue;
		snprintf(path, sizeof(path), "%s/lib/modules/kstall/%s.ko", base_dir, name);
		fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			fatal("module %s: %s: %s", name, path, strerror(errno));
		if (syscall(SYS_finit_module, fd, "", 0) != 0 && errno != EEXIST)
			fatal("module %s failed to load: %s (see the kernel's message above)", name, strerror(errno));
		close(fd);
		loaded++;
	}
	fclose(list);
	fprintf(stderr, "kstall-agent: loaded %d module(s)\n", loaded);
}

static void mount_all(void)
{
	mkdir("/proc", 0755);
	mkdir("/sys", 0755);
	mkdir("/dev", 0755);
	mkdir("/tmp", 01777);
	mount("proc", "/proc", "proc", 0, NULL);
	mount("sysfs", "/sys", "sysfs", 0, NULL);
	mount("devtmpfs", "/dev", "devtmpfs", 0, NULL);
	mount("tmpfs", "/tmp", "tmpfs", 0, NULL);
	mount("tracefs", "/sys/kernel/tracing", "tracefs", 0, NULL);
	mount("debugfs", "/sys/kernel/debug", "debugfs", 0, NULL);
	mount("bpf", "/sys/fs/bpf", "bpf", 0, NULL);
	/* what udev would add and devtmpfs lacks: shell tools in the guest (the
	 * kselftest runner logs to /dev/stdout) expect them */
	symlink("/proc/self/fd", "/dev/fd");
	symlink("/proc/self/fd/0", "/dev/stdin");
	symlink("/proc/self/fd/1", "/dev/stdout");
	symlink("/proc/self/fd/2", "/dev/stderr");
}

/* value of key=... in /proc/cmdline, copied into out; 0 if absent */
static int cmdline_get(const char *cmdline, const char *key, char *out, size_t outlen)
{
	size_t klen = strlen(key);
	const char *p = cmdline;

	while ((p = strstr(p, key))) {
		if ((p == cmdline || p[-1] == ' ') && p[klen] == '=') {
			const char *v = p + klen + 1;
			size_t n = strcspn(v, " \n");

			if (n >= outlen)
				n = outlen - 1;
			memcpy(out, v, n);
			out[n] = 0;
			return 1;
		}
		p += klen;
	}
	return 0;
}

/* /dev node of the virtio-serial port called name; waits up to 10 s for it
 * (a port appears a little after its module loads) */
static int open_port(const char *name)
{
	for (int tries = 0; tries < 100; tries++) {
		DIR *d = opendir("/sys/class/virtio-ports");
		struct dirent *e;

		while (d && (e = readdir(d))) {
			char path[300], buf[128] = "";
			int fd;

			if (e->d_name[0] == '.')
				continue;
			snprintf(path, sizeof(path), "/sys/class/virtio-ports/%s/name", e->d_name);
			fd = open(path, O_RDONLY);
			if (fd < 0)
				continue;
			if (read(fd, buf, sizeof(buf) - 1) < 0)
				buf[0] = 0;
			close(fd);
			buf[strcspn(buf, "\n")] = 0;
			if (strcmp(buf, name) == 0) {
				snprintf(path, sizeof(path), "/dev/%s", e->d_name);
				closedir(d);
				return open(path, O_RDWR | O_CLOEXEC);
			}
		}
		if (d)
			closedir(d);
		usleep(100000);
	}
	errno = ENOENT;
	return -1;
}

/* "TAG <len>\n" and len bytes on the syms port (kallsyms, a core) */
static int send_blob(const char *tag, const char *buf, size_t len)
{
	char hdr[64];
	int port = open_port(SYMS_PORT);

	if (port < 0)
		return -1;
	snprintf(hdr, sizeof(hdr), "%s %zu\n", tag, len);
	say_fd(port, hdr, strlen(hdr));
	say_fd(port, buf, len);
	close(port);
	return 0;
}

/* keep, in place, the lines of a kallsyms text whose symbol type is one of
 * types ("ffffffff81000000 T _text [mod]"); the new length */
static size_t keep_types(char *buf, size_t len, const char *types, size_t *lines)
{
	size_t out = 0;

	*lines = 0;
	for (size_t i = 0; i < len;) {
		char *nl = memchr(buf + i, '\n', len - i);
		size_t l = (nl ? (size_t)(nl - (buf + i)) : len - i) + 1;
		char type = (l > 18) ? buf[i + 17] : 0;

		if (type && strchr(types, type)) {
			memmove(buf + out, buf + i, l);
			out += l;
			(*lines)++;
		}
		i += l;
	}
	return out;
}

/* a whole pseudo file into a malloc'd buffer; NULL if unreadable */
static char *read_all(const char *path, size_t *len)
{
	size_t cap = 1 << 20;
	char *buf = malloc(cap);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n;

	*len = 0;
	if (!buf || fd < 0) {
		free(buf);
		if (fd >= 0)
			close(fd);
		return NULL;
	}
	while ((n = read(fd, buf + *len, cap - *len)) > 0) {
		*len += n;
		if (cap - *len < 65536) {
			char *nb = realloc(buf, cap * 2);

			if (!nb)
				break;
			buf = nb;
			cap *= 2;
		}
	}
	close(fd);
	return buf;
}

/* The symbols in two parts: text symbols, which symbolize stacks, and
 * variables (data, bss, per-CPU), which find the kernel's records of who
 * waits for whom and name locks; then the kernel's BTF, the layout of those
 * records (none: an empty blob). Each part is only what the host reads: the
 * fewer bytes the faster a TCG guest gets them across. */
static void send_kallsyms(void)
{
	unsigned long long t0 = mono_ns();
	size_t len, text_len, data_len, text_lines, data_lines, btf_len = 0;
	char *buf = read_all("/proc/kallsyms", &len), *data, *btf;

	if (!buf || !(data = malloc(len ? len : 1))) {
		say("KSTALL syms error=%s", strerror(errno));
		free(buf);
		return;
	}
	memcpy(data, buf, len);
	data_len = keep_types(data, len, "dDbBA", &data_lines);
	text_len = keep_types(buf, len, "tTwW", &text_lines);
	btf = read_all("/sys/kernel/btf/vmlinux", &btf_len);
	if (send_blob("KALLSYMS", buf, text_len) || send_blob("KDATA", data, data_len) ||
	    send_blob("BTF", btf ? btf : "", btf ? btf_len : 0))
		say("KSTALL syms error=no-port");
	else {
		atomic_store(&syms_sent, 1);
		say("KSTALL syms bytes=%zu lines=%zu data_lines=%zu btf_bytes=%zu ms=%llu", text_len, text_lines,
		    data_lines, btf ? btf_len : 0, (mono_ns() - t0) / 1000000);
	}
	free(buf);
	free(data);
	free(btf);
}

/* a small /proc file into out, newline-trimmed; "" if unreadable */
static void read_small(const char *path, char *out, size_t len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n = fd >= 0 ? read(fd, out, len - 1) : -1;

	out[n > 0 ? n : 0] = 0;
	while (n > 0 && out[n - 1] == '\n')
		out[--n] = 0;
	if (fd >= 0)
		close(fd);
}

/* "[<0>] futex_wait_queue+0x5f/0x90\n[<0>] ..." -> "futex_wait_queue+0x5f/0x90,..." */
static void flatten_stack(char *stack)
{
	char *p;

	for (char *r = stack, *w = stack; ; ) {
		if (r[0] == '[' && (p = strstr(r, "] ")))
			r = p + 2;
		if (!*r) {
			*w = 0;
			if (w > stack && w[-1] == ',')
				w[-1] = 0;
			break;
		}
		*w++ = *r == '\n' ? ',' : *r;
		r++;
	}
}

/* what the kernel knows of each thread of pid, one line each: the host reads
 * the futex word a thread waits on from its syscall arguments */
static void report_threads(int pid)
{
	char dir[64], path[384], comm[64], stat[512], sys[256], stack[2048], *p;
	struct dirent *e;
	DIR *d;

	snprintf(dir, sizeof(dir), "/proc/%d/task", pid);
	d = opendir(dir);
	while (d && (e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
#define TASK_FILE(name, buf) (snprintf(path, sizeof(path), "%s/%s/" name, dir, e->d_name), \
			      read_small(path, buf, sizeof(buf)))
		TASK_FILE("comm", comm);
		TASK_FILE("stat", stat);
		TASK_FILE("syscall", sys);
		TASK_FILE("stack", stack);
#undef TASK_FILE
		for (p = comm; *p; p++)
			if (*p == ' ' || *p == '=')
				*p = '_';
		for (p = sys; *p; p++)
			if (*p == ' ')
				*p = ',';
		flatten_stack(stack);
		p = strrchr(stat, ')');
		say("KSTALL thread tid=%s comm=%s state=%c syscall=%s kstack=%s", e->d_name, comm,
		    p && p[1] && p[2] ? p[2] : '?', sys[0] ? sys : "-", stack[0] ? stack : "-");
	}
	if (d)
		closedir(d);
}

/* the kernel's core of a stuck reproducer, piped to `init --core` */
static void request_core(int pid)
{
	char self[256], pattern[300], path[64];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);

	snprintf(path, sizeof(path), "/proc/%d/exe", pid);
	n = n > 0 ? n : 0;
	self[n] = 0;
	n = readlink(path, repro_exe, sizeof(repro_exe) - 1);
	repro_exe[n > 0 ? n : 0] = 0;
	report_threads(pid);
	unlink(CORE_FILE);
	snprintf(pattern, sizeof(pattern), "|%s --core %%p", self);
	write_file("/proc/sys/kernel/core_pattern", pattern);
	atomic_store(&core_requested, 1);
	kill(pid, SIGABRT);
}

/* `init --core PID`: the kernel runs this with the core on stdin; the rename
 * comes before exit, and the kernel waits for the helper to close its end
 * before the dumped process is gone, so the agent finds a whole file */
static int store_core(void)
{
	char buf[1 << 16];
	int fd = open(CORE_FILE ".part", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	ssize_t n;

	if (fd < 0)
		return 1;
	while ((n = read(STDIN_FILENO, buf, sizeof(buf))) > 0)
		say_fd(fd, buf, n);
	close(fd);
	return rename(CORE_FILE ".part", CORE_FILE) ? 1 : 0;
}

/* after the reproducer is gone: the core to the host */
static void send_core(void)
{
	unsigned long long t0 = mono_ns();
	struct stat st;
	char *buf = NULL;
	int fd = -1;

	/* bounded: a core the kernel could not write never appears */
	for (int i = 0; i < 200 && stat(CORE_FILE, &st) < 0; i++)
		usleep(50000);
	fd = open(CORE_FILE, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &st) < 0 || !(buf = malloc(st.st_size ? st.st_size : 1)) ||
	    read(fd, buf, st.st_size) != st.st_size) {
		say("KSTALL core error=%s", fd < 0 ? "no-core-written" : strerror(errno));
	} else if (send_blob("CORE", buf, st.st_size)) {
		say("KSTALL core error=no-port");
	} else {
		say("KSTALL core bytes=%lld exe=%s ms=%llu", (long long)st.st_size, repro_exe,
		    (mono_ns() - t0) / 1000000);
		/* a write to the port returns once the data is queued, not once the
		 * host has it: powering off now could lose the core's tail. The host
		 * says "CORE-OK" when every byte is in (bounded: an old host never does). */
		for (int i = 0; i < 2000 && !atomic_load(&core_acked); i++)
			usleep(10000);
	}
	free(buf);
	if (fd >= 0)
		close(fd);
	unlink(CORE_FILE);
}

static void say_tasks(char *list);

/* read host commands a line at a time until `until` arrives (NULL: forever);
 * "STOP" ends the reproducer */
static void host_commands(const char *until)
{
	char buf[sizeof(go_line)];
	size_t have = 0;
	/* waiting for the GO: 30 s of a closed port; later, for as long as the guest runs */
	unsigned int eofs = 0, max_eofs = until ? 300 : UINT_MAX;

	for (;;) {
		ssize_t n = read(agent_fd, buf + have, sizeof(buf) - 1 - have);
		char *nl;

		if (n < 0 && errno == EINTR)
			continue;
		if (n == 0 && eofs++ < max_eofs) {
			/* the port is closed to the guest for a moment (a restored guest
			 * whose host reconnects): wait for it rather than lose the GO */
			usleep(100 * 1000);
			continue;
		}
		if (n <= 0)
			return;	/* host gone */
		eofs = 0;
		have += n;
		buf[have] = 0;
		while ((nl = strchr(buf, '\n'))) {
			*nl = 0;
			if (until && !strncmp(buf, until, strlen(until)) &&
			    (buf[strlen(until)] == 0 || buf[strlen(until)] == ' ')) {
				snprintf(go_line, sizeof(go_line), "%s", buf);
				return;
			}
			if (!strcmp(buf, "STOP") && atomic_load(&repro_pid) > 0) {
				atomic_store(&stop_sent, 1);
				kill(atomic_load(&repro_pid), SIGTERM);
			}
			if (!strcmp(buf, "CORE") && atomic_load(&repro_pid) > 0 && !atomic_load(&core_requested))
				request_core(atomic_load(&repro_pid));
			if (!strcmp(buf, "CORE-OK"))
				atomic_store(&core_acked, 1);
			if (!strcmp(buf, "SYMS-OK"))
				atomic_store(&syms_acked, 1);
			if (!strncmp(buf, "TASKS ", 6))
				say_tasks(buf + 6);
			have -= nl + 1 - buf;
			memmove(buf, nl + 1, have + 1);
		}
		if (have == sizeof(buf) - 1)
			have = 0;
	}
}

/*
 * Sleeping hangs: a task of the reproducer's (its process group) that stays
 * in D state, in the same kernel wait, for sleep_after_s seconds is reported
 * once, with its wait channel and kernel stack:
 *   KSTALL dstate tid=T pid=P comm=C secs=S wchan=W kstack=F1,F2..
 * Sampled every 250 ms; a task whose stack changes between samples (I/O
 * that goes on) starts over.
 */
static unsigned sleep_after_s;	/* 0: not watched (GO sleep=S) */
static int watch_all;		/* env watch-all: every user process, not the program's group */

/* PF_KTHREAD in a /proc/PID/stat's flags; p points at its ')' */
static int kernel_thread(const char *p)
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
static void say_task(const char *tag, const char *task_dir, const char *tid, int pid, unsigned long long secs,
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
static void say_tasks(char *list)
{
	char *tid, *save = NULL;
	int n = 0;

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

static void *sleep_watch(void *arg)
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

static void *command_reader(void *arg)
{
	(void)arg;
	host_commands(NULL);
	return NULL;
}

static void *heartbeat(void *arg)
{
	struct sched_param sp = { .sched_priority = 50 };
	struct timespec next;
	unsigned long long seq = 0;

	(void)arg;
	/* above the reproducer's spinning threads: silence must mean a frozen
	 * kernel, not a starved heartbeat */
	pthread_setschedparam(pthread_self(), SCHED_FIFO, &sp);
	clock_gettime(CLOCK_MONOTONIC, &next);
	while (!atomic_load(&hb_stop)) {
		say("HB %llu %llu %llu", seq++, mono_ns(), (unsigned long long)atomic_load(&progress_count));
		next.tv_nsec += hb_ms * 1000000L;
		while (next.tv_nsec >= 1000000000L) {
			next.tv_nsec -= 1000000000L;
			next.tv_sec++;
		}
		clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, NULL);
	}
	return NULL;
}

/* a guest restored from a snapshot shares its RNG state and its clock with
 * every other guest restored from it: the host's GO brings fresh ones */
static void apply_go(void)
{
	char val[160];
	unsigned char seed[64];
	size_t n = 0;

	if (cmdline_get(go_line, "seed", val, sizeof(val))) {
		for (; n < sizeof(seed) && sscanf(val + 2 * n, "%2hhx", &seed[n]) == 1; n++)
			;
		int fd = open("/dev/urandom", O_WRONLY | O_CLOEXEC);

		if (fd >= 0) {
			say_fd(fd, (const char *)seed, n);
			if (ioctl(fd, RNDRESEEDCRNG) < 0)
				say("# kstall-agent: RNDRESEEDCRNG: %s", strerror(errno));
			close(fd);
		}
	}
	if (cmdline_get(go_line, "time", val, sizeof(val))) {
		struct timespec ts = { 0 };
		char *dot;

		ts.tv_sec = strtoll(val, &dot, 10);
		if (*dot == '.')
			ts.tv_nsec = strtol(dot + 1, NULL, 10);
		if (clock_settime(CLOCK_REALTIME, &ts) < 0)
			say("# kstall-agent: clock_settime: %s", strerror(errno));
	}
}

static void unhex(const char *hex, char *out, size_t outlen)
{
	size_t n = 0;

	while (n + 1 < outlen && sscanf(hex + 2 * n, "%2hhx", (unsigned char *)&out[n]) == 1)
		n++;
	out[n] = 0;
}

/*
 * GO hostfs=TAG cmd=HEX cwd=HEX: a host command (`run:CMD`). The host's root
 * (an overlay the host made, writes going to its tmpfs) is mounted over
 * virtiofs at /host with the guest's own /proc, /sys and /dev in it; the
 * command runs chrooted there, by the host's /bin/sh, from its directory.
 */
static void mount_host(void)
{
	static const char *const binds[] = { "/proc", "/sys", "/dev" };
	char tag[64], hex[sizeof(host_cmd) * 2 + 1], path[64];

	if (!cmdline_get(go_line, "hostfs", tag, sizeof(tag)))
		return;
	if (cmdline_get(go_line, "cmd", hex, sizeof(hex)))
		unhex(hex, host_cmd, sizeof(host_cmd));
	if (cmdline_get(go_line, "cwd", hex, sizeof(hex)))
		unhex(hex, host_cwd, sizeof(host_cwd));
	mkdir("/host", 0755);
	if (mount(tag, "/host", "virtiofs", 0, NULL) < 0)
		fatal("cannot mount the host's root filesystem (virtiofs tag %s): %s (CONFIG_VIRTIO_FS?)", tag,
		      strerror(errno));
	for (size_t i = 0; i < sizeof(binds) / sizeof(binds[0]); i++) {
		snprintf(path, sizeof(path), "/host%s", binds[i]);
		mkdir(path, 0755);
		if (mount(binds[i], path, NULL, MS_BIND | MS_REC, NULL) < 0)
			say("# kstall-agent: bind %s: %s", binds[i], strerror(errno));
	}
	mkdir("/host/dev/shm", 01777);
	mount("kstall-shm", "/host/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777");
}

/* the child of run_repro, for a host command: into the host's root, then its shell */
static void exec_host_command(void)
{
	if (chroot("/host") < 0 || chdir("/") < 0)
		dprintf(STDOUT_FILENO, "# kstall-agent: chroot /host: %s\n", strerror(errno));
	else if (host_cwd[0] && chdir(host_cwd) < 0)
		dprintf(STDOUT_FILENO, "# kstall-agent: cd %s: %s (running from /)\n", host_cwd, strerror(errno));
	setenv("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", 1);
	setenv("HOME", "/root", 1);
	execl("/bin/sh", "sh", "-c", host_cmd, (char *)NULL);
	dprintf(STDOUT_FILENO, "# kstall-agent: exec the host's /bin/sh: %s\n", strerror(errno));
	_exit(127);
}

/*
 * A guest environment: etc/kstall/env.boot and etc/kstall/env beside the
 * agent, written by the host for a program that expects more of its machine
 * than a bare initramfs (syzkaller's reproducers:
 * repro/syzkaller/environment.toml). One step a line: env.boot's as the
 * guest boots (before its gate, and so in its snapshot), env's at the GO,
 * before the program starts:
 *   disk SERIAL DIR FSTYPE ro|rw  mount the virtio disk with that serial at DIR
 *   modprobe                      the kernel's request_module() runs this agent as
 *                                 /sbin/modprobe: it logs the request and runs busybox's
 *   nodes                         a device node for each module in modules.devname, whose
 *                                 first open loads it (as kmod's static-nodes)
 *   devlinks                      /dev/char/MAJ:MIN and /dev/block/MAJ:MIN for each device
 *                                 there is, as udev links them
 *   busybox                       /bin/sh and the usual commands, as busybox's links
 *   load NAME [PARAM=VALUE...]    modprobe NAME now, with those parameters
 *   write PATH VALUE              VALUE into PATH (a sysctl, a module parameter)
 *   mount SRC DIR FSTYPE OPTS     mount (OPTS "-": none)
 *   symlink TARGET LINK
 *   loopback                      bring lo up
 *   root DIR                      the program runs chrooted to DIR, a disk's mount point
 *                                 that gets the rest of the guest's root bound into it
 *                                 (see make_root)
 *   cwd DIR                       the program runs from DIR (inside root's, if one)
 *   trace                         count the program's system calls by result (tracefs hist)
 *   timebox                       run the program again and again until its time is up, then
 *                                 kill every process; an exit code does not end it
 *   watch-all                     the sleeping-hang watch covers every user process
 *   check PATH                    at the end, say whether PATH exists
 * A step that fails is said ("# kstall-env: ...") and the rest go on: the
 * host judges what the program lacked from what it asked for.
 */
#define MODPROBE_LOG "/tmp/kstall-modprobe.log"
#define TRACING "/sys/kernel/tracing"
#define MAX_CHECKS 32

static char env_cwd[256];
static char env_root[256];
static int env_trace, env_timebox;
static char env_checks[MAX_CHECKS][256];
static int env_nchecks;

static void env_say(const char *fmt, ...)
{
	char buf[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	say("# kstall-env: %s", buf);
}

/* mkdir -p */
static void make_dirs(const char *path, mode_t mode)
{
	char buf[256];

	snprintf(buf, sizeof(buf), "%s", path);
	for (char *p = buf + 1; *p; p++) {
		if (*p == '/') {
			*p = 0;
			mkdir(buf, mode);
			*p = '/';
		}
	}
	mkdir(buf, mode);
}

/* /dev/vdX of the virtio disk whose serial is serial */
static int find_disk(const char *serial, char *dev, size_t len)
{
	DIR *d = opendir("/sys/block");
	struct dirent *e;
	int found = 0;

	while (d && !found && (e = readdir(d))) {
		char path[300], val[128];

		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/sys/block/%s/serial", e->d_name);
		read_small(path, val, sizeof(val));
		if (!strcmp(val, serial)) {
			snprintf(dev, len, "/dev/%s", e->d_name);
			found = 1;
		}
	}
	if (d)
		closedir(d);
	return found;
}

/* run argv (a full path first), wait for it; its exit code, or 128 + signal */
static int run_wait(char *const argv[])
{
	int status = 0;
	pid_t pid = fork();

	if (pid == 0) {
		execv(argv[0], argv);
		_exit(127);
	}
	if (pid < 0)
		return -1;
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/*
 * `/sbin/modprobe -q -- NAME`, as the kernel's request_module() runs it:
 * busybox's modprobe does the work, and each request and how it ended is
 * appended to MODPROBE_LOG ("STATUS NAME"), which the agent reports at the
 * end: what the program asked the kernel for that the kernel could not find.
 */
static int modprobe_main(int argc, char **argv)
{
	char busybox[300], line[300];
	char *args[16];
	int n = 0, status, fd;

	find_base_dir();
	snprintf(busybox, sizeof(busybox), "%s/bin/busybox", base_dir);
	args[n++] = busybox;
	for (int i = 1; i < argc && n < 15; i++)
		args[n++] = argv[i];
	args[n] = NULL;
	args[0] = busybox;
	status = fork();
	if (status == 0) {
		args[0] = "modprobe";	/* busybox picks its applet by argv[0] */
		execv(busybox, args);
		_exit(127);
	}
	if (status < 0)
		return 1;
	while (waitpid(status, &status, 0) < 0 && errno == EINTR)
		;
	status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
	/* the module is the first word that is no option: parameters may follow it */
	for (n = 1; n < argc && argv[n][0] == '-'; n++)
		;
	fd = open(MODPROBE_LOG, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
	if (fd >= 0 && n < argc) {
		snprintf(line, sizeof(line), "%d %s\n", status, argv[n]);
		say_fd(fd, line, strlen(line));	/* one write: O_APPEND keeps lines whole */
	}
	if (fd >= 0)
		close(fd);
	return status;
}

/* modules.devname: "fuse fuse c10:229" -> /dev/fuse, whose open loads fuse */
static void static_nodes(void)
{
	char path[300], line[256], name[64], node[128], type;
	struct utsname u;
	unsigned maj, min;
	int made = 0;
	FILE *f;

	uname(&u);
	snprintf(path, sizeof(path), "/lib/modules/%s/modules.devname", u.release);
	f = fopen(path, "r");
	if (!f) {
		env_say("nodes: %s: %s", path, strerror(errno));
		return;
	}
	while (fgets(line, sizeof(line), f)) {
		if (sscanf(line, "%63s %127s %c%u:%u", name, node, &type, &maj, &min) != 5 ||
		    (type != 'c' && type != 'b') || strstr(node, ".."))
			continue;
		snprintf(path, sizeof(path), "/dev/%s", node);
		if (strrchr(node, '/')) {
			char dir[300];

			snprintf(dir, sizeof(dir), "%s", path);
			*strrchr(dir, '/') = 0;
			make_dirs(dir, 0755);
		}
		if (mknod(path, (type == 'c' ? S_IFCHR : S_IFBLK) | 0600, makedev(maj, min)) == 0)
			made++;
	}
	fclose(f);
	env_say("nodes: %d device nodes load their modules on first open", made);
}

/* udev's links by number, which syzkaller's syz_open_dev(0xc, MAJ, MIN) opens:
 * /sys/dev/char/4:1/uevent says DEVNAME=tty1, so /dev/char/4:1 -> ../tty1 */
static void device_links(void)
{
	static const char *const kinds[] = { "char", "block" };
	int made = 0;

	for (size_t k = 0; k < 2; k++) {
		char dir[64], path[600], uevent[1024], link[600], target[300];
		struct dirent *e;
		DIR *d;

		snprintf(dir, sizeof(dir), "/sys/dev/%s", kinds[k]);
		d = opendir(dir);
		if (!d) {
			env_say("devlinks: %s: %s", dir, strerror(errno));
			continue;
		}
		snprintf(link, sizeof(link), "/dev/%s", kinds[k]);
		mkdir(link, 0755);
		while ((e = readdir(d))) {
			char *name;

			if (e->d_name[0] == '.')
				continue;
			snprintf(path, sizeof(path), "%s/%s/uevent", dir, e->d_name);
			read_small(path, uevent, sizeof(uevent));
			name = strstr(uevent, "DEVNAME=");
			if (!name || strstr(name, ".."))
				continue;
			name += strlen("DEVNAME=");
			name[strcspn(name, "\n")] = 0;
			snprintf(target, sizeof(target), "../%s", name);
			snprintf(link, sizeof(link), "/dev/%s/%s", kinds[k], e->d_name);
			if (symlink(target, link) == 0)
				made++;
		}
		closedir(d);
	}
	env_say("devlinks: %d links to devices by number", made);
}

/*
 * env root DIR: the program's root is DIR, a disk's mount point (ext4), not
 * the initramfs: syzbot runs a reproducer on its VM's ext4 root, and calls
 * like pivot_root(2) fail EINVAL on the initramfs's rootfs ("the current
 * root is on the rootfs mount"), so a program that pivots into the fuse
 * mount it made never hangs in its lookups. Every other top-level
 * directory of the guest's root (its programs, /dev, /proc, /sys, /tmp,
 * /lib/modules ...) is bound into DIR, recursively, and DIR's own root/
 * is the disk's, root's home.
 */
static void make_root(const char *dir)
{
	char home[300];
	struct dirent *e;
	DIR *d = opendir("/");
	int bound = 0;

	snprintf(env_root, sizeof(env_root), "%s", dir);
	while (d && (e = readdir(d))) {
		char path[512], target[800], link[300];
		struct stat st;
		ssize_t n;

		snprintf(path, sizeof(path), "/%s", e->d_name);
		if (e->d_name[0] == '.' || !strcmp(e->d_name, "root") || !strcmp(e->d_name, "lost+found") ||
		    !strcmp(path, dir) || lstat(path, &st) < 0)
			continue;
		snprintf(target, sizeof(target), "%s/%s", dir, e->d_name);
		if (S_ISLNK(st.st_mode) && (n = readlink(path, link, sizeof(link) - 1)) > 0) {
			link[n] = 0;
			if (symlink(link, target) < 0 && errno != EEXIST)
				env_say("root: symlink %s: %s", target, strerror(errno));
			continue;
		}
		if (!S_ISDIR(st.st_mode))
			continue;
		mkdir(target, 0755);
		if (mount(path, target, NULL, MS_BIND | MS_REC, NULL) < 0)
			env_say("root: bind %s: %s", path, strerror(errno));
		else
			bound++;
	}
	if (d)
		closedir(d);
	snprintf(home, sizeof(home), "%s/root", dir);
	make_dirs(home, 0700);
	env_say("root: %s, with %d of the guest's directories bound into it", dir, bound);
}

static void loopback_up(void)
{
	struct ifreq ifr = { 0 };
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);

	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "lo");
	if (fd < 0 || ioctl(fd, SIOCGIFFLAGS, &ifr) < 0 ||
	    (ifr.ifr_flags |= IFF_UP, ioctl(fd, SIOCSIFFLAGS, &ifr) < 0))
		env_say("loopback: %s", strerror(errno));
	if (fd >= 0)
		close(fd);
}

/* the program's system calls, counted by the kernel as they return: every
 * call by number, the failed ones by number and error; nothing is counted
 * until a program's process names itself in set_event_pid (event-fork adds
 * its children) */
static void trace_setup(void)
{
	char none[32];
	/* the last pid: no task has it yet (the kernel takes pids from the bottom) */
	const char *const steps[][2] = {
		{ TRACING "/set_event_pid", none },
		{ TRACING "/options/event-fork", "1" },
		{ TRACING "/events/raw_syscalls/sys_exit/trigger", "hist:keys=id.syscall:size=1024" },
		{ TRACING "/events/raw_syscalls/sys_exit/trigger", "hist:keys=id.syscall,ret:size=2048 if ret < 0" },
	};

	read_small("/proc/sys/kernel/pid_max", none, sizeof(none));
	snprintf(none, sizeof(none), "%ld", strtol(none, NULL, 10) - 1);
	for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]); i++) {
		int fd = open(steps[i][0], O_WRONLY | O_APPEND | O_CLOEXEC);

		if (fd < 0 || write(fd, steps[i][1], strlen(steps[i][1])) < 0) {
			env_say("trace: %s: %s", steps[i][0], strerror(errno));
			env_trace = 0;
		}
		if (fd >= 0)
			close(fd);
		if (!env_trace)
			return;
	}
}

static void env_step(char *line)
{
	char a[256], b[256], c[64], d[256];
	int fd;

	line[strcspn(line, "\n")] = 0;
	if (sscanf(line, "disk %127s %255s %63s %255s", a, b, c, d) == 4) {
		char dev[300];

		make_dirs(b, 0755);
		if (!find_disk(a, dev, sizeof(dev)))
			env_say("disk %s: no virtio disk with that serial", a);
		else if (mount(dev, b, c, !strcmp(d, "ro") ? MS_RDONLY : 0, NULL) < 0)
			env_say("disk %s: mount %s on %s (%s): %s", a, dev, b, c, strerror(errno));
	} else if (!strcmp(line, "modprobe")) {
		char self[256];
		ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);

		self[n > 0 ? n : 0] = 0;
		mkdir("/sbin", 0755);
		unlink("/sbin/modprobe");
		if (symlink(self, "/sbin/modprobe") < 0)
			env_say("modprobe: %s", strerror(errno));
		write_file("/proc/sys/kernel/modprobe", "/sbin/modprobe");
	} else if (!strcmp(line, "nodes")) {
		static_nodes();
	} else if (!strcmp(line, "devlinks")) {
		device_links();
	} else if (!strcmp(line, "busybox")) {
		char path[300];
		char *argv[] = { path, "--install", NULL };

		snprintf(path, sizeof(path), "%s/bin/busybox", base_dir);
		/* it hard-links each applet where it belongs (all on the initramfs'
		 * root), and makes no directory */
		make_dirs("/sbin", 0755);
		make_dirs("/usr/bin", 0755);
		make_dirs("/usr/sbin", 0755);
		if (run_wait(argv))
			env_say("busybox --install: %s", strerror(errno));
	} else if (sscanf(line, "load %63s", c) == 1) {
		/* its parameters follow it, a word each */
		char *argv[16] = { "/sbin/modprobe", "-q", "--", c }, *save = NULL;
		int n = 4, code;

		snprintf(d, sizeof(d), "%s", line + strlen("load ") + strlen(c));
		for (char *w = strtok_r(d, " ", &save); w && n < 15; w = strtok_r(NULL, " ", &save))
			argv[n++] = w;
		argv[n] = NULL;
		code = run_wait(argv);

		if (code)
			env_say("load %s: modprobe exited %d", c, code);
	} else if (sscanf(line, "write %255s %255[^\n]", a, b) == 2) {
		fd = open(a, O_WRONLY | O_CLOEXEC);
		if (fd < 0 || write(fd, b, strlen(b)) < 0)
			env_say("write %s: %s", a, strerror(errno));
		if (fd >= 0)
			close(fd);
	} else if (sscanf(line, "mount %255s %255s %63s %255s", a, b, c, d) == 4) {
		make_dirs(b, 0755);
		if (mount(a, b, c, 0, strcmp(d, "-") ? d : NULL) < 0)
			env_say("mount %s on %s (%s): %s", a, b, c, strerror(errno));
	} else if (sscanf(line, "symlink %255s %255s", a, b) == 2) {
		if (symlink(a, b) < 0 && errno != EEXIST)
			env_say("symlink %s: %s", b, strerror(errno));
	} else if (!strcmp(line, "loopback")) {
		loopback_up();
	} else if (sscanf(line, "root %255s", a) == 1) {
		make_root(a);
	} else if (sscanf(line, "cwd %255s", a) == 1) {
		char inside[520];

		snprintf(env_cwd, sizeof(env_cwd), "%s", a);
		snprintf(inside, sizeof(inside), "%s%s", env_root, a);	/* inside the root it will have */
		make_dirs(inside, 0755);
	} else if (!strcmp(line, "trace")) {
		env_trace = 1;
		trace_setup();
	} else if (!strcmp(line, "timebox")) {
		env_timebox = 1;
	} else if (!strcmp(line, "watch-all")) {
		watch_all = 1;
	} else if (sscanf(line, "check %127s", a) == 1 && env_nchecks < MAX_CHECKS) {
		snprintf(env_checks[env_nchecks++], sizeof(env_checks[0]), "%s", a);
	} else if (line[0] && line[0] != '#') {
		env_say("unknown step: %s", line);
	}
}

static void setup_env(const char *name)
{
	char path[300], line[600];
	FILE *f;

	snprintf(path, sizeof(path), "%s/etc/kstall/%s", base_dir, name);
	f = fopen(path, "r");
	if (!f)
		return;
	while (fgets(line, sizeof(line), f))
		env_step(line);
	fclose(f);
}

/* a checked path: "#" (syzkaller's syz_open_dev) stands for a number chosen
 * at run time, so /dev/loop# is there when /dev/loop<any number> or /dev/loop is */
static int path_exists(const char *path)
{
	char pattern[600], bare[256];
	struct stat st;
	glob_t g;
	int found;

	if (!strchr(path, '#'))
		return stat(path, &st) == 0;
	pattern[0] = bare[0] = 0;
	for (const char *p = path; *p; p++) {
		size_t n = strlen(pattern), b = strlen(bare);

		if (*p == '#')
			snprintf(pattern + n, sizeof(pattern) - n, "[0-9]*");
		else if (n + 1 < sizeof(pattern))
			pattern[n] = *p, pattern[n + 1] = 0;
		if (*p != '#' && b + 1 < sizeof(bare))
			bare[b] = *p, bare[b + 1] = 0;
	}
	found = glob(pattern, 0, NULL, &g) == 0 && g.gl_pathc > 0;
	globfree(&g);
	return found || stat(bare, &st) == 0;
}

/* What the environment saw of the program, after it: the system calls the
 * kernel counted, the modules it asked for, the paths it checks. */
static void report_env(void)
{
	char line[512];
	FILE *f;
	int n = 0;

	if (env_trace && (f = fopen(TRACING "/events/raw_syscalls/sys_exit/hist", "r"))) {
		while (fgets(line, sizeof(line), f) && n < 4000)
			if (line[0] == '{') {
				line[strcspn(line, "\n")] = 0;
				say("KSTALL hist sys_exit %s", line);
				n++;
			}
		fclose(f);
	}
	if ((f = fopen(MODPROBE_LOG, "r"))) {
		int status;
		char name[256];

		for (n = 0; fgets(line, sizeof(line), f) && n < 1000; n++)
			if (sscanf(line, "%d %255s", &status, name) == 2)
				say("KSTALL modprobe status=%d name=%s", status, name);
		fclose(f);
	}
	for (int i = 0; i < env_nchecks; i++)
		say("KSTALL check path=%s exists=%d", env_checks[i], path_exists(env_checks[i]));
}

/* the status of the program's own process, when a reaper took it first */
static atomic_int reaped_status = -1;

/*
 * Whether the program ran as intended: a run that hangs nothing is evidence
 * only if the kernel let the program run (harness/analysis/starvation.py
 * judges it). While the program runs, health_watch samples the kernel once a
 * second; a second is starved when in it the OOM killer killed a task
 * (/proc/vmstat oom_kill), the guest's available memory was under
 * lowmem_pct of its total, every runnable task was stalled on memory for
 * over memstall_pct of it (PSI's "full"), or its tasks reached pids_pct of
 * the kernel's limit (threads-max, pid_max). The GO's health=L,P,M sets the
 * three (the host's data). After the program:
 *   KSTALL health secs=N starved_s=N oom_kills=N oom_s=N lowmem_s=N memstall_s=N pids_s=N
 *                 min_avail_kb=K total_kb=K max_tasks=T task_limit=L psi=0|1
 *                 killed=SIG:N,.. cpu_ms=C busy_ms=B
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
	}
	return NULL;
}

/* a process of the program's that the agent reaped: a signal that ended it
 * while the agent had sent none (kill_all) is counted */
static void health_reaped(int status, int agent_killed)
{
	if (WIFSIGNALED(status) && !agent_killed && WTERMSIG(status) > 0 && WTERMSIG(status) < 65)
		health.killed[WTERMSIG(status)]++;
}

static pthread_t health_thread;
static unsigned long long health_busy0;
static struct rusage health_usage0;

static void health_start(void)
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

static void health_say(void)
{
	char killed[256] = "";
	struct rusage u;

	atomic_store(&health_stop, 1);
	pthread_join(health_thread, NULL);
	getrusage(RUSAGE_CHILDREN, &u);
	for (int s = 1; s < 65; s++) {
		size_t len = strlen(killed);

		if (health.killed[s] && len < sizeof(killed) - 32)
			snprintf(killed + len, sizeof(killed) - len, "%s%d:%llu", len ? "," : "", s, health.killed[s]);
	}
	say("KSTALL health secs=%llu starved_s=%llu oom_kills=%llu oom_s=%llu lowmem_s=%llu memstall_s=%llu "
	    "pids_s=%llu min_avail_kb=%llu total_kb=%llu max_tasks=%llu task_limit=%llu psi=%d killed=%s "
	    "cpu_ms=%llu busy_ms=%llu",
	    health.secs, health.starved, health.oom_kills, health.oom_s, health.lowmem_s, health.memstall_s,
	    health.pids_s, health.min_avail_kb == ~0ULL ? 0 : health.min_avail_kb, health.total_kb,
	    health.max_tasks, health.task_limit, health.psi, killed[0] ? killed : "-",
	    tv_ms(u.ru_utime) + tv_ms(u.ru_stime) - tv_ms(health_usage0.ru_utime) - tv_ms(health_usage0.ru_stime),
	    busy_ms() - health_busy0);
}

/* the threads of user process pid that live on (not exited: a leader that
 * exited leaves its workers to run or sleep on); with say, each is said as
 * "KSTALL leftover ..." with the seconds since it was killed */
static int live_threads(int pid, int say, unsigned long long secs)
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
		if (!p || !p[1] || kernel_thread(p) || p[2] == 'Z' || p[2] == 'X')
			continue;
		live++;
		if (say)
			say_task("leftover", task_dir, e->d_name, pid, secs, NULL);
	}
	if (d)
		closedir(d);
	return live;
}

/* SIGKILL every user process but this agent, reaping them. Every thread of
 * each is looked at; those still there after bound_ms cannot die (asleep in
 * D state, or running on in the kernel) and are said, once, as
 * "KSTALL leftover ..." lines, whatever their state. */
static void kill_all(unsigned bound_ms, int say_leftovers)
{
	for (unsigned waited = 0;; waited += 50) {
		DIR *d = opendir("/proc");
		struct dirent *e;
		int left = 0, status;
		pid_t pid;

		while (d && (e = readdir(d))) {
			int n = atoi(e->d_name);

			if (n <= 1 || n == getpid())
				continue;
			if (!live_threads(n, say_leftovers && waited >= bound_ms, waited / 1000))
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

/* the program's child, before it becomes the program: where it runs, and
 * (env trace) its system calls counted from here on, its children's too */
static void enter_env(void)
{
	if (env_trace) {
		char pid[16];

		snprintf(pid, sizeof(pid), "%d", getpid());
		write_file(TRACING "/set_event_pid", pid);
	}
	if (env_root[0] && (chdir(env_root) < 0 || chroot(".") < 0))
		dprintf(STDOUT_FILENO, "# kstall-agent: chroot %s: %s\n", env_root, strerror(errno));
	if (env_cwd[0] && chdir(env_cwd) < 0)
		dprintf(STDOUT_FILENO, "# kstall-agent: cd %s: %s\n", env_cwd, strerror(errno));
}

/* run /bin/NAME ARGS..., forward its output a line at a time; exit code.
 * deadline (mono_ns, 0: none): then every process is killed (env timebox)
 * and *cut is set */
static int run_repro(const char *name, char *args, unsigned long long deadline, int *cut)
{
	char path[512], *argv[64], linebuf[4096];
	int argc = 0, pfd[2], status = 0;
	unsigned long long killed_at = 0, reaped_at = 0;
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

		if (deadline && !killed_at && mono_ns() >= deadline) {
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
 * obeyed: the host judges them. Tasks still there dying_s after the kill
 * (the GO's dying=S: long enough for the kernel's hung-task detector to
 * speak first) cannot die, and are said.
 */
static int run_timeboxed(const char *name, const char *args, unsigned long long seconds, unsigned dying_s)
{
	unsigned long long start = mono_ns(), deadline = start + seconds * 1000000000ULL, done = 0, failed = 0;
	char argv_copy[1024], codes[256] = "";
	int cut = 0, last = 0;

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
	kill_all(dying_s * 1000, 1);	/* what runs still, and what does not die */
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
static int run_repeated(const char *name, const char *args, unsigned long long repeat,
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

int main(int argc, char **argv)
{
	char cmdline[4096] = "", repro[64] = "none", args[1024] = "", val[32], init_comm[32] = "";
	struct utsname u;
	pthread_t hb, cmd;
	int fd, code = 0;

	if (argc == 3 && !strcmp(argv[1], "--core"))
		return store_core();
	if (strstr(argv[0], "modprobe"))	/* the kernel's request_module(), env modprobe */
		return modprobe_main(argc, argv);
	if (getpid() == 1)
		mount_all();
	find_base_dir();
	fd = open("/proc/cmdline", O_RDONLY);
	if (fd >= 0) {
		if (read(fd, cmdline, sizeof(cmdline) - 1) < 0)
			cmdline[0] = 0;
		close(fd);
	}
	write_file("/proc/sys/kernel/perf_event_paranoid", "-1");
	write_file("/proc/sys/kernel/kptr_restrict", "0");
	/* KERN_INFO too: "NMI handler ... took too long" is printed at that level */
	write_file("/proc/sys/kernel/printk", "7 4 1 7");

	cmdline_get(cmdline, "kstall.repro", repro, sizeof(repro));
	cmdline_get(cmdline, "kstall.args", args, sizeof(args));
	if (cmdline_get(cmdline, "kstall.hb_ms", val, sizeof(val)) && atoi(val) > 0)
		hb_ms = atoi(val);

	load_modules();
	agent_fd = open_port(AGENT_PORT);
	if (agent_fd < 0)
		fatal("no virtio port %s: the kernel has no virtio console (CONFIG_VIRTIO_CONSOLE, "
		      "CONFIG_VIRTIO_PCI), or they are modules kstall did not load", AGENT_PORT);
	uname(&u);
	fd = open("/proc/1/comm", O_RDONLY);
	if (fd >= 0) {
		ssize_t n = read(fd, init_comm, sizeof(init_comm) - 1);

		init_comm[n > 0 ? n : 0] = 0;
		init_comm[strcspn(init_comm, "\n")] = 0;
		close(fd);
	}
	say("KSTALL hello uname=%s cpus=%ld init=%s", u.release, sysconf(_SC_NPROCESSORS_ONLN),
	    init_comm[0] ? init_comm : "?");

	/* heartbeats first: a guest that freezes while exporting symbols is a freeze too */
	pthread_create(&hb, NULL, heartbeat, NULL);
	if (cmdline_get(cmdline, "kstall.syms", val, sizeof(val)) && val[0] == '1')
		send_kallsyms();
	/* what is the same for every run of this guest, before its snapshot:
	 * module loads and tracing flip the kernel's static keys, text a
	 * running program must not be executing while it is patched */
	setup_env("env.boot");
	if (cmdline_get(cmdline, "kstall.gate", val, sizeof(val)) && val[0] == '1' && agent_fd >= 0) {
		say("KSTALL ready");
		host_commands("GO");
		apply_go();
		cmdline_get(go_line, "repro", repro, sizeof(repro));
		cmdline_get(go_line, "args", args, sizeof(args));
		if (cmdline_get(go_line, "syms", val, sizeof(val)) && val[0] == '1')
			send_kallsyms();
		mount_host();
		setup_env("env");
	}
	if (agent_fd >= 0)
		pthread_create(&cmd, NULL, command_reader, NULL);
	if (cmdline_get(go_line, "sleep", val, sizeof(val)) && atoi(val) > 0) {
		pthread_t sleeper;

		sleep_after_s = atoi(val);
		pthread_create(&sleeper, NULL, sleep_watch, NULL);
	}
	if (strcmp(repro, "none") != 0) {
		unsigned long long repeat = 0, seconds = 0;

		health_start();

		if (cmdline_get(go_line, "repeat", val, sizeof(val)))
			repeat = strtoull(val, NULL, 10);
		if (cmdline_get(go_line, "seconds", val, sizeof(val)))
			seconds = strtoull(val, NULL, 10);
		if (env_timebox && seconds)
			code = run_timeboxed(repro, args, seconds,
					     cmdline_get(go_line, "dying", val, sizeof(val)) ? atoi(val) : 5);
		else
			code = repeat ? run_repeated(repro, args, repeat, seconds) : run_repro(repro, args, 0, NULL);
		health_say();
		report_env();
	}
	if (atomic_load(&core_requested))
		send_core();
	/* a port write returns once its data is queued: the symbols' tail may
	 * not have crossed yet (bounded: an old host never says it) */
	for (int i = 0; i < 2000 && agent_fd >= 0 && atomic_load(&syms_sent) &&
	     !atomic_load(&syms_acked); i++)
		usleep(10000);
	say("KSTALL exit code=%d", code);
	atomic_store(&hb_stop, 1);
	pthread_join(hb, NULL);
	say("KSTALL poweroff");
	power_off();
	return 0;
}
