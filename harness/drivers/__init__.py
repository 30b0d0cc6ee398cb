# SPDX-License-Identifier: GPL-2.0
"""The commands, each one pass or a loop over the pipeline: verify, matrix,
bisect, calibrate, symbols, threads."""
