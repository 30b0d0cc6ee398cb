// SPDX-License-Identifier: GPL-2.0
/* What a newer suite's static libraries call in glibc and elfutils that an
 * older cross toolchain's glibc lacks (arches.toml `link_shim`): riscv64's
 * libbpf and libelf come from trixie (glibc 2.41, elfutils 0.192), and
 * bookworm's riscv64 cross toolchain links against glibc 2.36.
 *
 * glibc 2.38 gave the strto* and *scanf families C23 names (C23 reads "0b"
 * binary literals): code compiled against it calls __isoc23_*. Nothing the
 * loaders' libraries parse is binary, so the C99 functions answer the same.
 *
 * elfutils 0.191 keeps a search tree per Elf in its private libeu, which
 * Debian ships in no static library; Debian builds libelf without locks, so
 * the tree is its root pointer alone (elf_begin zeroes it, elf_end frees its
 * nodes). elf_getdata_rawchunk's tree search is not on the loaders' path and
 * is left out: a loader that needed it would fail to link, not misbehave. */
#define _GNU_SOURCE  /* tdestroy */
#include <search.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

long __isoc23_strtol(const char *s, char **end, int base)
{
	return strtol(s, end, base);
}

unsigned long long __isoc23_strtoull(const char *s, char **end, int base)
{
	return strtoull(s, end, base);
}

int __isoc23_sscanf(const char *s, const char *format, ...)
{
	va_list ap;
	int n;

	va_start(ap, format);
	n = vsscanf(s, format, ap);
	va_end(ap);
	return n;
}

int __isoc23_fscanf(FILE *f, const char *format, ...)
{
	va_list ap;
	int n;

	va_start(ap, format);
	n = vfscanf(f, format, ap);
	va_end(ap);
	return n;
}

struct eu_search_tree {
	void *root;
};

void eu_search_tree_init(struct eu_search_tree *tree)
{
	tree->root = NULL;
}

void eu_search_tree_fini(struct eu_search_tree *tree, void (*free_node)(void *))
{
	tdestroy(tree->root, free_node);
}
