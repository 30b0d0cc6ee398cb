"""kstall kernel images: kernel specs, fetchers and the initramfs builder."""
