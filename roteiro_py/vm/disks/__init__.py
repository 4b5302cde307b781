"""Backend-neutral block devices a VM boots from or writes to: the root filesystem built from
the image, its integrity record, the images of the shares, and the scratch disk."""
