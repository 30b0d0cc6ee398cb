// SPDX-License-Identifier: GPL-2.0
/* The bare guest made usable: where the agent's files are, the modules the
 * host listed for it to load first, the pseudo file systems. */
#include "agent.h"

char base_dir[256] = "";	/* where the agent's executable is: "" for / */

/* bin/ and lib/ sit beside the agent: / in the initramfs, the install
 * directory in a booted image */
void find_base_dir(void)
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
void load_modules(void)
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

void mount_all(void)
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
