# SPDX-License-Identifier: GPL-2.0
"""The `kstall` commands, one module per family: each its parsers and its
cmd_ functions (harness/cli.py puts them together). The drivers stay free
of argparse: the benchmarks and tests call them with options."""
