# SPDX-License-Identifier: GPL-2.0
"""What every stage stands on: paths and caches, child processes, leftovers of
killed runs, numbers from untrusted text, run directories, the reproducer
catalog."""
