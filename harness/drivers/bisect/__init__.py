# SPDX-License-Identifier: GPL-2.0
"""Bisection: the search, one step's policy, and the two kinds (Debian
versions, a git tree)."""
