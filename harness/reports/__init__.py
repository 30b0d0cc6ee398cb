# SPDX-License-Identifier: GPL-2.0
"""Matrix reports: one module per format, each rendered from matrix.json alone."""
