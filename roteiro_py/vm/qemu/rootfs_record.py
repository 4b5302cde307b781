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
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
import time
from dataclasses import asdict, dataclass
from pathlib import Path

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
    """The image's sha256 ("sha256:<hex>") as sealed, and its identity then."""

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


def read_record(image: Path) -> Record | None:
    """The record beside `image`, or None when there is none or it is not one of ours.

    This is the rootfs identity a snapshot template keys on: `rootfs_image` returns it
    too, as `RootFilesystem.digest`."""
    from roteiro_py.untrusted import FileRefused, read_bounded

    try:
        data = json.loads(read_bounded(record_path(image), MAX_RECORD_BYTES))
        if data.get("format") != RECORD_FORMAT:
            return None
        identity = Identity(**{k: int(data["identity"][k])
                               for k in Identity.__dataclass_fields__})
        digest = data["digest"]
        if not (isinstance(digest, str) and digest.startswith("sha256:") and len(digest) == 71):
            return None
        return Record(digest, identity)
    except (FileNotFoundError, FileRefused, ValueError, KeyError, TypeError, AttributeError):
        return None


def seal(image: Path) -> Record:
    """Make `image` read-only, flush it, hash it once and record it (see the module doc).

    SealFailed when it changes under the hash SEAL_ATTEMPTS times running."""
    record = _measure(image)
    _write_record(image, record)
    return record


def check(image: Path) -> Record | None:
    """The record of `image` when the image still holds the bytes it recorded, else None
    (no image, no record, or other bytes): the caller then deletes and rebuilds it."""
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
        now = _measure(image)
    except OSError:
        return None
    if now.digest != record.digest:
        return None
    _write_record(image, now)
    return now


def discard(image: Path) -> None:
    """Remove the image and its record (record first: an image alone is never trusted)."""
    with contextlib.suppress(FileNotFoundError):
        record_path(image).unlink()
    with contextlib.suppress(FileNotFoundError):
        image.unlink()


def verify_all(cache: Path) -> list[tuple[Path, bool]]:
    """The full check: every cached image re-hashed against its record whatever its stat
    says (what `check` cannot see: media corruption). An image that fails is discarded."""
    found: list[tuple[Path, bool]] = []
    if not cache.is_dir():
        return found
    for image in sorted(cache.glob("*.ext4")):
        record = read_record(image)
        ok = False
        if record is not None:
            with contextlib.suppress(OSError):
                ok = hash_image(image) == record.digest
        if not ok:
            discard(image)
        found.append((image, ok))
    return found


def _measure(image: Path) -> Record:
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
        digest = hash_image(image)
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
    from roteiro_py.paths import replace_file

    body = {"format": RECORD_FORMAT, "digest": record.digest, "identity": asdict(record.identity)}
    replace_file(record_path(image), json.dumps(body, sort_keys=True).encode() + b"\n", 0o444)
