"""What boots is what was built: the cached root filesystem's record, checked per lint.

`rootfs.rootfs_image` caches one ext4 image per manifest digest (`cache/rootfs/<hex>.ext4`)
and boots it on every lint; its layers were hashed as they were flattened (rootfs.py), so
the image is right when it is built. This module keeps it right afterwards, cheaply:

- `seal`: once, at build, the image is made read-only (0444), flushed to disk (fsync: a
  power cut must not leave a recorded image whose blocks never reached the disk), hashed
  (sha256, ~1.3 s for the 2 GB toolchain root), and a record is written beside it
  (`<hex>.json`): that digest and the image's stat identity (size, mtime_ns, ctime_ns,
  inode, device).
- `check`, per lint: one stat, compared with the record. Equal means no write since the
  seal. Different means "changed, or only touched": the image is re-hashed against the
  record; the same bytes are re-sealed (a `touch`, a chmod, a copy back from a backup),
  other bytes make `check` say so and the caller deletes the image and builds it again.
  An image without a readable record (a build killed between its rename and its record,
  a cache from before records) is never trusted: it is rebuilt.

What the identity catches, and why it is not the (size, mtime) key the store rejected
(store/layout.py): every write or truncation through the filesystem changes ctime, and
ctime cannot be set back (`os.utime` restores an mtime, never a ctime; a chmod changes
it too); replacing the file changes the inode. The store's other objection, the ~4 ms
tick at which ext4 stamps times (a write in the same tick as the last change keeps the
same ctime), is met by hashing only once the clock has passed the ctime's tick
(CTIME_TICK_NS), so any later write carries a later ctime.
What it does not catch: bytes that change without a write through this filesystem
(media corruption, bit rot, a write to the raw block device, debugfs), a ctime forged by
root setting the clock back, and filesystems that do not keep ctime (some FUSE and network
filesystems). 0444 does not stop root, which the ctime still sees. The full check for
those is `pylint-sandbox doctor --verify` (`verify_all`: every cached image re-hashed).

How the bytes are hashed is the caller's choice (`hasher`), and the digest names it:
- `hash_image` ("sha256:<hex>", the default): the sha256 of every byte, what a root
  filesystem's record holds and a VM template keys on (records written before are valid).
- `hash_sparse` ("sha256-chunks:<hex>"): for a dependency cache (depcache/store.py), an
  ext4 image the size of the scratch disk (8 GiB by default) holding maybe 100-500 MB of
  data, the rest holes. It reads only the data (a SEEK_DATA/SEEK_HOLE walk) and hashes
  content, not layout: a copy that lost its holes (restored by a CI cache through tar)
  hashes the same. A record made by one hasher never matches the other's digest, so an
  image checked with the wrong one is rebuilt, never trusted.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
import stat
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path

from roteiro_py.eviction import used_record
from roteiro_py.locks import taken_if_free
from roteiro_py.paths import replace_file
from roteiro_py.untrusted import FileRefused, read_bounded

#: Bumped when the record's fields change: a record of another format is no record.
RECORD_FORMAT = 1
#: One tick of the coarsest clock Linux stamps file times with (HZ=100): a write within
#: the tick of the image's last change keeps its ctime, so the image is hashed only once
#: this much time has passed since that change.
CTIME_TICK_NS = 10_000_000
#: A record is a few hundred bytes; anything bigger is not one of ours.
MAX_RECORD_BYTES = 4096
#: How often `seal` starts over when the image changes while it is being hashed.
SEAL_ATTEMPTS = 3
HASH_CHUNK = 1 << 20
#: The unit `hash_sparse` hashes on its own: a chunk holding no data (a hole) is stood in
#: for by the precomputed digest of a zero chunk, so holes cost no read.
SPARSE_CHUNK = 1 << 20
#: What a record's digest may look like: either hasher's prefix and 64 hex digits.
_DIGEST = re.compile(r"(?:sha256|sha256-chunks):[0-9a-f]{64}")

#: How an image's bytes become its digest: `hash_image` or `hash_sparse`.
Hasher = Callable[[Path], str]


class SealFailed(OSError):
    """The image kept changing while it was being sealed: something else writes to it."""


@dataclass(frozen=True)
class Identity:
    """What a write, a truncation, a chmod or a replacement of the file changes."""

    size: int
    mtime_ns: int
    ctime_ns: int
    inode: int
    device: int

    @classmethod
    def of(cls, st: os.stat_result) -> Identity:
        return cls(st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev)


@dataclass(frozen=True)
class Record:
    """The image's digest as sealed ("sha256:<hex>", or "sha256-chunks:<hex>" from
    `hash_sparse`), and its identity then."""

    digest: str
    identity: Identity


def record_path(image: Path) -> Path:
    return image.with_suffix(".json")


def hash_image(image: Path) -> str:
    digest = hashlib.sha256()
    with image.open("rb") as handle:
        while chunk := handle.read(HASH_CHUNK):
            digest.update(chunk)
    return f"sha256:{digest.hexdigest()}"


@lru_cache(maxsize=4)  # SPARSE_CHUNK, and the last chunk of an image not a multiple of it
def _zeros(length: int) -> bytes:
    return bytes(length)


@lru_cache(maxsize=4)
def _zero_chunk_digest(length: int) -> bytes:
    return hashlib.sha256(_zeros(length)).digest()


def hash_sparse(image: Path) -> str:
    """"sha256-chunks:<hex>": the sha256 of the image's size (8 bytes, big-endian) followed
    by the sha256 of each SPARSE_CHUNK of it in order (the last one as long as it is).

    A chunk with no data in it (SEEK_DATA skips past it) is not read: its digest is that
    of a zero chunk, which is what reading it would give. A data chunk that happens to be
    zero hashes to the same, so holes and written zeros never differ: a sparse image and
    its dense copy have one digest, and a changed byte, in data or in a hole, changes it.

    Measured here (bench/sparse_seal.py; ext4 on virtio, 2 shared cores): an 8 GiB sparse
    image holding 200 MiB of random data in 50 extents is sealed (`seal`: chmod, fsync,
    hashed once) in 0.2-0.3 s and hashed in 0.18-0.19 s (0.3-0.65 s once from a cold page
    cache), where `hash_image` takes 5.9-6.3 s to read and hash every byte. Its dense copy
    (`cp --sparse=never`: every chunk is data) hashes to the same digest in 1.8-2.0 s, a
    zero chunk being compared, not hashed. A filesystem without SEEK_DATA has every chunk
    read, as for the dense copy.
    """
    fd = os.open(image, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        size = os.fstat(fd).st_size
        outer = hashlib.sha256(size.to_bytes(8, "big"))
        chunks = -(-size // SPARSE_CHUNK)
        index = 0
        # Each pass covers at least one chunk, so there are at most `chunks` passes.
        while index < chunks:
            data, hole = _next_data(fd, index * SPARSE_CHUNK, size)
            while index < (chunks if data >= size else data // SPARSE_CHUNK):  # wholly in a hole
                outer.update(_zero_chunk_digest(min(SPARSE_CHUNK, size - index * SPARSE_CHUNK)))
                index += 1
            while index < min(-(-hole // SPARSE_CHUNK), chunks):  # chunks holding data
                offset = index * SPARSE_CHUNK
                chunk = _pread_all(fd, min(SPARSE_CHUNK, size - offset), offset)
                # a zero chunk read from a dense copy: a compare is ~10x cheaper than sha256
                outer.update(_zero_chunk_digest(len(chunk)) if chunk == _zeros(len(chunk))
                             else hashlib.sha256(chunk).digest())
                index += 1
    finally:
        os.close(fd)
    return f"sha256-chunks:{outer.hexdigest()}"


def _next_data(fd: int, offset: int, size: int) -> tuple[int, int]:
    """(start, end) of the first data at or after `offset`; (size, size) when there is none.
    Where the filesystem cannot say (no SEEK_DATA), everything is data."""
    try:
        data = os.lseek(fd, offset, os.SEEK_DATA)
    except OSError as error:
        if error.errno == errno.ENXIO:  # no data past offset
            return size, size
        if error.errno in (errno.EINVAL, errno.EOPNOTSUPP):
            return offset, size
        raise
    hole = os.lseek(fd, data, os.SEEK_HOLE)
    return min(data, size), min(max(hole, data + 1), size)


def _pread_all(fd: int, length: int, offset: int) -> bytes:
    """`length` bytes at `offset`, fewer only at the end of the file (a file that shrank
    under the hash: the identity check around it then sees the change)."""
    parts: list[bytes] = []
    while length > 0 and (part := os.pread(fd, min(length, SPARSE_CHUNK), offset)):
        parts.append(part)
        length -= len(part)
        offset += len(part)
    return b"".join(parts)


def read_record(image: Path) -> Record | None:
    """The record beside `image`, or None when there is none or it is not one of ours.

    This is the rootfs identity a snapshot template keys on: `rootfs_image` returns it
    too, as `RootFilesystem.digest`."""
    try:
        data = json.loads(read_bounded(record_path(image), MAX_RECORD_BYTES))
        if data.get("format") != RECORD_FORMAT:
            return None
        fields = {k: data["identity"][k] for k in Identity.__dataclass_fields__}
        # JSON integers only: int() took `Infinity` to OverflowError (exit 4, review).
        if not all(type(v) is int for v in fields.values()):
            return None
        identity = Identity(**fields)
        digest = data["digest"]
        if not (isinstance(digest, str) and _DIGEST.fullmatch(digest)):
            return None
        return Record(digest, identity)
    except (FileNotFoundError, FileRefused, ValueError, KeyError, TypeError, AttributeError):
        return None


def seal(image: Path, hasher: Hasher = hash_image) -> Record:
    """Make `image` read-only, flush it, hash it once and record it (see the module doc).

    SealFailed when it changes under the hash SEAL_ATTEMPTS times running."""
    record = _measure(image, hasher)
    _write_record(image, record)
    return record


def check(image: Path, hasher: Hasher = hash_image) -> Record | None:
    """The record of `image` when the image still holds the bytes it recorded, else None
    (no image, no record, or other bytes): the caller then deletes and rebuilds it.
    `hasher` is the one the image was sealed with."""
    record = read_record(image)
    if record is None:
        return None
    try:
        st = os.stat(image, follow_symlinks=False)
    except FileNotFoundError:
        return None
    if not stat.S_ISREG(st.st_mode):
        return None
    if Identity.of(st) == record.identity:
        return record
    # Written, touched, chmodded or copied back: only the bytes can say which. The new
    # identity is recorded only for the recorded bytes, never for others.
    try:
        now = _measure(image, hasher)
    except OSError:
        return None
    if now.digest != record.digest:
        return None
    _write_record(image, now)
    return now


def discard(image: Path) -> None:
    """Remove the image and its record (record first: an image alone is never trusted),
    then the record of its last use (rootfs.rootfs_in_use)."""
    with contextlib.suppress(FileNotFoundError):
        record_path(image).unlink()
    with contextlib.suppress(FileNotFoundError):
        image.unlink()
    with contextlib.suppress(FileNotFoundError):
        used_record(image).unlink()


def lock_path(image: Path) -> Path:
    """The lock of `image` (`<hex>.lock`): held exclusive by the run that builds it (and
    by what removes it), shared by every run that uses it, from its check until its VM is
    done (roteiro_py/locks.py)."""
    return image.with_suffix(".lock")


def verify_all(cache: Path, hasher: Hasher = hash_image) -> list[tuple[Path, bool]]:
    """The full check: every cached image re-hashed against its record whatever its stat
    says (what `check` cannot see: media corruption). An image that fails is discarded.

    Each image is checked under its lock taken exclusive, without waiting: an image whose
    lock is held is being built (renamed into the cache and not yet sealed looks exactly
    like one without a record) or used by a lint right now and is left out, never removed
    under its builder (review: the builder's seal met a missing file, exit 4) or a VM."""
    found: list[tuple[Path, bool]] = []
    if not cache.is_dir():
        return found
    for image in sorted(cache.glob("*.ext4")):
        with taken_if_free(lock_path(image)) as free:
            if not free:
                continue
            record = read_record(image)
            ok = False
            if record is not None:
                with contextlib.suppress(OSError):
                    ok = hasher(image) == record.digest
            if not ok:
                discard(image)
        found.append((image, ok))
    return found


def _measure(image: Path, hasher: Hasher) -> Record:
    """chmod 0444, fsync, then the sha256 and the identity it was read under (hashed once
    the clock is past the ctime's tick, and again if the identity moved meanwhile)."""
    os.chmod(image, 0o444)
    fd = os.open(image, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    for _ in range(SEAL_ATTEMPTS):
        before = os.stat(image)
        _past_tick(before.st_ctime_ns)
        digest = hasher(image)
        after = os.stat(image)
        if Identity.of(after) == Identity.of(before):
            return Record(digest, Identity.of(after))
    raise SealFailed(f"{image} changed while it was being hashed, {SEAL_ATTEMPTS} times")


def _past_tick(ctime_ns: int) -> None:
    """Wait (at most CTIME_TICK_NS, once per seal) until the clock is a tick past ctime_ns."""
    wait = ctime_ns + CTIME_TICK_NS - time.time_ns()
    if wait > 0:
        time.sleep(wait / 1e9)


def _write_record(image: Path, record: Record) -> None:
    body = {"format": RECORD_FORMAT, "digest": record.digest, "identity": asdict(record.identity)}
    replace_file(record_path(image), json.dumps(body, sort_keys=True).encode() + b"\n", 0o444)
