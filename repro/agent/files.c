// SPDX-License-Identifier: GPL-2.0
/* Small files: a value written, a /proc file read, a directory made. The
 * bottom of the agent, beside channel.c: it calls nothing of the agent's. */
#include "agent.h"

void write_file(const char *path, const char *val)
{
	int fd = open(path, O_WRONLY);

	if (fd < 0) {
		fprintf(stderr, "kstall-agent: %s: %s\n", path, strerror(errno));
		return;
	}
	if (write(fd, val, strlen(val)) < 0)
		fprintf(stderr, "kstall-agent: %s: %s\n", path, strerror(errno));
	close(fd);
}

/* a small /proc file into out, newline-trimmed; "" if unreadable */
void read_small(const char *path, char *out, size_t len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n = fd >= 0 ? read(fd, out, len - 1) : -1;

	out[n > 0 ? n : 0] = 0;
	while (n > 0 && out[n - 1] == '\n')
		out[--n] = 0;
	if (fd >= 0)
		close(fd);
}

/* mkdir -p */
void make_dirs(const char *path, mode_t mode)
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
