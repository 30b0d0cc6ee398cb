"""kstall host harness: boots kernels under QEMU, watches, debugs, classifies."""
