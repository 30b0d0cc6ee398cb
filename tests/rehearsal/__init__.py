# SPDX-License-Identifier: GPL-2.0
"""The rehearsal of the CI templates' jobs (tests/check_ci.py): each CI
system's jobs run as it would run them, in the clean bookworm root
(tests/clean_root.py) that stands for their Debian container."""
