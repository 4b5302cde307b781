"""What the guest boots and why it is trusted: the kernel and initramfs provisioned from
Debian's signed archive (pinned keys, sizes and hashes), and the initramfs assembly."""
