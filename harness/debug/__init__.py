# SPDX-License-Identifier: GPL-2.0
"""Reading a hung system: every vCPU through QEMU's gdbstub (or QMP), a user-
space process's threads through GDB on its core."""
