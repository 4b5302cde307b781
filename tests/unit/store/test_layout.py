"""The store: presence means every blob re-hashes correctly, and index.json is the commit."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from roteiro_py.errors import ImageNotProvisioned, TagNotDigest
from roteiro_py.reference import ImageReference
from roteiro_py.store import Store
from roteiro_py.store.blobs import BlobMismatch
from roteiro_py.store.manifest import OCI_INDEX, OCI_MANIFEST, Descriptor, ManifestError
from tests.unit.store.store_images import make_image, make_index, provision, sha


def flip_byte(path: Path, offset: int = 600) -> None:
    with path.open("r+b") as f:
        f.seek(offset)
        byte = f.read(1)
        f.seek(offset)
        f.write(bytes([byte[0] ^ 0x01]))


def test_layout_files_and_index_annotation(store: Store) -> None:
    image = make_image({"bin/tool": b"x" * 10})
    ref = provision(store, image)
    assert json.loads((store.root / "oci-layout").read_text()) == {"imageLayoutVersion": "1.0.0"}
    index = json.loads(store.index_path.read_text())
    assert index["manifests"] == [{
        "mediaType": OCI_MANIFEST, "digest": image.digest, "size": len(image.manifest),
        "annotations": {"org.opencontainers.image.ref.name": str(ref)}}]
    for digest in image.blobs():
        assert (store.root / "blobs" / "sha256" / digest.split(":")[1]).is_file()


def test_resolve_returns_layers_in_order(store: Store) -> None:
    image = make_image({"a": b"1"}, {"b": b"2"})
    ref = provision(store, image)
    resolved = store.resolve(str(ref))
    assert resolved.manifest_digest == resolved.pinned_digest == image.digest
    assert [layer.digest for layer in resolved.layers] == [sha(x) for x in image.layers]
    assert [layer.path.read_bytes() for layer in resolved.layers] == image.layers
    assert resolved.config["rootfs"]["diff_ids"] == [sha(x) for x in image.layers]


def test_flipped_byte_makes_reference_absent_and_names_the_blob(store: Store) -> None:
    """is_present (prefetch, doctor --verify) re-hashes every blob. resolve (every lint)
    re-hashes the manifest and the config and leaves a layer's bytes to the root
    filesystem build that reads them (tests/unit/vm/disks/test_rootfs_integrity.py)."""
    image = make_image({"a": b"A" * 2000}, {"b": b"B" * 2000})
    ref = provision(store, image)
    assert store.is_present(ref)  # control: the same reference before the flip
    victim = sha(image.layers[1])
    flip_byte(store.blob_path(victim))
    presence = store.is_present(ref)
    assert not presence
    assert presence.detail is not None and victim in presence.detail
    assert "corrupt" in presence.detail
    assert [layer.digest for layer in store.resolve(ref).layers][1] == victim
    flip_byte(store.blob_path(image.digest), 40)  # the manifest is still hashed per lint
    with pytest.raises(ImageNotProvisioned) as caught:
        store.resolve(ref)
    assert image.digest in caught.value.guidance().render_text()


def test_resolve_hashes_the_config(store: Store) -> None:
    image = make_image({"a": b"A" * 2000})
    ref = provision(store, image)
    store.resolve(ref)  # control
    flip_byte(store.blob_path(sha(image.config)), 10)
    with pytest.raises(ImageNotProvisioned) as caught:
        store.resolve(ref)
    assert sha(image.config) in caught.value.guidance().render_text()


def test_flip_with_mtime_restored_is_still_caught(store: Store) -> None:
    """No (size, mtime)-keyed shortcut: a flip that keeps size and mtime is still absent."""
    image = make_image({"a": b"A" * 2000})
    ref = provision(store, image)
    path = store.blob_path(sha(image.layers[0]))
    assert store.is_present(ref)
    st = path.stat()
    flip_byte(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert path.stat().st_mtime_ns == st.st_mtime_ns and path.stat().st_size == st.st_size
    assert not store.is_present(ref)


def test_truncated_and_missing_blobs(store: Store) -> None:
    image = make_image({"a": b"A" * 2000})
    ref = provision(store, image)
    layer = store.blob_path(sha(image.layers[0]))
    with layer.open("r+b") as f:
        f.truncate(100)
    detail = store.is_present(ref).detail or ""
    assert sha(image.layers[0]) in detail and "truncated" in detail
    with pytest.raises(ImageNotProvisioned) as truncated:  # resolve checks sizes
        store.resolve(ref)
    assert "truncated" in truncated.value.guidance().render_text()
    layer.unlink()
    assert "missing" in (store.is_present(ref).detail or "")
    with pytest.raises(ImageNotProvisioned):
        store.resolve(ref)
    store.blob_path(image.digest).write_bytes(b"{}")
    assert image.digest in (store.is_present(ref).detail or "")


def test_index_pin_resolves_to_host_platform(store: Store) -> None:
    amd = make_image({"amd": b"1"})
    arm = make_image({"arm": b"2"}, arch="arm64")
    index = make_index((arm, "arm64"), (amd, "amd64"))
    for data in (*amd.blobs().values(), index):  # the arm64 blobs are never stored
        store.put_bytes(data, sha(data))
    ref = ImageReference("localhost", "multi", "1", sha(index))
    store.add_reference(ref, Descriptor(OCI_INDEX, sha(index), len(index)))
    assert store.references()[0].descriptor.media_type == OCI_INDEX
    resolved = store.resolve(ref)
    assert resolved.pinned_digest == sha(index)
    assert resolved.manifest_digest == amd.digest
    assert [layer.digest for layer in resolved.layers] == [sha(amd.layers[0])]


def test_add_reference_refuses_a_hole(store: Store) -> None:
    image = make_image({"a": b"1"})
    for data in (image.manifest, image.config):  # the layer is never written
        store.put_bytes(data, sha(data))
    ref = ImageReference("localhost", "hole", None, image.digest)
    with pytest.raises(ManifestError, match=sha(image.layers[0])):
        store.add_reference(ref, Descriptor(OCI_MANIFEST, image.digest, len(image.manifest)))
    assert not store.index_path.exists()
    assert "lists no image" in (store.is_present(ref).detail or "")


def test_blob_writer_refuses_wrong_content(store: Store) -> None:
    good = b"expected bytes"
    with pytest.raises(BlobMismatch), store.new_blob(sha(good), len(good)) as writer:
        writer.write(b"expected bytez")
        writer.commit()
    with pytest.raises(BlobMismatch, match="or more"), store.new_blob(sha(good), len(good)) as writer:
        writer.write(good + b"!")
    assert list(store.blobs_dir.iterdir()) == []  # no final blob, no temp file left
    assert store.put_bytes(good, sha(good)) == sha(good)  # control: the right bytes land


def test_unpinned_reference_is_refused(store: Store) -> None:
    with pytest.raises(TagNotDigest):
        store.is_present("localhost/test/img:latest")


def test_prune_frees_only_unreferenced_old_blobs(store: Store) -> None:
    kept = make_image({"kept": b"k" * 100})
    ref = provision(store, kept)
    orphan = store.put_bytes(b"o" * 1000)
    young = store.put_bytes(b"y" * 10)
    temp = store.blobs_dir / ".tmp-interrupted"
    temp.write_bytes(b"t" * 500)
    old = time.time() - 7200
    for path in (store.blob_path(orphan), temp, *[store.blob_path(d) for d in kept.blobs()]):
        os.utime(path, (old, old))
    assert store.prune() == 1500
    assert not store.blob_path(orphan).exists() and not temp.exists()
    assert store.blob_path(young).exists()  # inside the grace period
    assert store.is_present(ref)
    assert store.prune(grace_seconds=0) == 10


def test_a_digest_resolves_only_under_the_name_it_was_provisioned_as(store: Store) -> None:
    """9.5: a known digest under another name must not resolve (and print) as provenance."""
    image = make_image({"a": b"genuine"})
    ours = provision(store, image, "localhost/team/clippy")
    # control arm: the provisioned name resolves, with or without a tag
    assert store.resolve(ours).pinned_digest == image.digest
    assert store.is_present(f"localhost/team/clippy:1.95@{image.digest}")
    forged = f"ghcr.io/rust-lang/clippy-official:1.99.0@{image.digest}"
    assert not store.is_present(forged)
    with pytest.raises(ImageNotProvisioned) as refused:
        store.resolve(forged)
    text = refused.value.guidance().render_text()
    assert "localhost/team/clippy" in text and "provisioned only under another name" in text
    assert f"pylint-sandbox prefetch --analyzer clippy --image {forged} --allow-download" in text
    # the same digest in another repository of the same registry is another name too
    with pytest.raises(ImageNotProvisioned):
        store.resolve(f"localhost/team/other@{image.digest}")
    # removing the forged name removes nothing; removing ours does
    assert not store.remove_reference(forged) and store.is_present(ours)
    assert store.remove_reference(ours) and not store.is_present(ours)


def test_provenance_shows_a_tag_only_when_it_is_the_provisioned_one(store: Store) -> None:
    """9.5: the store checks (name, digest); a tag the configured reference adds is not
    checked against anything, so the resolved reference (what the report prints) drops it."""
    image = make_image({"a": b"genuine"})
    ours = provision(store, image, "localhost/team/clippy")
    assert store.resolve(ours).reference == str(ours)  # control: the provisioned text
    tagged = ImageReference("localhost", "team/clippy", "1.95", image.digest)
    store.add_reference(tagged, next(s.descriptor for s in store.references()
                                     if s.name == str(ours)))
    assert store.resolve(tagged).reference == str(tagged)  # a provisioned tag is shown
    claimed = f"localhost/team/clippy:1.99.0@{image.digest}"
    resolved = store.resolve(claimed)
    assert resolved.pinned_digest == image.digest
    assert resolved.reference == f"localhost/team/clippy@{image.digest}"
    assert "1.99.0" not in resolved.reference


class Killed(BaseException):
    """Where a SIGKILL would land: no handler runs past it."""


def test_remove_image_unlinks_the_entry_before_any_blob_and_a_kill_leaves_no_hole(
        store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """The crash-safe order: the index entry (the commit point) goes before any blob, so a
    removal killed at its first blob unlink leaves the removed image unlisted (not listed
    with a hole), every other image whole, and only unreferenced blobs, which the store's
    prune (`prefetch --prune`) removes. The kill is stood in for by an exception raised
    from unlink (a SIGKILL cannot be landed between two syscalls on demand); the check of
    the index is made inside it, at the moment the first blob would go."""
    shared = {"base": os.urandom(4096)}
    first = provision(store, make_image(shared, {"a": b"first"}), "localhost/t/first")
    second = provision(store, make_image(shared, {"b": b"second"}), "localhost/t/second")
    seen: list[list[str]] = []
    real_unlink = Path.unlink

    def unlink(self: Path, missing_ok: bool = False) -> None:
        if self.parent == store.blobs_dir:
            seen.append([ref.name for ref in store.references()])
            raise Killed
        real_unlink(self, missing_ok=missing_ok)

    monkeypatch.setattr(Path, "unlink", unlink)
    with pytest.raises(Killed):
        store.remove_image(str(first))
    monkeypatch.undo()
    assert seen == [[str(second)]]  # at the first blob, the entry was already gone
    assert not store.is_present(first) and store.is_present(second)
    assert store.prune(grace_seconds=0) > 0  # the removed image's own blobs, unreferenced
    assert store.is_present(second)
    # control: uninterrupted, the same removal takes the second image's own blobs at once
    removal = store.remove_image(str(second))
    assert removal.blobs_removed == 4 and sorted(store.blobs_dir.iterdir()) == []
    assert store.references() == []


def test_remove_image_takes_no_blob_while_another_image_cannot_be_walked(store: Store) -> None:
    """A remaining image whose manifest is gone: its blobs cannot be told from the removed
    one's, so none goes (as Store.prune), and the removal says why."""
    base = {"base": os.urandom(4096)}
    first = provision(store, make_image(base, {"a": b"first"}), "localhost/t/first")
    broken = make_image(base, {"b": b"broken"})
    second = provision(store, broken, "localhost/t/second")
    store.blob_path(second.digest or "").unlink()
    before = sorted(store.blobs_dir.iterdir())
    removal = store.remove_image(str(first))
    assert removal.blobs_removed == 0 and removal.blobs_kept_reason is not None
    assert "localhost/t/second" in removal.blobs_kept_reason
    assert sorted(store.blobs_dir.iterdir()) == before
    assert [ref.name for ref in store.references()] == [str(second)]
