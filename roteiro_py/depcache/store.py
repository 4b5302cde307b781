"""Where dependency caches live on the host, and what makes one trusted: a sealed record.

A dependency cache is one file, an ext4 image a VM wrote (the guest: its bytes are
hostile-ish, so the host never parses or mounts it, only hashes it), published under
`cache_dir()` = `$ROTEIRO_HOME/cache/deps`, a stable path a CI system can cache between
jobs. Per key (64 hex digits):

- `<key>.ext4`    the image, read-only (0444) once published;
- `<key>.json`    its sealed record (vm/disks/rootfs_record.py: digest and stat identity;
                  a changed identity is re-hashed, other bytes are discarded, never used);
- `<key>.lock`    the build lock: the run that builds or checks the key holds it
                  (exclusive), so two first lints of one lockfile build it once; a run
                  whose VM uses the image holds it shared (`in_use`), so prune never
                  takes an image from under a running lint;
- `<key>.used`    the last use, epoch seconds (eviction.record_use; an empty one, as
                  written before, is its mtime); touching the image itself would change
                  its ctime, and the record's identity check would re-hash it every time;
- `<key>.failed`  a short text (MAX_FAILED_BYTES): why building it failed last time; a
                  later lint of the key skips building until it is pruned;
- `.<key>.<random>.staging`  a disk being built (`staging_disk`), renamed into place by
                  `publish`; one whose key's lock is free was left by a killed build and is
                  removed by the next `staging_disk`.

The image is published as the guest left it, never shrunk, checked or otherwise parsed
on the host: its ext4 metadata is what the guest's kernel wrote, and a host tool that
read it (e2fsck, resize2fs) would be one crafted filesystem away from running the
guest's code on the host (vm/disks/scratch.py). So it is a sparse file as large as the
scratch disk (8 GiB by default) of which a few hundred MB is data, hashed by
`rootfs_record.hash_sparse` (data extents only, and equal for a copy that lost its
holes): sealing takes ~0.2 s rather than ~6 s (measured there). A CI cache keeps its
holes by archiving the directory with GNU tar --sparse (ci/common.sh pack_deps), bytes
only; an image shrunk by an earlier version is as valid. A size cap (`max_bytes`, from
`[lint] dep_cache_max_mib`) is applied after every
publish: least recently used first (roteiro_py/eviction.py), never the key just published,
never one whose lock is held.

Names in the directory that are not ours (another pattern, a link, a directory, even under
one of our names) are ignored: never followed, never listed, never deleted. A link or a
directory at `<key>.ext4` is not a cache: `lookup` calls it damaged and leaves it, and
`publish` renames over it (replacing a link, never writing through it). At most MAX_NAMES
names of the directory are read.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from roteiro_py import paths
from roteiro_py.eviction import evict, record_use, recorded_use
from roteiro_py.locks import acquire_within, shared_within, taken_if_free
from roteiro_py.untrusted import FileRefused, read_bounded
from roteiro_py.vm.disks import rootfs_record

#: A key: the sha256 (hex) of everything that shapes the dependencies' build.
KEY = re.compile(r"[0-9a-f]{64}")
#: The names that make an entry: an image, or a failure mark alone.
_ENTRY_NAME = re.compile(r"([0-9a-f]{64})\.(ext4|failed)")
#: A disk being built: mkstemp's prefix and suffix around its random part.
_STAGING_NAME = re.compile(r"\.([0-9a-f]{64})\.[a-z0-9_]+\.staging")
#: The most names of the directory read by a listing or a sweep: a directory flooded with
#: names (a cache restored from somewhere else) costs a bounded walk, and names past it
#: are neither listed nor removed.
MAX_NAMES = 100_000
#: The longest failure reason kept: it comes from the build's output (cargo's words about
#: a dependency's build script), and it is shown, sanitised, by `cache list` and the report.
MAX_FAILED_BYTES = 4096
WAITING_FOR = "another lint building the same dependency cache"


def cache_dir() -> Path:
    return paths.cache_root() / "deps"


@dataclass(frozen=True)
class Entry:
    """One key's cache: its image (or its failure mark when there is no image), the bytes
    it takes on disk (st_blocks * 512: the image is sparse), its last use (epoch s), and
    why its last build failed, if it did."""

    key: str
    path: Path
    size: int
    last_used: float
    failed: str | None


def _name(key: str, suffix: str) -> Path:
    if not KEY.fullmatch(key):
        raise ValueError(f"not a dependency cache key: {key!r}")
    return cache_dir() / f"{key}{suffix}"


def image_path(key: str) -> Path:
    return _name(key, ".ext4")


def _regular(path: Path) -> os.stat_result | None:
    """`path`'s own stat when it is a regular file (a link is not followed: None)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    return st if stat.S_ISREG(st.st_mode) else None


def _names(directory: Path) -> list[str]:
    found: list[str] = []
    with contextlib.suppress(FileNotFoundError), os.scandir(directory) as scan:
        for entry in scan:
            if len(found) >= MAX_NAMES:
                break
            found.append(entry.name)
    return found


def _unlink(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()


def lock_path(key: str) -> Path:
    return _name(key, ".lock")


def discard(key: str) -> None:
    """Remove everything of the key but its lock file (removing that under a waiting run
    would split the lock). The caller holds or has taken `lock_path(key)`."""
    _discard(key, with_failure=True)


def _discard(key: str, *, with_failure: bool = False) -> None:
    """Remove the key's record, then its image (an image alone is never trusted), its use
    mark, and with `with_failure` its failure mark. A non-regular `<key>.ext4` is left."""
    image = image_path(key)
    _unlink(rootfs_record.record_path(image))
    if _regular(image) is not None:
        _unlink(image)
    _unlink(_name(key, ".used"))
    if with_failure:
        _unlink(_name(key, ".failed"))


def lookup(key: str) -> tuple[Path | None, str]:
    """(image, "used") when the key's image is sealed and still holds the bytes sealed (its
    use recorded); (None, "missing") when there is none; (None, "damaged") when there is
    one but it is not trusted (other bytes, no or a truncated record, not a regular file):
    it has been discarded, and the caller builds it again. Call with `lock(key)` held."""
    image = image_path(key)
    if not os.path.lexists(image):
        return None, "missing"
    if rootfs_record.check(image, rootfs_record.hash_sparse) is not None:
        touch(key)
        return image, "used"
    _discard(key)
    return None, "damaged"


def intact(key: str) -> Path | None:
    """The key's image when it is sealed and still holds the bytes sealed (one stat when
    nothing changed), else None; nothing is discarded. Needs no lock: a run that finds it
    intact holds it shared from then on (`in_use`, which checks again), and only what is
    missing or damaged is worth the build lock, which waits for every run using the image."""
    image = image_path(key)
    if not os.path.lexists(image):
        return None
    return image if rootfs_record.check(image, rootfs_record.hash_sparse) is not None else None


@contextlib.contextmanager
def lock(key: str, until: float | None, seconds: float) -> Iterator[None]:
    """The key's build lock, held for the block: waited for within the run's deadline
    (`until`, time.monotonic(); None: for ever), then DeadlineExceeded (locks.py)."""
    path = lock_path(key)
    path.parent.mkdir(parents=True, exist_ok=True)
    held = acquire_within(path, until=until, seconds=seconds, waiting_for=WAITING_FOR)
    try:
        yield
    finally:
        held.release()


@contextlib.contextmanager
def in_use(key: str, until: float, seconds: float) -> Iterator[Path | None]:
    """The key's image for a run's VM to attach, with the key's lock held SHARED for the
    block (locks.shared_within): other runs using it hold it shared too, while a builder
    (`lock`) or a pruner (locks.taken_if_free, the size cap) needs it exclusive and so
    waits, or leaves the image alone, until the VM is done with it. Between `lock`
    released and this taken a pruner may have removed or replaced the image: it is checked
    again (one stat when nothing changed) and the block gets None when it is no longer the
    sealed one. Past `until` (time.monotonic()) waiting, DeadlineExceeded."""
    path = lock_path(key)
    path.parent.mkdir(parents=True, exist_ok=True)
    with shared_within(path, until=until, seconds=seconds,
                       waiting_for="another run building or pruning the same dependency cache"):
        image = image_path(key)
        intact = rootfs_record.check(image, rootfs_record.hash_sparse) is not None
        yield image if intact else None


def staging_disk(key: str) -> Path:
    """A new empty file, in the cache directory (so `publish` is a rename on one
    filesystem) under a name no one can predict (mkstemp: O_EXCL, 0600), for the builder
    to make its disk at. Call with `lock(key)` held: this key's leftovers (a build killed
    midway) are removed now, other keys' when their lock is free (no build of theirs is
    running: a build holds its lock for as long as its staging disk exists)."""
    directory = cache_dir()
    directory.mkdir(parents=True, exist_ok=True)
    _sweep_staging(directory, key)
    fd, name = tempfile.mkstemp(prefix=f".{key}.", suffix=".staging", dir=directory)
    os.close(fd)
    return Path(name)


def _sweep_staging(directory: Path, key: str) -> None:
    for name in _names(directory):
        match = _STAGING_NAME.fullmatch(name)
        if match is None or _regular(directory / name) is None:
            continue
        if match.group(1) == key:
            _unlink(directory / name)
            continue
        with taken_if_free(directory / f"{match.group(1)}.lock") as free:
            if free:
                _unlink(directory / name)


def publish(key: str, disk: Path, *, max_bytes: int | None = None) -> Path:
    """Make `disk` (from `staging_disk(key)`, its build finished) the key's cache: renamed
    into place, sealed (read-only, flushed, hashed: rootfs_record.seal with hash_sparse),
    its failure mark cleared and its use recorded; then the size cap (`max_bytes`; None:
    no cap) is applied to the others. Returns the image. Call with `lock(key)` held.

    If sealing fails the image is removed and the error raised: an image without its
    record would be rebuilt anyway, and it is large."""
    image = image_path(key)
    if disk.parent != image.parent or not _STAGING_NAME.fullmatch(disk.name):
        raise ValueError(f"not a staging disk of the dependency cache: {disk}")
    _unlink(rootfs_record.record_path(image))  # no record ever describes other bytes
    os.replace(disk, image)
    try:
        rootfs_record.seal(image, rootfs_record.hash_sparse)
    except BaseException:
        _discard(key)
        raise
    _unlink(_name(key, ".failed"))
    touch(key)
    if max_bytes is not None:
        # Housekeeping: what cannot be removed now (a file gone under us, permissions) is
        # tried again at the next publish; the run that built this cache goes on with it.
        with contextlib.suppress(OSError):
            prune(max_bytes=max_bytes, keep=key)
    return image


def touch(key: str) -> None:
    """Record a use of the key now in `<key>.used` (eviction.record_use: written whole, a
    link there replaced, never followed)."""
    path = _name(key, ".used")
    path.parent.mkdir(parents=True, exist_ok=True)
    record_use(path)


def failed(key: str) -> str | None:
    """Why the key's last build failed (`mark_failed`), or None: no mark, or not ours."""
    try:
        return read_bounded(_name(key, ".failed"), MAX_FAILED_BYTES).decode("utf-8", "replace")
    except (FileNotFoundError, FileRefused):
        return None


def mark_failed(key: str, reason: str) -> None:
    """Remember that building the key failed, and why (cut to MAX_FAILED_BYTES): later
    lints of the key do not build it again until it is pruned (`cache prune`)."""
    data = reason.encode("utf-8", "replace")[:MAX_FAILED_BYTES]
    path = _name(key, ".failed")
    path.parent.mkdir(parents=True, exist_ok=True)
    paths.replace_file(path, data.decode("utf-8", "ignore").encode(), 0o644)


def entries() -> list[Entry]:
    """Every key with an image or a failure mark, by key; see the module doc for what is
    not ours and left out."""
    directory = cache_dir()
    keys = sorted({match.group(1) for name in _names(directory)
                   if (match := _ENTRY_NAME.fullmatch(name))})
    found: list[Entry] = []
    for key in keys:
        image = directory / f"{key}.ext4"
        reason = failed(key)
        st = _regular(image)
        if st is not None:
            used = recorded_use(directory / f"{key}.used")
            found.append(Entry(key, image, st.st_blocks * 512,
                               st.st_mtime if used is None else used, reason))
            continue
        mark = directory / f"{key}.failed"
        st = _regular(mark)
        if st is not None and reason is not None:
            found.append(Entry(key, mark, st.st_blocks * 512, st.st_mtime, reason))
    return found


def remove(key: str) -> bool:
    """`discard(key)` unless a run holds its lock (False: left as it is)."""
    with taken_if_free(lock_path(key)) as free:
        if free:
            discard(key)
        return free


def prune(*, older_than_s: float | None = None, max_bytes: int | None = None,
          keep: str | None = None) -> list[Entry]:
    """Remove, least recently used first, the entries last used more than `older_than_s`
    ago, then more until the rest add up to `max_bytes` or less; never `keep`, never one
    whose lock is held (it still counts toward `max_bytes`). With neither criterion
    nothing is removed. Returns what was removed."""
    return evict(entries(), lambda entry: remove(entry.key), older_than_s=older_than_s,
                 max_bytes=max_bytes, spare=lambda entry: entry.key == keep).removed
