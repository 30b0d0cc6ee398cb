# SPDX-License-Identifier: GPL-2.0
"""Where a kernel comes from: the schemes (schemes.py lists them), the
fetchers and builders behind them, and what comes with a kernel (its
modules, its changelog, its symbols)."""
