# SPDX-License-Identifier: GPL-2.0
# The C flags every guest program is built with, written once: the built-ins
# (Makefile includes this file) and a user's C file (images/programs.py reads
# it). Guest programs are static: kstall's initramfs has no libraries.
GUEST_CFLAGS_ALL := -std=gnu11 -O2 -g -Wall -static -pthread
# The built-ins also fail on any warning: kstall's own code stays clean, while
# a user's file that only warns is still run.
GUEST_CFLAGS_OWN := -Wextra -Werror
