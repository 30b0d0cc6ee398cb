# SPDX-License-Identifier: GPL-2.0
"""What goes into a guest: the initramfs, a user's program, the kernel's
kselftest headers, an image's own boot disk, and the boot file QEMU loads."""
