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
- Times: every copied entry carries a whole-second stamp decided by its content
  (vm/stamps.py: the sha256 of the bytes copied, a directory's listing, a link's target),
  never the time of the copy, which would make every warm build rebuild every member.
  All-zero stretches of a file are left as holes in the copy.
- Left out, and counted in the `StageReport`: device nodes, FIFOs and sockets (a FIFO
  would block the copy; a device node has no business in a source tree, and the guest
  has its own /dev), files and directories the host user cannot read (they would make
  `mkfs.ext4 -d` fail as a whole; in the guest they are absent rather than EACCES), and
  the excluded directories below.
- Excluded (`excluded`, the one rule every walk of the worktree uses): `.git` of any kind
  (a directory, a `.git` file pointing at one, a link, anything) at any depth: cargo needs
  no git metadata to build a path package (it falls back to walking the directory), and it
  is often the largest part of a checkout; a build script that runs `git` sees "not a git
  repository", as in a source tarball. A cargo `target` directory (named `target` and
  holding cargo's `CACHEDIR.TAG` or `.rustc_info.json`): the lint's CARGO_TARGET_DIR is on
  the scratch disk, and a source directory merely named `target` (e.g. `src/target/`) is
  kept because it holds neither file.

Bounded, and honest about what it left out:
- Caps on logical bytes (a sparse file counts at its size: a 3 GiB sparse file became
  3.1 GB of real disk, measured), on entries and on depth (`StageLimits`, from [vm]
  stage_max_mib, stage_max_files, stage_max_depth), and the run's deadline; each
  refusal (errors.TreeTooLarge, errors.DeadlineExceeded) names the setting. The walk is
  iterative (recursion raised RecursionError at 1,500 nested directories).
- One filesystem: a directory or file on another device than the root (a mount point
  inside the tree) is left out as "other filesystem", never crossed.
- What was left out, other than the exclusions above, is in `StageReport.left_out()`;
  the lint prints it on stderr. When cargo needs it (`_needed`: a Cargo.toml, Cargo.lock
  or build.rs anywhere, or anything under a `src/` next to a copied Cargo.toml), the
  copy is refused (errors.TreeIncomplete) rather than letting cargo fail later over a
  file the user can see.
- Refused early: `check_tree` walks the tree the same way and copies nothing, so a
  lint meets these refusals before it builds a root filesystem or a dependency cache
  (`QemuBackend.check`); the copy itself still decides.

The image is private to one run: built in a 0700 directory under `paths.cache_root()`,
attached read-only, deleted after the run. The host never mounts or reads it back. The
staged copy is deleted once the image is built, unless the caller asks to keep it
(`tree_image(keep=...)` in a `staging_area()`): the lint keeps it until the report is
built, and reads snippets from it (report/snippet.py), the bytes the guest saw.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import stat
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from roteiro_py import errors, paths
from roteiro_py.config import VmSettings
from roteiro_py.vm.disks.rootfs import make_ext4
from roteiro_py.vm.stamps import DIR_DIGEST, LINK_DIGEST, ROOT_KEY, ShareStamps, StampBook
from roteiro_py.vocabulary import MAX_TIMEOUT_S

#: A share image directory (or a scratch disk, lint/caches.py) older than this was left by a run
#: that was killed: no run outlives its deadline, and a day past the longest one allowed
#: leaves room for what precedes it (24 h would sweep a live run given a longer deadline).
STALE_SECONDS = MAX_TIMEOUT_S + 24 * 3600
#: Marker files cargo writes into every target directory it creates.
CARGO_TARGET_MARKERS = ("CACHEDIR.TAG", ".rustc_info.json")

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
_CHUNK = 1 << 20
#: A chunk of this (all zeros) is skipped in the copy rather than written: holes stay holes.
_ZEROS = bytes(_CHUNK)


#: File names cargo reads in any package: left out, the guest's build would fail with an
#: error about a file the user can see on the host.
NEEDED_NAMES = ("Cargo.toml", "Cargo.lock", "build.rs")
#: Why an entry was left out that does not make the copy unfaithful: cargo never needs it.
HARMLESS = ("excluded",)


@dataclass(frozen=True)
class StageLimits:
    """The caps of one staging copy ([vm] stage_max_mib, stage_max_files,
    stage_max_depth); each refusal names the setting that raises it.

    Why: a 3 GiB sparse file (no blocks on disk) became 3.1 GB of real disk here, and a
    tree nested 1,500 deep raised RecursionError. A worktree without .git and target/ is
    rarely past a few hundred MB or 50,000 entries. Each level of depth holds two
    descriptors open during the walk, which the depth cap bounds too."""

    max_bytes: int
    max_files: int
    max_depth: int
    #: time.monotonic() past which the copy stops (the run's deadline), or None.
    deadline: float | None = None
    #: The run's whole deadline in seconds, for the refusal's text.
    deadline_s: float = 0.0

    @classmethod
    def of(cls, vm: VmSettings, *, deadline: float | None = None,
           deadline_s: float = 0.0) -> StageLimits:
        return cls(max_bytes=vm.stage_max_mib * 1024 * 1024, max_files=vm.stage_max_files,
                   max_depth=vm.stage_max_depth, deadline=deadline, deadline_s=deadline_s)


@dataclass
class StageReport:
    files: int = 0
    dirs: int = 0
    symlinks: int = 0
    #: Logical bytes: a sparse file counts at its size, as the copy writes it.
    bytes: int = 0
    #: Relative paths left out, each with why ("special", "unreadable", "excluded",
    #: "other filesystem").
    skipped: list[tuple[str, str]] = field(default_factory=list)
    stage_seconds: float = 0.0
    mkfs_seconds: float = 0.0
    #: The stamp of the copy's root directory (vm/stamps.py), which mkfs.ext4 is told.
    root_stamp: int = 0

    def left_out(self) -> list[tuple[str, str]]:
        """What the guest will miss that was not deliberately excluded."""
        return [(where, why) for where, why in self.skipped if why not in HARMLESS]


class _TooLarge(Exception):
    pass


def excluded(dir_fd: int, name: str, st: os.stat_result) -> bool:
    """Whether the copy leaves out `name` in `dir_fd` (its lstat `st`) on purpose: `.git`
    of any kind, or a cargo target directory (module docstring). Stated once here for
    every walk that must see what the guest sees (depcache/skeleton.py `_visit`).

    The markers are looked up from `target` opened O_NOFOLLOW: a `target` swapped for a
    link since the lstat would otherwise be followed (a path through /proc/self/fd
    followed it) and its target's markers decide what the guest sees."""
    if name == ".git":
        return True
    if name != "target" or not stat.S_ISDIR(st.st_mode):
        return False
    try:
        target = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    except OSError:
        return False  # not a directory now: the copy below sees what it is
    try:
        return _holds_target_marker(target)
    finally:
        os.close(target)


def other_filesystem(st: os.stat_result, device: int) -> bool:
    """Whether the copy leaves out an entry (its lstat `st`) as on another filesystem than
    the root's `device`: a mount point inside the tree is never crossed. A link is copied
    as its text, wherever it points. The same rule for every walk that must see what the
    guest sees (depcache/skeleton.py `_visit`)."""
    return not stat.S_ISLNK(st.st_mode) and st.st_dev != device


def _holds_target_marker(directory_fd: int) -> bool:
    """Whether the open directory holds one of CARGO_TARGET_MARKERS (never following a
    link): what makes a directory named `target` cargo's, not a source directory."""
    for marker in CARGO_TARGET_MARKERS:
        try:
            os.stat(marker, dir_fd=directory_fd, follow_symlinks=False)
            return True
        except OSError:
            continue
    return False


def _copy_file(src_dir: int, name: str, dst_dir: int, mode: int, room: int,
               device: int) -> tuple[int, str]:
    """Copy one regular file; at most `room` bytes, else _TooLarge (it grew since lstat).

    Returns its size and the sha256 of the bytes copied (vm/stamps.py: the copy's stamp
    is decided by them). The bytes pass through here, not copy_file_range, so that the
    digest is of exactly what the guest will read, even if the file changes meanwhile."""
    # O_NONBLOCK: a FIFO swapped in since the listing must not block the open; it has no
    # effect on a regular file, and anything else is refused by the fstat below.
    src = os.open(name, _FILE_FLAGS, dir_fd=src_dir)
    try:
        st = os.fstat(src)
        if not stat.S_ISREG(st.st_mode) or st.st_dev != device:
            raise PermissionError(name)
        if st.st_size > room:
            raise _TooLarge(name)
        if dst_dir < 0:  # check_tree: the size it would copy, nothing written
            return st.st_size, ""
        dst = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW |
                      os.O_CLOEXEC, mode, dir_fd=dst_dir)
        try:
            size = 0
            digest = hashlib.sha256()
            # Never more than `room`, even if it grew since the fstat.
            while chunk := os.read(src, min(_CHUNK, room - size + 1)):
                if size + len(chunk) > room:
                    raise _TooLarge(name)
                digest.update(chunk)
                if chunk == _ZEROS[:len(chunk)]:
                    os.lseek(dst, len(chunk), os.SEEK_CUR)  # a hole stays a hole
                else:
                    view = memoryview(chunk)
                    while view:
                        view = view[os.write(dst, view):]
                size += len(chunk)
            os.ftruncate(dst, size)  # a file ending in a hole
            os.fchmod(dst, mode)  # the open's mode passed through the umask
            return size, digest.hexdigest()
        finally:
            os.close(dst)
    finally:
        os.close(src)


@dataclass
class _Dir:
    src: int
    dst: int
    rel: str
    depth: int
    entries: Iterator[os.DirEntry[str]]
    listing: contextlib.AbstractContextManager[object]
    #: What was copied into `dst`, as (kind, name): the directory's digest (vm/stamps.py).
    copied: list[tuple[str, str]] = field(default_factory=list)


def _open_dir(src: int, dst: int, rel: str, depth: int) -> _Dir:
    try:
        listing = os.scandir(src)
    except OSError:
        os.close(src)
        if dst >= 0:
            os.close(dst)
        raise
    return _Dir(src, dst, rel, depth, iter(listing), listing)


def _close_dir(frame: _Dir) -> None:
    frame.listing.__exit__(None, None, None)
    os.close(frame.src)
    if frame.dst >= 0:
        os.close(frame.dst)


def check_tree(source: Path, limits: StageLimits | None = None) -> StageReport:
    """The refusals `stage_tree` would meet for `source` (errors.TreeTooLarge,
    errors.TreeIncomplete), by the same walk, opening every file but copying nothing.

    Why: the copy is made when the VM is about to boot, after the root filesystem and
    the dependency cache, which may take minutes the first time; a tree the copy
    refuses is refused before them (VmBackend.check). The copy still decides: a tree
    changed in between is refused then."""
    return stage_tree(source, None, limits)


def stage_tree(source: Path, dest: Path | None, limits: StageLimits | None = None,
               stamps: ShareStamps | None = None) -> StageReport:
    """Copy `source` into the empty directory `dest` under the rules in the module docstring
    (`dest` None: only walk it, see check_tree).

    Refuses (errors.TreeTooLarge) past a cap of `limits`, and (errors.TreeIncomplete) when
    something cargo needs was left out; raises errors.DeadlineExceeded past the deadline.
    The walk is iterative: a tree nested 1,500 deep raised RecursionError here (exit 4).
    Every copied entry is stamped by `stamps` (vm/stamps.py; default: a fresh book, every
    entry at ceil(now)), never left at the time of the copy.
    """
    limits = limits or StageLimits.of(VmSettings())
    if stamps is None:
        fresh = StampBook.fresh()
        stamps = ShareStamps(fresh.generation, {})
    report = StageReport()
    started = time.monotonic()
    # The root is the directory the grant names: followed if it is a link, as 9p would.
    root_src = os.open(source, _DIR_FLAGS & ~os.O_NOFOLLOW)
    device = os.fstat(root_src).st_dev
    stack = [_open_dir(root_src, -1 if dest is None else os.open(dest, _DIR_FLAGS), "", 0)]
    packages: set[str] = set()  # directories holding a copied Cargo.toml
    try:
        while stack:
            top = stack[-1]
            try:
                entry = next(top.entries, None)
            except PermissionError:
                report.skipped.append((top.rel, "unreadable"))
                entry = None
            if entry is None:
                done = stack.pop()
                _stamp_dir(done, stamps, report)
                _close_dir(done)
                continue
            if report.files + report.dirs + report.symlinks + len(report.skipped) \
                    >= limits.max_files:
                raise errors.TreeTooLarge(source, f"more than {limits.max_files} files and "
                                          "directories", "stage_max_files", limits.max_files)
            if limits.deadline is not None and time.monotonic() > limits.deadline:
                raise errors.DeadlineExceeded("copying the tree for the VM", limits.deadline_s,
                                              stopped="the copy was stopped")
            counts = (report.files, report.dirs, report.symlinks)
            child = _stage_entry(top, entry.name, report, limits, device, source, stamps)
            if child is not None:
                stack.append(child)
            elif entry.name == "Cargo.toml" and report.files > counts[0]:
                packages.add(top.rel)
            after = (report.files, report.dirs, report.symlinks)
            for kind, before, now in zip("fdl", counts, after, strict=True):
                if now > before:
                    top.copied.append((kind, entry.name))
    finally:
        for frame in stack:
            _close_dir(frame)
    if dest is not None and stamps.links_changed:
        _restamp(dest, stamps.generation)
        stamps.restamp_all()
        report.root_stamp = stamps.generation
    if dest is not None:
        os.chmod(dest, 0o755)
    report.stage_seconds = time.monotonic() - started
    needed = [(where, why) for where, why in report.left_out() if _needed(where, packages)]
    if needed:
        raise errors.TreeIncomplete(source, needed)
    return report


def _listing_digest(copied: list[tuple[str, str]]) -> str:
    """A directory's digest: what it lists (names and kinds), the thing its mtime tells."""
    digest = hashlib.sha256()
    for kind, name in sorted(copied, key=lambda entry: entry[1]):
        digest.update(kind.encode() + os.fsencode(name) + b"\0")
    return DIR_DIGEST + digest.hexdigest()


def _stamp_dir(frame: _Dir, stamps: ShareStamps, report: StageReport) -> None:
    """Stamp a copied directory once all of it is copied (a later entry would move its mtime)."""
    if frame.dst < 0:
        return
    stamp = stamps.stamp(frame.rel or ROOT_KEY, _listing_digest(frame.copied))
    os.utime(frame.dst, (stamp, stamp))
    if not frame.rel:
        report.root_stamp = stamp


def _restamp(dest: Path, stamp: int) -> None:
    """Every entry of the copy at `dest` (ours: files, directories and links only) to
    `stamp`, children before their directory; iterative, as the copy is."""
    root = os.open(dest, _DIR_FLAGS)
    stack = [(root, os.scandir(root))]
    try:
        while stack:
            fd, listing = stack[-1]
            entry = next(listing, None)
            if entry is None:
                listing.close()
                os.utime(fd, (stamp, stamp))
                os.close(fd)
                stack.pop()
            elif entry.is_dir(follow_symlinks=False):
                child = os.open(entry.name, _DIR_FLAGS, dir_fd=fd)
                stack.append((child, os.scandir(child)))
            else:
                os.utime(entry.name, (stamp, stamp), dir_fd=fd, follow_symlinks=False)
    finally:
        for fd, listing in stack:
            listing.close()
            os.close(fd)


def _needed(where: str, packages: set[str]) -> bool:
    """Whether cargo needs the left-out entry `where`: one of NEEDED_NAMES anywhere, or
    anything under a package's `src/` (a directory named src next to a Cargo.toml).

    The rule errs towards refusing: a left-out file under src/ that no module names costs
    the user a refusal they can fix (make it readable, or move it), while one that a
    module names would otherwise surface as a cargo error about a file that is there."""
    parts = where.rstrip("/").split("/")
    if parts[-1] in NEEDED_NAMES:
        return True
    for index, part in enumerate(parts):
        prefix = "".join(f"{p}/" for p in parts[:index])
        if part == "src" and prefix in packages:
            return True
    return False


def _stage_entry(top: _Dir, name: str, report: StageReport, limits: StageLimits,
                 device: int, source: Path, stamps: ShareStamps) -> _Dir | None:
    """Copy one entry of `top`; a directory to descend into is returned, opened (it is
    stamped when it is closed); anything else copied is stamped here."""
    src, dst = top.src, top.dst
    where = f"{top.rel}{name}"
    try:
        st = os.stat(name, dir_fd=src, follow_symlinks=False)
    except OSError:
        report.skipped.append((where, "unreadable"))
        return None
    mode = st.st_mode
    if excluded(src, name, st):
        report.skipped.append((where + "/" if stat.S_ISDIR(mode) else where, "excluded"))
        return None
    if stat.S_ISLNK(mode):
        try:
            target = os.readlink(name, dir_fd=src)
        except OSError:
            report.skipped.append((where, "unreadable"))
            return None
        if dst >= 0:
            os.symlink(target, name, dir_fd=dst)
            stamp = stamps.stamp(where, LINK_DIGEST + hashlib.sha256(os.fsencode(target)).hexdigest())
            os.utime(name, (stamp, stamp), dir_fd=dst, follow_symlinks=False)
        report.symlinks += 1
    elif stat.S_ISDIR(mode):
        if other_filesystem(st, device):
            report.skipped.append((where + "/", "other filesystem"))
            return None
        if top.depth + 1 > limits.max_depth:
            raise errors.TreeTooLarge(source, f"directories nested more than {limits.max_depth} "
                                      "deep", "stage_max_depth", limits.max_depth)
        try:
            child_src = os.open(name, _DIR_FLAGS, dir_fd=src)
        except OSError:
            report.skipped.append((where + "/", "unreadable"))
            return None
        try:
            if os.fstat(child_src).st_dev != device:  # swapped for a mount point since lstat
                raise PermissionError(name)
            child_dst = -1
            if dst >= 0:
                os.mkdir(name, 0o755, dir_fd=dst)
                child_dst = os.open(name, _DIR_FLAGS, dir_fd=dst)
        except OSError:
            os.close(child_src)
            report.skipped.append((where + "/", "unreadable"))
            return None
        report.dirs += 1
        try:
            return _open_dir(child_src, child_dst, where + "/", top.depth + 1)
        except OSError:
            report.skipped.append((where + "/", "unreadable"))
            if dst >= 0:
                stamp = stamps.stamp(where + "/", _listing_digest([]))  # empty in the guest
                os.utime(name, (stamp, stamp), dir_fd=dst)
            return None
    elif stat.S_ISREG(mode):
        if other_filesystem(st, device):
            report.skipped.append((where, "other filesystem"))
            return None
        perm = 0o755 if mode & stat.S_IXUSR else 0o644
        room = limits.max_bytes - report.bytes
        try:
            size, digest = _copy_file(src, name, dst, perm, room, device)
            report.bytes += size
            if dst >= 0:
                stamp = stamps.stamp(where, digest)
                os.utime(name, (stamp, stamp), dir_fd=dst, follow_symlinks=False)
        except (OSError, _TooLarge) as error:
            with contextlib.suppress(FileNotFoundError):
                if dst >= 0:
                    os.unlink(name, dir_fd=dst)
            if isinstance(error, _TooLarge):
                raise errors.TreeTooLarge(
                    source, f"more than {limits.max_bytes // (1024 * 1024)} MiB of files",
                    "stage_max_mib", limits.max_bytes // (1024 * 1024)) from None
            report.skipped.append((where, "unreadable"))
            return None
        report.files += 1
    else:
        report.skipped.append((where, "special"))
    return None


def sweep_stale(base: Path, now: float | None = None) -> None:
    """Remove share images left by runs that were killed before their cleanup ran (they
    are copies of worktrees, as large as the trees). No run lives for STALE_SECONDS."""
    now = time.time() if now is None else now
    for old in base.glob("share-*"):
        with contextlib.suppress(OSError):
            if now - old.lstat().st_mtime > STALE_SECONDS:
                shutil.rmtree(old, ignore_errors=True)


def _private_dir(prefix: str) -> Path:
    base = paths.cache_root() / "vm-shares"
    base.mkdir(parents=True, exist_ok=True)
    sweep_stale(base)
    return Path(tempfile.mkdtemp(prefix=prefix, dir=base))  # 0700: private to this run


@contextlib.contextmanager
def staging_area() -> Iterator[Path]:
    """A private directory for the staged copies of one run, removed when the block exits.

    The caller holds it past the VM so that the report reads snippets from the bytes the
    guest saw (report/snippet.py), never from the host tree as it is now."""
    area = _private_dir("share-staged-")
    try:
        yield area
    finally:
        shutil.rmtree(area, ignore_errors=True)


@contextlib.contextmanager
def tree_image(source: Path, *, label: str = "share", limits: StageLimits | None = None,
               keep: Path | None = None,
               stamps: ShareStamps | None = None) -> Iterator[tuple[Path, StageReport]]:
    """A read-only ext4 image of `source` for one run; removed when the block exits.

    `keep`: a path (not yet existing, in a directory the caller owns) where the staged
    copy is left for the caller; without it the copy is deleted once the image is built.
    `stamps`: the times the copy's entries carry (vm/stamps.py), the image's root
    directory included (mkfs.ext4 would give it its own time).
    """
    work = _private_dir("share-")
    try:
        staged = keep if keep is not None else work / "tree"
        staged.mkdir(mode=0o700)
        report = stage_tree(source, staged, limits, stamps)
        image = work / "image.ext4"
        started = time.monotonic()
        timeout = None
        if limits is not None and limits.deadline is not None:
            timeout = limits.deadline - started
            if timeout <= 0:
                raise errors.DeadlineExceeded("building the share image", limits.deadline_s,
                                              stopped="the host stopped before mkfs.ext4")
        deadline_s = limits.deadline_s if limits is not None else 0.0
        make_ext4(staged, image, label=label, timeout=timeout, fixed_time=report.root_stamp,
                  late=lambda: errors.DeadlineExceeded("building the share image", deadline_s,
                                                       stopped="the host killed mkfs.ext4"))
        report.mkfs_seconds = time.monotonic() - started
        if keep is None:
            shutil.rmtree(staged)
        yield image, report
    finally:
        shutil.rmtree(work, ignore_errors=True)
