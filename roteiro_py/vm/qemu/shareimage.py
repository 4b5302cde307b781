"""A read-only share as an ext4 image: the host tree copied into a private staging
directory, then `mkfs.ext4 -d` (no root, no loop device), attached `readonly=on`.

Why: reading many small files over virtio-9p costs a guest<->host round trip per
operation, and under TCG each is slow (numbers in machine.py's docstring, from
bench/vm_shares.py). An image is read by the guest's own page cache and ext4.

What the guest sees, and what it never sees:
- Regular files, directories and symlinks of the host tree, read without following any
  symlink (every open is O_NOFOLLOW, every directory is listed through its own descriptor
  opened O_NOFOLLOW|O_DIRECTORY, so a path swapped for a link while we walk cannot lead
  outside the tree). Symlinks are stored as symlinks with their target text: the guest
  resolves them inside its own filesystem, never on the host; a link pointing at
  /etc/shadow reads the guest's /etc/shadow (or nothing).
- Modes are normalised: directories 0755, files 0644 or 0755 (when the owner could
  execute), no setuid/setgid/sticky bits, so the guest's user (uid 1000) can read all of
  it. Without this a file the host user owns with mode 0600 would be unreadable in the
  guest whenever the host uid is not 1000 (the lint often runs as root). Owners are the
  host user's (mkfs.ext4 -d copies them); on a filesystem mounted read-only, and attached
  read-only, owning a file grants nothing.
- Left out, and counted in the `StageReport`: device nodes, FIFOs and sockets (a FIFO
  would block the copy; a device node has no business in a source tree, and the guest
  has its own /dev), files and directories the host user cannot read (they would make
  `mkfs.ext4 -d` fail as a whole; in the guest they are absent rather than EACCES), and
  the excluded directories below.
- Excluded directories: `.git` (a directory, or a `.git` file pointing at one) at any
  depth: cargo needs no git metadata to build a path package (it falls back to walking
  the directory), and it is often the largest part of a checkout; a build script that
  runs `git` sees "not a git repository", as in a source tarball. A cargo `target`
  directory (named `target` and holding cargo's `CACHEDIR.TAG` or `.rustc_info.json`):
  the lint's CARGO_TARGET_DIR is on the scratch disk, and a source directory merely
  named `target` (e.g. `src/target/`) is kept because it holds neither file.

The image is private to one run: built in a 0700 directory under `paths.cache_root()`,
attached read-only, deleted after the run. The host never mounts or reads it back.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from roteiro_py import paths
from roteiro_py.vm.qemu.rootfs import make_ext4

#: A share image directory older than this was left by a run that was killed.
STALE_SECONDS = 24 * 3600
#: Marker files cargo writes into every target directory it creates.
CARGO_TARGET_MARKERS = ("CACHEDIR.TAG", ".rustc_info.json")

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


@dataclass
class StageReport:
    files: int = 0
    dirs: int = 0
    symlinks: int = 0
    bytes: int = 0
    #: Relative paths left out, each with why ("special", "unreadable", "excluded").
    skipped: list[tuple[str, str]] = field(default_factory=list)
    stage_seconds: float = 0.0
    mkfs_seconds: float = 0.0


def _excluded(dir_fd: int, name: str, st: os.stat_result) -> bool:
    if name == ".git":
        return True
    if name != "target" or not stat.S_ISDIR(st.st_mode):
        return False
    return any(os.path.lexists(f"/proc/self/fd/{dir_fd}/target/{m}")
               for m in CARGO_TARGET_MARKERS)


def _copy_file(src_dir: int, name: str, dst_dir: int, mode: int) -> int:
    # O_NONBLOCK: a FIFO swapped in since the listing must not block the open; it has no
    # effect on a regular file, and anything else is refused by the fstat below.
    src = os.open(name, _FILE_FLAGS, dir_fd=src_dir)
    try:
        st = os.fstat(src)
        if not stat.S_ISREG(st.st_mode):
            raise PermissionError(name)
        dst = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW |
                      os.O_CLOEXEC, mode, dir_fd=dst_dir)
        try:
            size = 0
            with contextlib.suppress(OSError):  # EXDEV across filesystem types: read below
                size = os.copy_file_range(src, dst, st.st_size) if st.st_size else 0
            while chunk := os.read(src, 1 << 20):  # the rest, if it grew or the copy was short
                os.write(dst, chunk)
                size += len(chunk)
            os.fchmod(dst, mode)  # the open's mode passed through the umask
            return size
        finally:
            os.close(dst)
    finally:
        os.close(src)


def stage_tree(source: Path, dest: Path) -> StageReport:
    """Copy `source` into the empty directory `dest` under the rules in the module docstring."""
    report = StageReport()
    started = time.monotonic()
    # The root is the directory the grant names: followed if it is a link, as 9p would.
    root_src = os.open(source, _DIR_FLAGS & ~os.O_NOFOLLOW)
    root_dst = os.open(dest, _DIR_FLAGS)
    try:
        _stage_dir(root_src, root_dst, "", report)
    finally:
        os.close(root_src)
        os.close(root_dst)
    os.chmod(dest, 0o755)
    report.stage_seconds = time.monotonic() - started
    return report


def _stage_dir(src: int, dst: int, rel: str, report: StageReport) -> None:
    with os.scandir(src) as listing:
        entries = sorted(listing, key=lambda e: e.name)
    for entry in entries:
        name = entry.name
        where = f"{rel}{name}"
        try:
            st = os.stat(name, dir_fd=src, follow_symlinks=False)
        except OSError:
            report.skipped.append((where, "unreadable"))
            continue
        mode = st.st_mode
        if stat.S_ISLNK(mode):
            if name == ".git":
                report.skipped.append((where, "excluded"))
                continue
            try:
                target = os.readlink(name, dir_fd=src)
            except OSError:
                report.skipped.append((where, "unreadable"))
                continue
            os.symlink(target, name, dir_fd=dst)
            report.symlinks += 1
        elif stat.S_ISDIR(mode):
            if _excluded(src, name, st):
                report.skipped.append((where + "/", "excluded"))
                continue
            try:
                child_src = os.open(name, _DIR_FLAGS, dir_fd=src)
            except OSError:
                report.skipped.append((where + "/", "unreadable"))
                continue
            try:
                os.mkdir(name, 0o755, dir_fd=dst)
                child_dst = os.open(name, _DIR_FLAGS, dir_fd=dst)
                try:
                    _stage_dir(child_src, child_dst, where + "/", report)
                except PermissionError:
                    report.skipped.append((where + "/", "unreadable"))
                finally:
                    os.close(child_dst)
            finally:
                os.close(child_src)
            report.dirs += 1
        elif stat.S_ISREG(mode):
            if name == ".git":
                report.skipped.append((where, "excluded"))
                continue
            perm = 0o755 if mode & stat.S_IXUSR else 0o644
            try:
                report.bytes += _copy_file(src, name, dst, perm)
            except OSError:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(name, dir_fd=dst)
                report.skipped.append((where, "unreadable"))
                continue
            report.files += 1
        else:
            report.skipped.append((where, "special"))


def sweep_stale(base: Path, now: float | None = None) -> None:
    """Remove share images left by runs that were killed before their cleanup ran (they
    are copies of worktrees, as large as the trees). No run lives for STALE_SECONDS."""
    now = time.time() if now is None else now
    for old in base.glob("share-*"):
        with contextlib.suppress(OSError):
            if now - old.lstat().st_mtime > STALE_SECONDS:
                shutil.rmtree(old, ignore_errors=True)


@contextlib.contextmanager
def tree_image(source: Path, *, label: str = "share") -> Iterator[tuple[Path, StageReport]]:
    """A read-only ext4 image of `source` for one run; removed when the block exits."""
    base = paths.cache_root() / "vm-shares"
    base.mkdir(parents=True, exist_ok=True)
    sweep_stale(base)
    work = Path(tempfile.mkdtemp(prefix="share-", dir=base))  # 0700: private to this run
    try:
        staged = work / "tree"
        staged.mkdir()
        report = stage_tree(source, staged)
        image = work / "image.ext4"
        started = time.monotonic()
        make_ext4(staged, image, label=label)
        report.mkfs_seconds = time.monotonic() - started
        shutil.rmtree(staged)
        yield image, report
    finally:
        shutil.rmtree(work, ignore_errors=True)
