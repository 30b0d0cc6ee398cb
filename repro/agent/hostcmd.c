// SPDX-License-Identifier: GPL-2.0
/* A host command (run:CMD): the host's root over virtiofs, and the command
 * run there by the host's own shell. */
#include "agent.h"

char host_cmd[2048];	/* GO hostfs: the host command, run by the host's /bin/sh */
char host_cwd[1024];

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
void mount_host(void)
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
void exec_host_command(void)
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
