/* SPDX-License-Identifier: GPL-2.0 */
/* What kstall's BPF reproducers share on top of repro.h: libbpf's warnings as
 * TAP diagnostics, and the JIT turned on. Include after repro.h and <bpf/libbpf.h>. */
#ifndef KSTALL_BPF_REPRO_H
#define KSTALL_BPF_REPRO_H

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* one TAP diagnostic per line: a failed load's verifier log is multi-line */
static int libbpf_print(enum libbpf_print_level level, const char *fmt, va_list ap)
{
	char buf[8192], *line, *save = NULL;
	int n = 0;

	if (level != LIBBPF_WARN)
		return 0;
	vsnprintf(buf, sizeof(buf), fmt, ap);
	for (line = strtok_r(buf, "\n", &save); line && n < 60; line = strtok_r(NULL, "\n", &save), n++)
		ksft_print_msg("libbpf: %s\n", line);
	return 0;
}

/* The verifier takes callbacks (bpf_timer's, bpf_loop's) only into JITed
 * programs, and a kernel whose architecture does not default the JIT on
 * (Debian's ppc64el, s390x) boots with net.core.bpf_jit_enable=0: turn it on
 * before loading; a kernel with BPF_JIT_ALWAYS_ON refuses the write, harmlessly. */
static void bpf_jit_on(void)
{
	FILE *f = fopen("/proc/sys/net/core/bpf_jit_enable", "w");
	int wrote, closed;

	if (!f)
		return;
	wrote = fputs("1", f);
	closed = fclose(f);
	if (wrote < 0 || closed != 0)
		ksft_print_msg("could not turn the BPF JIT on: %s\n", strerror(errno));
}

#endif
