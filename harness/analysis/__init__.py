# SPDX-License-Identifier: GPL-2.0
"""What a run's observations mean, as pure functions over recorded data:
console reports, KTAP, stacks and signatures, latency stalls, thread hangs,
P(miss), the verdict."""
