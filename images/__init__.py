# SPDX-License-Identifier: GPL-2.0
"""kstall kernel images: kernel specs, fetchers and the initramfs builder."""
