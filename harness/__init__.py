# SPDX-License-Identifier: GPL-2.0
"""kstall host harness: boots kernels under QEMU, watches, debugs, classifies."""
