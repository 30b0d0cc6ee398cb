// SPDX-License-Identifier: GPL-2.0
/* The agent's channel to the host: lines out (say), blobs out (send_blob), the
 * host's commands in (host_commands, each served by the job on_command named),
 * the clock, and the kernel command line and GO read. It calls nothing of the
 * agent's but files.c: every other file is above it. */
#include "agent.h"

unsigned long long mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (unsigned long long)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

int agent_fd = -1;
static pthread_mutex_t agent_lock = PTHREAD_MUTEX_INITIALIZER;
char go_line[8192];	/* the host's GO, with its parameters */

void say_fd(int fd, const char *buf, size_t len)
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
void say(const char *fmt, ...)
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

void env_say(const char *fmt, ...)
{
	char buf[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	say("# kstall-env: %s", buf);
}

void power_off(void)
{
	sync();
	reboot(RB_POWER_OFF);
	_exit(0);	/* not allowed to (not root): the host sees the exit */
}

/* The agent cannot do its job: say why on the console (which the host always
 * reads, whatever else is missing) and on the agent port if there is one. */
void fatal(const char *fmt, ...)
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

/* value of key=... in /proc/cmdline, copied into out; 0 if absent */
int cmdline_get(const char *cmdline, const char *key, char *out, size_t outlen)
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
int open_port(const char *name)
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
int send_blob(const char *tag, const char *buf, size_t len)
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

/* the host's commands, each served by the job it concerns: registered by
 * main.c (on_command), so that the wire calls nothing above it */
#define MAX_COMMANDS 16
static struct {
	const char *word;
	void (*serve)(const char *arg);
} commands[MAX_COMMANDS];
static int n_commands;

void on_command(const char *word, void (*serve)(const char *arg))
{
	if (n_commands < MAX_COMMANDS) {
		commands[n_commands].word = word;
		commands[n_commands++].serve = serve;
	}
}

/* "WORD" or "WORD ARG": its server, with ARG ("" for none) */
static void serve(const char *line)
{
	for (int i = 0; i < n_commands; i++) {
		size_t n = strlen(commands[i].word);

		if (!strncmp(line, commands[i].word, n) && (line[n] == 0 || line[n] == ' ')) {
			commands[i].serve(line[n] ? line + n + 1 : "");
			return;
		}
	}
}

/* read host commands a line at a time until `until` arrives (NULL: forever),
 * each served as it comes (on_command) */
void host_commands(const char *until)
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
			serve(buf);
			have -= nl + 1 - buf;
			memmove(buf, nl + 1, have + 1);
		}
		if (have == sizeof(buf) - 1)
			have = 0;
	}
}

void *command_reader(void *arg)
{
	(void)arg;
	host_commands(NULL);
	return NULL;
}
