"""The content digest of a tree as the guest saw it: one sha256 anyone can recompute from a
worktree (`pylint-sandbox tree-digest PATH`) and compare with an attestation's.

Why: an attestation names the tree it linted. A clean git checkout is named by its commit
and tree; anything else (uncommitted edits, a tarball, a CI workspace with generated
files) is named by this digest, taken from the staged copy the guest read
(vm/disks/share_image.py), so it is of the bytes linted, not of the host tree a moment later.

The definition (`roteiro-tree-v1`, docs/ATTESTATION.md states it for other implementations):
every entry below the root, sorted by its relative path's bytes (`/`-separated), becomes
one record, and the digest is `sha256:` + the sha256 of the records concatenated:
- a directory: `d <path>\\0`;
- a regular file: `f <mode> <sha256 of its bytes> <path>\\0`, mode `644` or `755` (the
  copy's normalised mode: 755 when the owner may execute it);
- a symbolic link: `l <sha256 of its target text> <path>\\0` (never followed).
The walk applies the staging copy's own skip rules, imported, never restated
(share_image.py `excluded`: `.git` of any kind and cargo target directories;
`other_filesystem`: a mount point inside the tree), and leaves out what the copy leaves
out (special files, what this user cannot read). Walked over a worktree or over its staged
copy it gives the same digest; a test checks both against one tree.

Bounded as the copy is: entries, bytes and depth (`StageLimits`); every open refuses links.
"""

from __future__ import annotations

import hashlib
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from roteiro_py import errors
from roteiro_py.config import VmSettings
from roteiro_py.vm.disks.share_image import StageLimits, excluded, other_filesystem

#: The name of the definition above, recorded beside the digest in an attestation.
ALGORITHM = "roteiro-tree-v1"
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
_CHUNK = 1 << 20


@dataclass(frozen=True)
class TreeDigest:
    digest: str  # "sha256:<64 hex>"
    files: int
    dirs: int
    symlinks: int
    #: Entries left out other than by `excluded` (special, unreadable, other filesystem).
    left_out: int


def tree_digest(root: Path, limits: StageLimits | None = None) -> TreeDigest:
    """The `roteiro-tree-v1` digest of `root` (module docstring); errors.TreeTooLarge past a
    cap of `limits` (default: the [vm] defaults, as the copy's)."""
    limits = limits or StageLimits.of(VmSettings())
    records: list[tuple[bytes, bytes]] = []
    counts = {"f": 0, "d": 0, "l": 0, "skipped": 0, "excluded": 0}
    total = 0
    top = os.open(root, _DIR_FLAGS & ~os.O_NOFOLLOW)  # the root named is followed, as staging does
    device = os.fstat(top).st_dev
    stack: list[tuple[int, bytes, int]] = [(top, b"", 0)]
    try:
        while stack:
            fd, rel, depth = stack.pop()
            try:
                with os.scandir(fd) as listing:
                    names = [entry.name for entry in listing]
            except OSError:
                counts["skipped"] += 1
                os.close(fd)
                continue
            try:
                for name in names:
                    if sum(counts.values()) >= limits.max_files:
                        raise errors.TreeTooLarge(root, f"more than {limits.max_files} files and "
                                                  "directories", "stage_max_files", limits.max_files)
                    path = rel + os.fsencode(name)
                    kind, record, size = _entry(fd, name, path, device, depth, limits, root, stack)
                    counts[kind] += 1
                    total += size
                    if total > limits.max_bytes:
                        raise errors.TreeTooLarge(
                            root, f"more than {limits.max_bytes // (1024 * 1024)} MiB of files",
                            "stage_max_mib", limits.max_bytes // (1024 * 1024))
                    if record:
                        records.append((path, record))
            finally:
                os.close(fd)
    finally:
        for fd, _, _ in stack:
            os.close(fd)
    digest = hashlib.sha256()
    for _, record in sorted(records):
        digest.update(record)
    return TreeDigest("sha256:" + digest.hexdigest(), counts["f"], counts["d"], counts["l"],
                      counts["skipped"])


def _entry(fd: int, name: str, path: bytes, device: int, depth: int, limits: StageLimits,
           root: Path, stack: list[tuple[int, bytes, int]]) -> tuple[str, bytes, int]:
    """One entry's kind ("f", "d", "l", "excluded", "skipped"), its record, and the bytes
    read; a directory is pushed on `stack`."""
    try:
        st = os.stat(name, dir_fd=fd, follow_symlinks=False)
    except OSError:
        return "skipped", b"", 0
    if excluded(fd, name, st):
        return "excluded", b"", 0
    if stat.S_ISLNK(st.st_mode):
        try:
            target = os.readlink(name, dir_fd=fd)
        except OSError:
            return "skipped", b"", 0
        return "l", b"l " + hashlib.sha256(os.fsencode(target)).hexdigest().encode() + b" " \
            + path + b"\0", 0
    if other_filesystem(st, device):
        return "skipped", b"", 0
    if stat.S_ISDIR(st.st_mode):
        if depth + 1 > limits.max_depth:
            raise errors.TreeTooLarge(root, f"directories nested more than {limits.max_depth} "
                                      "deep", "stage_max_depth", limits.max_depth)
        try:
            child = os.open(name, _DIR_FLAGS, dir_fd=fd)
        except OSError:
            return "skipped", b"", 0
        if os.fstat(child).st_dev != device:
            os.close(child)
            return "skipped", b"", 0
        stack.append((child, path + b"/", depth + 1))
        return "d", b"d " + path + b"\0", 0
    if not stat.S_ISREG(st.st_mode):
        return "skipped", b"", 0
    try:
        size, hexdigest = _file_digest(fd, name, device, limits.max_bytes)
    except OSError:
        return "skipped", b"", 0
    mode = b"755" if st.st_mode & stat.S_IXUSR else b"644"
    return "f", b"f " + mode + b" " + hexdigest.encode() + b" " + path + b"\0", size


def _file_digest(dir_fd: int, name: str, device: int, room: int) -> tuple[int, str]:
    src = os.open(name, _FILE_FLAGS, dir_fd=dir_fd)
    try:
        st = os.fstat(src)
        if not stat.S_ISREG(st.st_mode) or st.st_dev != device:
            raise PermissionError(name)
        digest = hashlib.sha256()
        size = 0
        while size <= room and (chunk := os.read(src, min(_CHUNK, room + 1 - size))):
            digest.update(chunk)
            size += len(chunk)
        return size, digest.hexdigest()
    finally:
        os.close(src)
