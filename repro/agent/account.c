// SPDX-License-Identifier: GPL-2.0
/* What the environment saw of the program, after it: its system calls as the
 * kernel counted them, the modules it asked for, the paths it checks. */
#include "agent.h"

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
void report_env(void)
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
