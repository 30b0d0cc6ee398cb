// SPDX-License-Identifier: GPL-2.0
/* The agent's main(): the guest's /init, wiring the other files together. */
#include "agent.h"

/* the host's commands and the jobs that serve them (channel.c reads them) */
static const struct {
	const char *word;
	void (*serve)(const char *arg);
} served[] = {
	{ "STOP", stop_command },	/* end the program early, its results still printed */
	{ "CORE", core_command },	/* dump a stuck program's threads and core */
	{ "CORE-OK", core_ok_command },	/* the host has the core */
	{ "SYMS-OK", syms_ok_command },	/* the host has the symbols */
	{ "TASKS", tasks_command },	/* these tasks' stacks and states */
	{ "HOLD", hold_command },	/* no time-up kill for S seconds */
};

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
	for (size_t i = 0; i < sizeof(served) / sizeof(served[0]); i++)
		on_command(served[i].word, served[i].serve);
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
	/* the modules those steps loaded, and what they asked for in turn, are the
	 * environment's (each load says how it went): the requests the account
	 * reports are the program's alone (sd_mod's crc-t10dif asks for
	 * crypto-crct10dif-all, which no module answers) */
	mkdir(AGENT_DIR, 0700);
	unlink(MODPROBE_LOG);
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
		if (env_timebox && seconds) {
			unsigned dying = cmdline_get(go_line, "dying", val, sizeof(val)) ? atoi(val) : 5;

			code = run_timeboxed(repro, args, seconds, dying,
					     cmdline_get(go_line, "detect", val, sizeof(val)) ? atoi(val) : 0);
		}
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
