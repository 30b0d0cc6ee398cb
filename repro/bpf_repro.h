/* SPDX-License-Identifier: GPL-2.0 */
/* What kstall's BPF reproducers share on top of repro.h: libbpf's warnings as
 * TAP diagnostics. Include after repro.h and <bpf/libbpf.h>. */
#ifndef KSTALL_BPF_REPRO_H
#define KSTALL_BPF_REPRO_H

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

#endif
