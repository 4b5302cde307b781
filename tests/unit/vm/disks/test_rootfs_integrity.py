"""Integrity where it protects something, once: layers hashed as they are flattened (a
damaged one refused, nothing cached), the cached root filesystem checked by its sealed
identity per lint (a write since is rebuilt, never booted), and an untouched store and
root filesystem used without reading or hashing a layer.

Real stores (tests/unit/store/store_images.py), real mkfs.ext4 and zstd; hashing and
opening are counted, not replaced: the counting wrappers call the real functions.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from roteiro_py import errors, paths
from roteiro_py.clippy.parse import Deadline
from roteiro_py.lint.caches import root_filesystem
from roteiro_py.reference import ImageReference
from roteiro_py.store import Store
from roteiro_py.store.manifest import OCI_CONFIG, OCI_MANIFEST, Descriptor
from roteiro_py.vm.disks import rootfs, rootfs_record
from tests.unit.store.store_images import sha

MEDIA = {"tar": "application/vnd.oci.image.layer.v1.tar",
         "gzip": "application/vnd.oci.image.layer.v1.tar+gzip",
         "zstd": "application/vnd.oci.image.layer.v1.tar+zstd"}


def layer_bytes(kind: str, files: dict[str, bytes]) -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        for name, data in sorted(files.items()):
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    data = raw.getvalue()
    if kind == "gzip":
        return gzip.compress(data, mtime=0)
    if kind == "zstd":
        return subprocess.run(["zstd", "-q", "-c"], input=data, capture_output=True,
                              check=True).stdout
    return data


@dataclass
class Provisioned:
    store: Store
    ref: ImageReference
    layers: list[str]  # digests


def provision(tmp_path: Path, kind: str, *layer_files: dict[str, bytes]) -> Provisioned:
    store = Store(tmp_path / "store")
    layers = [layer_bytes(kind, files) for files in layer_files]
    config = json.dumps({"architecture": "amd64", "os": "linux",
                         "rootfs": {"type": "layers", "diff_ids": []}}).encode()
    manifest = json.dumps({
        "schemaVersion": 2, "mediaType": OCI_MANIFEST,
        "config": {"mediaType": OCI_CONFIG, "digest": sha(config), "size": len(config)},
        "layers": [{"mediaType": MEDIA[kind], "digest": sha(x), "size": len(x)} for x in layers],
    }).encode()
    for data in (config, manifest, *layers):
        store.put_bytes(data, sha(data))
    ref = ImageReference("localhost", "test/img", None, sha(manifest))
    store.add_reference(ref, Descriptor(OCI_MANIFEST, sha(manifest), len(manifest)))
    return Provisioned(store, ref, [sha(x) for x in layers])


def deadline() -> Deadline:
    return Deadline(at=time.monotonic() + 120, seconds=120.0)


def lint_image(p: Provisioned) -> rootfs.RootFilesystem:
    """What a lint does with the image: resolve it, then get its root filesystem."""
    return root_filesystem(p.store.resolve(p.ref), p.store.root, deadline())


def cached() -> list[str]:
    cache = paths.cache_root() / "rootfs"
    return sorted(p.suffix for p in cache.iterdir() if not p.name.endswith(".lock"))


def flip(path: Path, offset: int) -> None:
    """Write one byte in place, as root may through 0444, then put the mtime back: only
    the ctime (which no one can set back) still shows the write."""
    st = path.stat()
    os.chmod(path, 0o644)
    with path.open("r+b") as f:
        f.seek(offset)
        byte = f.read(1)
        f.seek(offset)
        f.write(bytes([byte[0] ^ 0x01]))
    os.chmod(path, st.st_mode & 0o777)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert path.stat().st_mtime_ns == st.st_mtime_ns and path.stat().st_size == st.st_size


@pytest.fixture
def flattens(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many times the root filesystem was built (the real flatten, counted)."""
    calls: list[int] = []
    real = rootfs.flatten

    def counted(*args: Any, **kwargs: Any) -> rootfs.FlattenReport:
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(rootfs, "flatten", counted)
    return calls


@dataclass
class Reads:
    hashed: int = 0  # bytes fed to sha256, anywhere
    opened: list[str] | None = None  # paths opened (audit event "open")


_WATCH: list[Reads] = []


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if event == "open" and _WATCH and args and isinstance(args[0], (str, bytes, os.PathLike)):
        opened = _WATCH[-1].opened
        if opened is not None:
            opened.append(os.fsdecode(args[0]))


sys.addaudithook(_audit)  # hooks cannot be removed; it records only inside `reads()`


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> Callable[[], Any]:
    """A context that counts the bytes hashed (the real sha256, wrapped) and the files
    opened while it is open."""
    real = hashlib.sha256

    class Counted:
        def __init__(self, data: bytes = b"") -> None:
            self._h = real()
            self.update(data)

        def update(self, data: bytes) -> None:
            if _WATCH:
                _WATCH[-1].hashed += len(data)
            self._h.update(data)

        def hexdigest(self) -> str:
            return self._h.hexdigest()

    monkeypatch.setattr(hashlib, "sha256", Counted)

    import contextlib

    @contextlib.contextmanager
    def watching() -> Iterator[Reads]:
        seen = Reads(opened=[])
        _WATCH.append(seen)
        try:
            yield seen
        finally:
            _WATCH.remove(seen)

    return watching


@pytest.mark.parametrize("kind", ["tar", "gzip", "zstd"])
def test_a_flipped_byte_in_a_layer_is_refused_and_no_rootfs_is_cached(
        tmp_path: Path, kind: str, flattens: list[int]) -> None:
    """resolve no longer hashes layers per lint; the build that reads them does. A tar
    layer with a flipped byte in a file unpacks cleanly, a gzip or zstd one breaks the
    reader: either way it is the damaged blob, named, with prefetch as the way forward,
    and nothing is cached from it."""
    p = provision(tmp_path, kind, {"bin/tool": os.urandom(3000), "etc/x": b"x" * 3000})
    victim = p.store.blob_path(p.layers[0])
    flip(victim, victim.stat().st_size // 2)
    p.store.resolve(p.ref)  # present at its size: resolve does not read it
    with pytest.raises(errors.ImageNotProvisioned) as refused:
        lint_image(p)
    text = refused.value.guidance().render_text()
    assert p.layers[0] in text and "damaged" in text, text
    assert "pylint-sandbox prefetch" in text, text
    assert cached() == [] and flattens == [1]
    # control: the same image with the byte put back builds and is cached
    flip(victim, victim.stat().st_size // 2)
    built = lint_image(p)
    assert cached() == [".ext4", ".json", ".used"] and built.path.is_file()  # .used: its last use
    assert built.digest == rootfs_record.hash_image(built.path)


def test_a_hostile_layer_with_its_true_digest_is_still_an_unsafe_layer(tmp_path: Path) -> None:
    """The damaged-blob verdict needs the bytes not to match: a layer that is broken as
    built (its digest names exactly these bytes) stays the image's fault."""
    bad = gzip.compress(b"not a tar at all" * 100)
    store = Store(tmp_path / "store")
    path = store.blob_path(store.put_bytes(bad, sha(bad)))

    @dataclass(frozen=True)
    class Layer:
        digest: str
        media_type: str
        path: Path

    (dest := tmp_path / "root").mkdir()
    with pytest.raises(errors.UnsafeImageLayer):
        rootfs.flatten([Layer(sha(bad), MEDIA["gzip"], path)], dest)
    with pytest.raises(rootfs.LayerDamaged):  # control: the same bytes under another name
        rootfs.flatten([Layer(sha(b"other"), MEDIA["gzip"], path)], dest)


def test_a_cached_rootfs_written_in_place_is_rebuilt_never_booted(
        tmp_path: Path, flattens: list[int]) -> None:
    p = provision(tmp_path, "tar", {"bin/tool": b"t" * 5000})
    first = lint_image(p)
    assert first.path.stat().st_mode & 0o777 == 0o444 and flattens == [1]
    assert rootfs_record.read_record(first.path) is not None
    assert lint_image(p) == first and flattens == [1]  # control: untouched, reused
    # Right after the build (the tick the store's docstring worries about), size and
    # mtime kept: only the ctime shows the write.
    flip(first.path, 4096 + 17)
    tampered = rootfs_record.hash_image(first.path)
    assert tampered != first.digest
    again = lint_image(p)
    assert flattens == [1, 1], "a written image was reused"
    assert rootfs_record.hash_image(again.path) == again.digest != tampered
    assert rootfs_record.read_record(again.path) == rootfs_record.check(again.path)


def test_a_touched_rootfs_is_rehashed_once_and_kept(tmp_path: Path, flattens: list[int]) -> None:
    """A chmod or a touch changes the identity, not the bytes: re-hashed against the
    record, re-sealed, and the next lint is back to one stat."""
    p = provision(tmp_path, "tar", {"bin/tool": b"t" * 5000})
    first = lint_image(p)
    os.chmod(first.path, 0o644)
    os.utime(first.path)
    kept = lint_image(p)
    assert flattens == [1] and kept.digest == first.digest
    assert kept.path.stat().st_mode & 0o777 == 0o444
    record = rootfs_record.read_record(kept.path)
    assert record is not None
    assert record.identity == rootfs_record.Identity.of(kept.path.stat())


def test_a_rootfs_without_its_record_is_rebuilt(tmp_path: Path, flattens: list[int]) -> None:
    """A build killed between its rename and its record, or a cache from before records."""
    p = provision(tmp_path, "tar", {"bin/tool": b"t" * 5000})
    first = lint_image(p)
    rootfs_record.record_path(first.path).unlink()
    lint_image(p)
    assert flattens == [1, 1]


def test_an_untouched_store_and_rootfs_are_used_without_reading_a_layer(
        tmp_path: Path, reads: Callable[[], Any]) -> None:
    big = os.urandom(2 * 1024 * 1024)
    p = provision(tmp_path, "gzip", {"bin/big": big}, {"etc/small": b"s" * 100})
    layer_paths = {str(p.store.blob_path(d)) for d in p.layers}
    layer_bytes_total = sum(p.store.blob_path(d).stat().st_size for d in p.layers)
    with reads() as cold:  # control: the first lint reads and hashes every layer
        built = lint_image(p)
    assert layer_paths <= set(cold.opened or [])
    assert cold.hashed >= layer_bytes_total + built.path.stat().st_size
    with reads() as warm:
        again = lint_image(p)
    assert again == built
    assert not layer_paths & set(warm.opened or []), "a layer blob was opened"
    assert str(built.path) not in (warm.opened or []), "the root filesystem was read"
    # the manifest and the config, a few hundred bytes; not a layer, not the image
    assert warm.hashed < 4096, warm.hashed


def test_the_full_check_rehashes_whatever_the_stat_says(tmp_path: Path) -> None:
    """`doctor --verify`: bytes that changed with no trace in the stat (media corruption;
    simulated by rewriting the record's identity to the changed file's, since a test
    cannot rot a disk) pass the per-lint check and are caught by the full one."""
    p = provision(tmp_path, "tar", {"bin/tool": b"t" * 5000})
    good = lint_image(p)
    other = provision(tmp_path / "other", "tar", {"bin/other": b"o" * 5000})
    rotten = lint_image(other)
    flip(rotten.path, 4096 + 9)
    record = rootfs_record.read_record(rotten.path)
    assert record is not None
    rootfs_record._write_record(rotten.path, rootfs_record.Record(
        record.digest, rootfs_record.Identity.of(rotten.path.stat())))
    assert rootfs_record.check(rotten.path) is not None  # the per-lint check cannot see it
    found = dict(rootfs_record.verify_all(paths.cache_root() / "rootfs"))
    assert found == {good.path: True, rotten.path: False}
    assert not rotten.path.exists() and good.path.exists()


@pytest.mark.parametrize("value", [float("inf"), float("-inf"), 1.5, "12", True])
def test_a_record_whose_identity_is_not_integers_is_no_record(
        tmp_path: Path, flattens: list[int], value: object) -> None:
    """Review (integrity): a record is ours but read as if it were not. JSON's `Infinity`
    made `int()` raise OverflowError, which no caller catches: the lint ended as an
    internal error (exit 4) instead of rebuilding the root filesystem, and `doctor
    --verify` crashed. Any identity field that is not a JSON integer means no record."""
    p = provision(tmp_path, "tar", {"bin/tool": b"t" * 5000})
    first = lint_image(p)
    record = rootfs_record.record_path(first.path)
    body = json.loads(record.read_text())
    assert rootfs_record.read_record(first.path) is not None  # control: ours, as written
    body["identity"]["size"] = value
    os.chmod(record, 0o644)
    record.write_text(json.dumps(body))
    assert rootfs_record.read_record(first.path) is None
    again = lint_image(p)
    assert flattens == [1, 1] and rootfs_record.read_record(again.path) is not None
    body["identity"]["size"] = value  # and the full check removes it rather than crash
    os.chmod(record, 0o644)
    record.write_text(json.dumps(body))
    assert rootfs_record.verify_all(paths.cache_root() / "rootfs") == [(again.path, False)]


def test_the_full_check_leaves_a_rootfs_being_built_to_its_builder(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Review (integrity): `doctor --verify` took an image that a lint had just renamed into
    the cache, and was still sealing (hashing 2 GB: ~1.3 s), for one without a record and
    removed it; the lint's seal then met a missing file (FileNotFoundError: exit 4). The
    full check now takes each image's build lock, as a lint does, and leaves one being
    built alone. The builder is paused, by a wrapper around the real seal, right where
    it renamed the image into the cache and had not yet sealed it."""
    import threading

    p = provision(tmp_path, "tar", {"bin/tool": b"t" * 5000})
    renamed, resume = threading.Event(), threading.Event()
    real_seal = rootfs_record.seal

    def paused_seal(image: Path) -> rootfs_record.Record:
        renamed.set()
        assert resume.wait(60)
        return real_seal(image)

    monkeypatch.setattr(rootfs_record, "seal", paused_seal)
    built: list[object] = []

    def build() -> None:
        try:
            built.append(lint_image(p))
        except BaseException as error:  # the failure is the finding: keep it for the assert
            built.append(error)

    builder = threading.Thread(target=build)
    builder.start()
    try:
        assert renamed.wait(60)
        image = paths.cache_root() / "rootfs" / f"{p.ref.digest.partition(':')[2]}.ext4"
        assert image.is_file() and rootfs_record.read_record(image) is None  # mid-build
        found = rootfs_record.verify_all(paths.cache_root() / "rootfs")
        assert found == [], found
        assert image.is_file()
    finally:
        resume.set()
        builder.join(60)
    assert isinstance(built[0], rootfs.RootFilesystem), built
    # control: once built and sealed, the full check does see it, and keeps it
    assert rootfs_record.verify_all(paths.cache_root() / "rootfs") == [(built[0].path, True)]


def test_the_cached_root_filesystem_carries_no_room_a_tar_round_trip_would_write(
        tmp_path: Path) -> None:
    """mkfs.ext4 -d is given 25 % room (and 16 MiB) to fit; the built image is shrunk to its
    data (rootfs.shrink_ext4) before it is sealed, so actions/cache's tar, which writes
    holes out, restores about what it holds. Still a clean filesystem, its files intact."""
    files = {f"usr/lib/part{i}": os.urandom(4 << 20) for i in range(8)}
    built = lint_image(provision(tmp_path, "tar", files))
    content = sum(len(data) for data in files.values())
    size = built.path.stat().st_size
    assert size <= 1.15 * content, (size, content)
    assert built.digest == rootfs_record.hash_image(built.path)  # sealed as shrunk
    check = subprocess.run(["e2fsck", "-f", "-n", str(built.path)], capture_output=True)
    assert check.returncode == 0, check.stdout
    dumped = subprocess.run(["debugfs", "-R", "cat /usr/lib/part3", str(built.path)],
                            capture_output=True, check=True).stdout
    assert dumped == files["usr/lib/part3"]
    # control: what mkfs.ext4 -d alone makes of the same tree is measurably larger
    tree = tmp_path / "tree"
    for name, data in files.items():
        (tree / name).parent.mkdir(parents=True, exist_ok=True)
        (tree / name).write_bytes(data)
    rootfs.make_ext4(tree, tmp_path / "unshrunk.ext4")
    assert (tmp_path / "unshrunk.ext4").stat().st_size > 1.25 * content
