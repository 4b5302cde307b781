"""The scratch disk: the one place a guest may write, kept as an image the host never opens.

It is a raw ext4 image made by mkfs.ext4 on the host and attached read-write as a
virtio-blk drive; only the guest mounts it. Whatever the guest plants there (setuid
files, device nodes, symlinks to host paths) exists only inside that image, never as a
file the host's kernel would honour. Persist the image to let a later run see what an
earlier one built ("warm runs"); two runs cannot use one image at once (qemu takes a
write lock on it, and the second fails to start).
"""

from __future__ import annotations

import os
from pathlib import Path

from roteiro_py import errors
from roteiro_py.process.tool import DIAGNOSTIC_BYTES, run_tool
from roteiro_py.vm.disks.rootfs import ext4_tool, host_tool, shrink_ext4
from roteiro_py.vm.mounts import GUEST_GID, GUEST_UID

#: Seconds mkfs.ext4 may take to make an empty scratch image (it writes only metadata;
#: past this it hangs, and the refusal is errors.HostToolFailed).
SCRATCH_MKFS_TIMEOUT_S = 300.0
#: Seconds each of e2fsck, tune2fs and resize2fs may take on a scratch image being shrunk
#: (an 8 GiB image holding ~110 MB: 0.02 s, 0.01 s and 0.3 s measured).
SHRINK_TIMEOUT_S = 300.0


def create_scratch(path: Path, size_mib: int) -> Path:
    """A new, empty scratch image of `size_mib` MiB (sparse), its root owned by the guest user.

    It keeps ext4's journal: a run killed at its deadline leaves the filesystem to be
    replayed by the next mount rather than corrupted.
    """
    if size_mib < 16:
        raise ValueError("a scratch disk needs at least 16 MiB")
    path.parent.mkdir(parents=True, exist_ok=True)
    purpose = f"make the scratch disk {path}"
    mkfs = host_tool("mkfs.ext4", purpose)
    done = run_tool(
        [mkfs, "-q", "-F", "-L", "scratch", "-E",
         f"root_owner={GUEST_UID}:{GUEST_GID}", str(path), f"{size_mib}M"],
        purpose=purpose, timeout=SCRATCH_MKFS_TIMEOUT_S, max_bytes=DIAGNOSTIC_BYTES)
    if done.exit != 0:
        said = done.stderr.decode("utf-8", "replace").strip()[-300:]
        raise errors.ScratchUnavailable(path, said or "mkfs.ext4 failed")
    return path


def shrink_to_content(path: Path) -> int:
    """Shrink the scratch image at `path`, which the guest has written and unmounted, to
    little more than what it holds, and return the file's new size in bytes.

    Why: the image is as large as the scratch disk (8 GiB by default) however little the
    guest wrote (~108 MB for a dependency cache), and a copy that does not keep holes (GNU
    tar without --sparse, as actions/cache calls it) writes every byte of it: each restored
    cache took 8.1 GiB of disk. What is done, in order: `e2fsck -f -y` (a journal left to
    replay is replayed), `tune2fs -O ^has_journal` (the journal is 64 MiB of an 8 GiB
    filesystem, and a read-only `noload` mount never reads it), rootfs.shrink_ext4 (the
    smallest size that holds the data), then the file padded with a hole to `slot_size`
    (so caches of similar size share one VM template).

    Only for an image that is read-only from here on: it keeps next to no free space.
    These are host programs reading metadata the guest's kernel wrote (the guest's
    unprivileged processes never reach its block device): call it on an image a build
    just wrote, before it is sealed, never on one restored from elsewhere. Any failure is
    errors.ScratchUnavailable (or HostToolFailed/HostToolMissing); the image is then in no
    known state and the caller discards it.
    """
    ext4_tool(path, "e2fsck", ["-f", "-y"], (0, 1), SHRINK_TIMEOUT_S)
    ext4_tool(path, "tune2fs", ["-O", "^has_journal"], (0,), SHRINK_TIMEOUT_S)
    padded = slot_size(shrink_ext4(path, SHRINK_TIMEOUT_S))
    os.truncate(path, padded)  # a hole past the filesystem's end: the guest never reads it
    return padded


def slot_size(size: int) -> int:
    """`size` rounded up to the next of four sizes per doubling (…, 64, 80, 96, 112, 128,
    160 MiB, …: at most 25 % more, at least 1 MiB steps).

    Why: a VM template's slot for the dependency cache is the disk's own size, and that
    size is in the template's key (vm/qemu/template.py slot_sizes): caches shrunk to their
    exact sizes would each need a template of their own, a cold boot and a memory file
    each; rounded, caches of similar size share one. The rounding is a hole, which a copy
    that loses holes writes out: 25 % at most, inside the 2x this module promises."""
    if size <= 1 << 20:
        return 1 << 20
    granule = max(1 << 20, 1 << (size.bit_length() - 3))
    return -(-size // granule) * granule
