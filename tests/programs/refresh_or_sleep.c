// SPDX-License-Identifier: GPL-2.0
/*
 * A user's reproducer that hangs two different ways, for the bisection test
 * in which one step shows a different hang: on the kernel release named by
 * KSTALL_OTHER_HANG_ON (compiled in, default "6.16.3") it makes
 * pipe_sleeper.c's sleeping hang; on every other kernel it is
 * other_refresh.c. A bisection must skip that step, not count it.
 */
#define _GNU_SOURCE	/* before any header: the programs below need it */
#include <string.h>
#include <sys/utsname.h>

#define main refresh_main
#include "other_refresh.c"
#undef main
#define main sleeper_main
#include "pipe_sleeper.c"
#undef main

#ifndef KSTALL_OTHER_HANG_ON
#define KSTALL_OTHER_HANG_ON "6.16.3+"
#endif

int main(int argc, char **argv)
{
	struct utsname u;

	uname(&u);
	if (strncmp(u.release, KSTALL_OTHER_HANG_ON, strlen(KSTALL_OTHER_HANG_ON)) == 0)
		return sleeper_main();
	return refresh_main(argc, argv);
}
