// SPDX-License-Identifier: GPL-2.0
/* What the host's debugger needs: the kernel's symbols and BTF, and a stuck
 * program's threads (from /proc) and core. */
#include "agent.h"

char repro_exe[256];
atomic_int core_requested;
atomic_int core_acked;	/* the host has the whole core ("CORE-OK") */
atomic_int syms_sent;	/* the symbols went to the host... */
atomic_int syms_acked;	/* ...and it has them all ("SYMS-OK") */

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
void send_kallsyms(void)
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

/* "[<0>] futex_wait_queue+0x5f/0x90\n[<0>] ..." -> "futex_wait_queue+0x5f/0x90,..." */
void flatten_stack(char *stack)
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
/* the host's CORE, CORE-OK and SYMS-OK */
void core_command(const char *arg)
{
	(void)arg;
	if (atomic_load(&repro_pid) > 0 && !atomic_load(&core_requested))
		request_core(atomic_load(&repro_pid));
}

void core_ok_command(const char *arg)
{
	(void)arg;
	atomic_store(&core_acked, 1);
}

void syms_ok_command(const char *arg)
{
	(void)arg;
	atomic_store(&syms_acked, 1);
}

void request_core(int pid)
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
int store_core(void)
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
void send_core(void)
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
