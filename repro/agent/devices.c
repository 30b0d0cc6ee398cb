// SPDX-License-Identifier: GPL-2.0
/* Devices and modules as udev and kmod would give them: request_module()'s
 * modprobe (logged), a node per module device, links by number, and the
 * driver of a device that appears loaded by its alias. */
#include "agent.h"
#include <linux/netlink.h>

/* run argv (a full path first), wait for it; its exit code, or 128 + signal */
int run_wait(char *const argv[])
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

/* what udev does for a device that appears (a uevent "add" with a
 * MODALIAS): its driver's module loaded, through modprobe (and so the
 * account). syzbot's kernels build the drivers in; a distro's load them
 * so, and a program's emulated USB device reaches the kernel's driver for
 * it only then. Events are handled in turn; a flood loses some. */
static void *uevent_loop(void *arg)
{
	int fd = (int)(long)arg;
	char buf[8192];

	for (;;) {
		ssize_t n = recv(fd, buf, sizeof(buf) - 1, 0);
		const char *action = NULL, *alias = NULL;

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		buf[n] = 0;
		for (char *p = buf; p < buf + n; p += strlen(p) + 1) {
			if (!strncmp(p, "ACTION=", 7))
				action = p + 7;
			else if (!strncmp(p, "MODALIAS=", 9))
				alias = p + 9;
		}
		if (action && alias && !strcmp(action, "add") && strlen(alias) < 200) {
			char *argv[] = { "/sbin/modprobe", "-q", "--", (char *)alias, NULL };

			run_wait(argv);
		}
	}
	close(fd);
	return NULL;
}

/* what udev's coldplug does for the input devices the boot made before
 * anyone listened (vivid's remote controls, a keyboard): their handlers'
 * modules (evdev, by the alias every input device matches), so that
 * /dev/input/event# is there, as on a distro's machine and syzbot's (built
 * in there), for a program that opens it before its own device appears */
static int coldplug_input(void)
{
	DIR *d = opendir("/sys/class/input");
	struct dirent *e;
	int loaded = 0;

	if (!d)
		return 0;
	while ((e = readdir(d))) {
		char path[300], alias[256];
		char *argv[] = { "/sbin/modprobe", "-q", "--", alias, NULL };

		if (strncmp(e->d_name, "input", 5))
			continue;
		snprintf(path, sizeof(path), "/sys/class/input/%s/modalias", e->d_name);
		alias[0] = 0;
		read_small(path, alias, sizeof(alias));
		alias[strcspn(alias, "\n")] = 0;
		if (alias[0] && run_wait(argv) == 0)
			loaded++;
	}
	closedir(d);
	return loaded;
}

void start_uevents(void)
{
	struct sockaddr_nl sa = { .nl_family = AF_NETLINK, .nl_groups = 1 };
	int fd = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_KOBJECT_UEVENT);
	pthread_t t;

	if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
	    pthread_create(&t, NULL, uevent_loop, (void *)(long)fd) != 0) {
		env_say("uevents: %s", strerror(errno));
		if (fd >= 0)
			close(fd);
		return;
	}
	pthread_detach(t);
	env_say("uevents: a device's driver loads by its alias as it appears; the boot's input devices: "
		"%d alias(es) loaded", coldplug_input());
}

/*
 * `/sbin/modprobe -q -- NAME`, as the kernel's request_module() runs it:
 * busybox's modprobe does the work, and each request and how it ended is
 * appended to MODPROBE_LOG ("STATUS NAME"), which the agent reports at the
 * end: what the program asked the kernel for that the kernel could not find.
 */
int modprobe_main(int argc, char **argv)
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
void static_nodes(void)
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
void device_links(void)
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
