"""The scratch disk: the one place a guest may write, kept as an image the host never opens.

It is a raw ext4 image made by mkfs.ext4 on the host and attached read-write as a
virtio-blk drive; only the guest mounts it. Whatever the guest plants there (setuid
files, device nodes, symlinks to host paths) exists only inside that image, never as a
file the host's kernel would honour. Persist the image to let a later run see what an
earlier one built ("warm runs"); two runs cannot use one image at once (qemu takes a
write lock on it, and the second fails to start).

Once a guest has written it, no host program parses it: the host's kernel never mounts
it, and no host tool reads its filesystem's metadata (no e2fsck, resize2fs or debugfs,
which are what shrinking it would take). The guest's kernel wrote those bytes, and a
guest that owns its kernel can craft them: e2fsprogs has had memory-safety bugs on
crafted filesystems (CVE-2019-5094, CVE-2022-1304), so parsing them would turn a guest
kernel compromise into code running on the host, which is what the VM is there to
prevent. The host handles such an image as bytes only: hashed (rootfs_record.hash_sparse),
copied, archived with its holes (ci/common.sh pack_deps), attached to another guest.
It stays as large as the scratch disk (8 GiB by default) and sparse: what a guest did
not write is holes, kept by any copy that keeps holes.
"""

from __future__ import annotations

from pathlib import Path

from roteiro_py import errors
from roteiro_py.process.tool import DIAGNOSTIC_BYTES, run_tool
from roteiro_py.vm.disks.rootfs import host_tool
from roteiro_py.vm.mounts import GUEST_GID, GUEST_UID

#: Seconds mkfs.ext4 may take to make an empty scratch image (it writes only metadata;
#: past this it hangs, and the refusal is errors.HostToolFailed).
SCRATCH_MKFS_TIMEOUT_S = 300.0


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
