# SPDX-License-Identifier: GPL-2.0
"""A running guest: QEMU and its sockets, QMP, snapshots, the accelerator, NMI
injection, the host core budget, the guest's streams and the watch that
decides how a run ended."""
