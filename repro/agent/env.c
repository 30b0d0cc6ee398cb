// SPDX-License-Identifier: GPL-2.0
/* A guest environment's steps (env.boot, env): the machine a program such as
 * a syzkaller reproducer expects, set up as data the host wrote. */
#include "agent.h"

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
 *   root DIR                      the program's root is DIR, a disk's mount point (run.c, enter_root)
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
char env_cwd[256];
char env_root[256];

int env_trace, env_timebox;

char env_checks[MAX_CHECKS][256];
int env_nchecks;

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
	} else if (!strcmp(line, "uevents")) {
		start_uevents();
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

void setup_env(const char *name)
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
