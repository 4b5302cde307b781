"""The dependency cache's store: what is published is what is used, a changed image is
rebuilt and never used, a copy that lost its holes still verifies, the size cap and age
prune take the least recently used first and never what a run holds, and names in the
directory that are not ours are never followed, listed or deleted.

Images here are sparse files written by the test (the store never parses them: it only
hashes them), and one is a real ext4 scratch disk made by mkfs.ext4 at `staging_disk`.
Locks are held by another thread through the store's own `lock`.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from roteiro_py.depcache import store
from roteiro_py.eviction import record_use
from roteiro_py.vm.disks import rootfs_record
from roteiro_py.vm.disks.rootfs_record import SPARSE_CHUNK, hash_sparse

MIB = 1 << 20
A, B, C, D = ("a" * 64, "b" * 64, "c" * 64, "d" * 64)


def sparse_file(path: Path, size: int, writes: dict[int, bytes]) -> Path:
    with path.open("wb") as handle:
        handle.truncate(size)
        for offset, data in writes.items():
            handle.seek(offset)
            handle.write(data)
    return path


def reference_digest(path: Path) -> str:
    """The definition, read the slow way: every byte, per chunk, holes as the zeros they read."""
    data = path.read_bytes()
    outer = hashlib.sha256(len(data).to_bytes(8, "big"))
    for offset in range(0, len(data), SPARSE_CHUNK):
        outer.update(hashlib.sha256(data[offset:offset + SPARSE_CHUNK]).digest())
    return f"sha256-chunks:{outer.hexdigest()}"


def allocated(path: Path) -> int:
    return os.lstat(path).st_blocks * 512


def publish(key: str, *, data_mib: int = 1, size: int = 64 * MIB, max_bytes: int | None = None,
            seed: bytes = b"") -> Path:
    """A published cache whose image holds `data_mib` MiB of data (distinct per key) in a
    sparse file of `size` bytes."""
    payload = hashlib.sha256(key.encode() + seed).digest() * (data_mib * MIB // 32)
    with store.lock(key, None, 0.0):
        disk = store.staging_disk(key)
        sparse_file(disk, size, {5 * MIB: payload})
        return store.publish(key, disk, max_bytes=max_bytes)


def last_used(key: str, seconds_ago: float) -> None:
    """The key's last use `seconds_ago`, recorded as a lint records it (store.touch)."""
    record_use(store.cache_dir() / f"{key}.used", time.time() - seconds_ago)


@contextmanager
def held_elsewhere(key: str) -> Iterator[None]:
    """The key's lock, held by another thread for the block (as a running lint holds it)."""
    taken, done = threading.Event(), threading.Event()

    def hold() -> None:
        with store.lock(key, None, 0.0):
            taken.set()
            done.wait(30)

    thread = threading.Thread(target=hold)
    thread.start()
    assert taken.wait(30)
    try:
        yield
    finally:
        done.set()
        thread.join(30)


# -- the sparse digest --------------------------------------------------------------


def test_the_sparse_digest_is_the_content_whatever_the_holes(tmp_path: Path) -> None:
    size = 8 * SPARSE_CHUNK + 12_345  # a partial last chunk too
    writes = {3 * SPARSE_CHUNK + 7: b"data" * 1000, 7 * SPARSE_CHUNK: b"\x01" * 10}
    sparse = sparse_file(tmp_path / "sparse", size, writes)
    dense = tmp_path / "dense"
    subprocess.run(["cp", "--sparse=never", str(sparse), str(dense)], check=True)
    # control: the fixture really is sparse, its copy really is not
    assert allocated(sparse) < 2 * SPARSE_CHUNK < size <= allocated(dense)
    assert hash_sparse(sparse) == hash_sparse(dense) == reference_digest(sparse)
    # zeros written as data hash as the hole they replace
    zeros = sparse_file(tmp_path / "zeros", size, {**writes, 1 * SPARSE_CHUNK: bytes(SPARSE_CHUNK)})
    assert allocated(zeros) > allocated(sparse)
    assert hash_sparse(zeros) == hash_sparse(sparse)


@pytest.mark.parametrize("offset", [3 * SPARSE_CHUNK + 100, 5 * SPARSE_CHUNK + 3, 8 * SPARSE_CHUNK + 5],
                         ids=["in data", "in a hole", "in the partial last chunk"])
def test_one_changed_byte_changes_the_sparse_digest(tmp_path: Path, offset: int) -> None:
    size = 8 * SPARSE_CHUNK + 12_345
    writes = {3 * SPARSE_CHUNK: b"data" * 1000}
    before = hash_sparse(sparse_file(tmp_path / "before", size, writes))
    assert hash_sparse(sparse_file(tmp_path / "same", size, writes)) == before  # control
    changed = sparse_file(tmp_path / "after", size, {**writes, offset: b"\x02"})
    assert hash_sparse(changed) != before
    assert hash_sparse(changed) == reference_digest(changed)
    longer = sparse_file(tmp_path / "longer", size + 1, writes)  # one more zero byte at the end
    assert hash_sparse(longer) != before


def test_root_filesystem_records_keep_their_hash(tmp_path: Path) -> None:
    """The default hasher is still the plain sha256: a root filesystem's record (and the
    template key built on it) is unchanged, and a record of one hasher never verifies
    under the other."""
    image = sparse_file(tmp_path / "img.ext4", 4 * MIB, {MIB: b"root"})
    record = rootfs_record.seal(image)
    assert record.digest == "sha256:" + hashlib.sha256(image.read_bytes()).hexdigest()
    os.chmod(image, 0o644)  # an identity change: the check re-hashes
    assert rootfs_record.check(image) is not None  # control: same hasher, same bytes
    os.chmod(image, 0o644)
    assert rootfs_record.check(image, rootfs_record.hash_sparse) is None


# -- publish and lookup ---------------------------------------------------------------


def test_published_is_used_and_recorded(tmp_path: Path) -> None:
    image = publish(A)
    with store.lock(A, None, 0.0):
        assert store.lookup(A) == (image, "used")
        assert store.lookup(B) == (None, "missing")  # control: another key
    assert image == store.cache_dir() / f"{A}.ext4"
    assert (image.stat().st_mode & 0o777) == 0o444
    record = rootfs_record.read_record(image)
    assert record is not None and record.digest == reference_digest(image)
    assert (store.cache_dir() / f"{A}.used").is_file()
    assert [entry.key for entry in store.entries()] == [A]
    assert not list(store.cache_dir().glob(".*.staging"))


@pytest.mark.parametrize("mtime_restored", [False, True], ids=["written", "written, mtime restored"])
def test_a_written_image_is_damaged_and_discarded(mtime_restored: bool) -> None:
    image = publish(A)
    before = image.stat()

    def write_at(offset: int, byte: bytes) -> None:
        os.chmod(image, 0o644)
        with image.open("r+b") as handle:
            handle.seek(offset)
            handle.write(byte)
        os.chmod(image, 0o444)
        if mtime_restored:
            os.utime(image, ns=(before.st_atime_ns, before.st_mtime_ns))

    # control: the same byte written back changes the identity, not the bytes: re-hashed, used
    original = image.read_bytes()[5 * MIB:5 * MIB + 1]
    write_at(5 * MIB, original)
    assert image.stat().st_ctime_ns != before.st_ctime_ns
    with store.lock(A, None, 0.0):
        assert store.lookup(A) == (image, "used")

    write_at(5 * MIB, bytes([original[0] ^ 0xFF]))
    if mtime_restored:
        assert image.stat().st_mtime_ns == before.st_mtime_ns
    with store.lock(A, None, 0.0):
        assert store.lookup(A) == (None, "damaged")
        assert not image.exists() and not rootfs_record.record_path(image).exists()
        assert store.lookup(A) == (None, "missing")


def test_a_byte_written_into_a_hole_is_damage_too() -> None:
    image = publish(A)
    os.chmod(image, 0o644)
    with image.open("r+b") as handle:
        handle.seek(40 * MIB)
        handle.write(b"\x01")
    with store.lock(A, None, 0.0):
        assert store.lookup(A) == (None, "damaged")


def test_a_densified_copy_still_verifies() -> None:
    """A CI cache restored through tar loses the holes: same content, same digest, used."""
    image = publish(A)
    sparse_bytes = allocated(image)
    copy = store.cache_dir() / "restored"
    subprocess.run(["cp", "--sparse=never", str(image), str(copy)], check=True)
    os.replace(copy, image)
    assert allocated(image) >= 64 * MIB > sparse_bytes  # control: the holes are gone
    with store.lock(A, None, 0.0):
        assert store.lookup(A) == (image, "used")
    record = rootfs_record.read_record(image)
    assert record is not None and record.identity == rootfs_record.Identity.of(image.stat())


def test_a_truncated_record_is_not_trusted() -> None:
    image = publish(A)
    record = rootfs_record.record_path(image)
    with store.lock(A, None, 0.0):
        assert store.lookup(A) == (image, "used")  # control: the record as written
    body = record.read_bytes()
    os.chmod(record, 0o644)
    record.write_bytes(body[: len(body) // 2])
    with store.lock(A, None, 0.0):
        assert store.lookup(A) == (None, "damaged")
    assert not image.exists()


def test_an_image_without_a_record_is_not_trusted() -> None:
    image = publish(A)
    rootfs_record.record_path(image).unlink()
    with store.lock(A, None, 0.0):
        assert store.lookup(A) == (None, "damaged")
    assert not image.exists()


def test_an_image_that_cannot_be_sealed_is_not_left_behind(monkeypatch: pytest.MonkeyPatch) -> None:
    """Faked: an image that keeps changing while it is hashed cannot be made on demand."""
    def changing(image: Path, hasher: rootfs_record.Hasher = rootfs_record.hash_image) -> None:
        raise rootfs_record.SealFailed(f"{image} changed while it was being hashed")

    real_seal = rootfs_record.seal
    monkeypatch.setattr(rootfs_record, "seal", changing)
    with pytest.raises(rootfs_record.SealFailed):
        publish(A)
    assert store.entries() == [] and not store.image_path(A).exists()
    # (not monkeypatch.undo(): that would also undo the suite's own $ROTEIRO_HOME)
    monkeypatch.setattr(rootfs_record, "seal", real_seal)
    publish(A)  # control: the same publish, sealed
    assert [entry.key for entry in store.entries()] == [A]


def test_a_real_scratch_disk_made_at_the_staging_path_publishes() -> None:
    from roteiro_py.vm.disks.scratch import create_scratch

    with store.lock(A, None, 0.0):
        disk = store.staging_disk(A)
        other = store.staging_disk(A)
        assert disk != other and disk.parent == other.parent == store.cache_dir()
        other.unlink()
        create_scratch(disk, 64)
        image = store.publish(A, disk)
        assert store.lookup(A) == (image, "used")
    assert image.read_bytes()[1080:1082] == b"\x53\xef"  # the ext4 superblock's magic
    with pytest.raises(ValueError):
        store.publish(A, Path("/tmp") / "elsewhere.ext4")


def test_staging_leftovers_are_swept_unless_a_build_holds_them() -> None:
    with store.lock(A, None, 0.0):
        mine = store.staging_disk(A)
    with store.lock(B, None, 0.0):
        free = store.staging_disk(B)
    with store.lock(C, None, 0.0):
        busy = store.staging_disk(C)
    with held_elsewhere(C), store.lock(A, None, 0.0):
        fresh = store.staging_disk(A)
    assert fresh.exists()
    assert not mine.exists()  # this key's, left by a killed build
    assert not free.exists()  # another key's, its lock free: no build of it is running
    assert busy.exists()  # another key's, its build running


# -- failure marks and uses -------------------------------------------------------------


def test_a_failure_mark_is_bounded_and_cleared_by_a_publish() -> None:
    assert store.failed(A) is None
    store.mark_failed(A, "é" * store.MAX_FAILED_BYTES)  # two bytes each: cut mid-character
    reason = store.failed(A)
    assert reason is not None and set(reason) == {"é"}
    assert len(reason.encode()) <= store.MAX_FAILED_BYTES
    assert [(entry.key, entry.failed) for entry in store.entries()] == [(A, reason)]
    publish(A)
    assert store.failed(A) is None
    assert [(entry.key, entry.failed) for entry in store.entries()] == [(A, None)]


def test_a_use_is_recorded_beside_the_image_not_on_it(tmp_path: Path) -> None:
    image = publish(A)
    last_used(A, 3600)
    before = image.stat()
    with store.lock(A, None, 0.0):
        store.lookup(A)
    assert time.time() - (store.cache_dir() / f"{A}.used").stat().st_mtime < 60
    assert image.stat().st_ctime_ns == before.st_ctime_ns  # nothing to re-hash next time
    # a link planted at the use mark is replaced, its target never touched
    outside = tmp_path / "outside"
    outside.write_text("keep")
    os.utime(outside, (1_000_000, 1_000_000))
    used = store.cache_dir() / f"{A}.used"
    used.unlink()
    used.symlink_to(outside)
    store.touch(A)
    assert not used.is_symlink() and outside.stat().st_mtime == 1_000_000


# -- the size cap and pruning ----------------------------------------------------------


@pytest.mark.parametrize("hold_oldest", [True, False], ids=["oldest in use", "control: none in use"])
def test_the_size_cap_takes_the_least_recently_used_first(hold_oldest: bool) -> None:
    for age, key in ((300, A), (200, B), (100, C)):
        publish(key, data_mib=2)
        last_used(key, age)
    each = {entry.size for entry in store.entries()}
    assert len(each) == 1
    size = each.pop()
    cap = 2 * size + size // 2  # room for two and a half
    if hold_oldest:
        with held_elsewhere(A):
            publish(D, data_mib=2, max_bytes=cap)
        assert sorted(entry.key for entry in store.entries()) == [A, D]
    else:
        publish(D, data_mib=2, max_bytes=cap)
        assert sorted(entry.key for entry in store.entries()) == [C, D]


def test_the_size_cap_never_takes_the_key_just_published() -> None:
    publish(A, data_mib=2)
    last_used(A, 100)
    image = publish(B, data_mib=2, max_bytes=0)  # nothing fits: all but B go
    assert [entry.key for entry in store.entries()] == [B]
    with store.lock(B, None, 0.0):
        assert store.lookup(B) == (image, "used")
    # `keep` alone spares it too (publish's caller also holds its lock)
    assert store.prune(max_bytes=0, keep=B) == [] and os.path.exists(image)
    assert [entry.key for entry in store.prune(max_bytes=0)] == [B]  # control


def test_prune_by_age() -> None:
    day = 86400.0
    for age, key in ((10 * day, A), (5 * day, B), (0, C)):
        publish(key)
        last_used(key, age)
    store.mark_failed(D, "failed to run custom build command")
    old = time.time() - 9 * day
    os.utime(store.cache_dir() / f"{D}.failed", (old, old))
    removed = store.prune(older_than_s=7 * day)
    assert sorted(entry.key for entry in removed) == [A, D]
    assert sorted(entry.key for entry in store.entries()) == [B, C]
    assert store.failed(D) is None
    assert store.prune() == []  # no criterion: nothing
    assert len(store.entries()) == 2


def test_prune_leaves_what_a_run_holds() -> None:
    publish(A)
    last_used(A, 1000)
    with held_elsewhere(A):
        assert store.prune(older_than_s=0) == []
        assert store.remove(A) is False
    assert [entry.key for entry in store.entries()] == [A]
    assert [entry.key for entry in store.prune(older_than_s=0)] == [A]  # control: released


# -- names that are not ours -------------------------------------------------------------


def test_names_that_are_not_ours_are_never_followed_listed_or_deleted(tmp_path: Path) -> None:
    publish(A)
    directory = store.cache_dir()
    outside = tmp_path / "outside.ext4"
    outside.write_bytes(b"not yours" * 1000)
    os.utime(outside, (1_000_000, 1_000_000))
    link = directory / f"{B}.ext4"
    link.symlink_to(outside)
    (directory / f"{B}.failed").symlink_to(outside)
    (directory / f"{C}.ext4").mkdir()
    escape = directory / f"\x1b]8;;evil\x07{D}.ext4"
    escape.write_bytes(b"x")
    staged_link = directory / f".{D}.abcdefgh.staging"
    staged_link.symlink_to(outside)
    planted = {link, directory / f"{B}.failed", directory / f"{C}.ext4", escape, staged_link}

    assert [entry.key for entry in store.entries()] == [A]  # control: ours is listed
    assert store.failed(B) is None
    assert [entry.key for entry in store.prune(older_than_s=-1)] == [A]
    with store.lock(B, None, 0.0):
        assert store.lookup(B) == (None, "damaged")  # a link is no cache
        store.staging_disk(B)  # sweeps staging leftovers: the link is not one
    with store.lock(C, None, 0.0):
        assert store.lookup(C) == (None, "damaged")
    assert all(os.path.lexists(path) for path in planted)
    assert outside.read_bytes() == b"not yours" * 1000 and outside.stat().st_mtime == 1_000_000

    # publishing over the link replaces the link, never writes through it
    publish(B)
    assert not link.is_symlink() and outside.read_bytes() == b"not yours" * 1000
    shutil.rmtree(directory / f"{C}.ext4")


def test_doctor_verify_rehashes_every_dependency_cache_and_removes_a_damaged_one() -> None:
    """What a lint's stat check cannot see (bytes changed with the identity put back, media
    corruption) `doctor --verify` finds: each cache re-hashed whatever its stat says."""
    from roteiro_py.commands import doctor

    intact, damaged = publish("a" * 64), publish("b" * 64)
    damaged.chmod(0o644)
    with damaged.open("r+b") as handle:
        handle.write(b"\xff")
    checks = {check.name: check for check in doctor.verified()}
    assert checks["dependency cache"].ok is False
    assert "1 of 2 re-hashed and intact" in checks["dependency cache"].detail
    assert "bbbbbbbbbbbbbbbb" in checks["dependency cache"].detail
    assert intact.is_file() and not damaged.exists()
    # control: with the damaged one gone, the check passes
    assert {c.name: c for c in doctor.verified()}["dependency cache"].ok is True


def test_a_cache_in_use_by_a_run_is_never_pruned_and_a_removed_one_is_not_attached() -> None:
    """A run holds its cache shared from its check until its VM is done: the size cap and
    `cache prune` (exclusive, never waiting) leave it; once released they take it."""
    from roteiro_py.errors import DeadlineExceeded

    key = "c" * 64
    image = publish(key)
    with store.in_use(key, until=time.monotonic() + 5, seconds=5) as attached:
        assert attached == image
        assert store.prune(max_bytes=0) == []  # in use: left alone
        with store.in_use(key, until=time.monotonic() + 5, seconds=5) as second:
            assert second == image  # another run may use it at the same time
        assert image.is_file()
    assert [entry.key for entry in store.prune(max_bytes=0)] == [key]  # control: released
    with store.in_use(key, until=time.monotonic() + 5, seconds=5) as attached:
        assert attached is None  # removed between a run's check and its VM: not attached
    publish(key)
    # a builder holds it: a run waits for it within its deadline only
    with store.lock(key, None, 0.0), pytest.raises(DeadlineExceeded), \
            store.in_use(key, until=time.monotonic() + 0.3, seconds=0.3):
        pass


def test_intact_answers_without_the_lock_and_discards_nothing() -> None:
    """The common case (a whole cache) takes no lock, so lints of one lockfile run side by
    side; only a missing or damaged cache waits for the build lock."""
    key = "d" * 64
    image = publish(key)
    with store.in_use(key, until=time.monotonic() + 5, seconds=5):
        assert store.intact(key) == image  # while a run holds it shared
    with held_elsewhere(key):
        assert store.intact(key) == image  # and while another run holds the build lock
    image.chmod(0o644)
    with image.open("r+b") as handle:
        handle.write(b"\xff")
    assert store.intact(key) is None and image.is_file()  # damaged: said, not discarded
    assert store.lookup(key) == (None, "damaged") and not image.exists()  # control: lookup discards
