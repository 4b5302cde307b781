"""`--from oci:PATH`: layout directories and archives, and the real build-image output."""

from __future__ import annotations

import json
import os
import subprocess
import tarfile
from pathlib import Path

import pytest

from roteiro_py.errors import PrefetchFailed
from roteiro_py.store import OciSourceSpec, Store, prefetch
from roteiro_py.store.manifest import OCI_MANIFEST
from tests.unit.store.store_images import Image, make_image, sha

REPO_ROOT = Path(__file__).resolve().parents[3]


def write_layout(root: Path, image: Image, name: str) -> None:
    blobs = root / "blobs" / "sha256"
    blobs.mkdir(parents=True)
    (root / "oci-layout").write_text('{"imageLayoutVersion":"1.0.0"}')
    for digest, data in image.blobs().items():
        (blobs / digest.split(":")[1]).write_bytes(data)
    (root / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [{
        "mediaType": OCI_MANIFEST, "digest": image.digest, "size": len(image.manifest),
        "annotations": {"org.opencontainers.image.ref.name": name}}]}))


def test_layout_directory_and_archive(tmp_path: Path) -> None:
    image = make_image({"a": b"A" * 3000}, {"b": b"B"})
    layout = tmp_path / "layout"
    write_layout(layout, image, "1.0")
    ref = f"localhost/airgap/clippy:1.0@{image.digest}"

    store = Store(tmp_path / "store-dir")
    result = prefetch(store, ref, OciSourceSpec(layout))
    assert result.reference == ref and store.is_present(ref)

    archive = tmp_path / "layout.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(layout, arcname=".")
    from_archive = Store(tmp_path / "store-archive")
    prefetch(from_archive, ref, OciSourceSpec(archive))
    assert [x.path.read_bytes() for x in from_archive.resolve(ref).layers] == image.layers

    with pytest.raises(PrefetchFailed, match="has no blob"):
        prefetch(Store(tmp_path / "nope"), f"localhost/x@{sha(b'other')}", OciSourceSpec(layout))


def test_layout_whose_bytes_lie_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    image = make_image({"a": b"A"})
    other = make_image({"z": b"Z"})
    layout = tmp_path / "layout"
    write_layout(layout, image, "1.0")
    # The manifest blob is replaced by another manifest: same name, different bytes.
    (layout / "blobs" / "sha256" / image.digest.split(":")[1]).write_bytes(other.manifest)
    store = Store(tmp_path / "store")
    with pytest.raises(PrefetchFailed, match="not the pinned content"):
        prefetch(store, f"localhost/x@{image.digest}", OciSourceSpec(layout))
    assert not store.blobs_dir.exists() or list(store.blobs_dir.iterdir()) == []

    # A corrupt layer is caught as it is copied; the reference is not recorded.
    write_layout(tmp_path / "layout2", image, "1.0")
    layer = tmp_path / "layout2" / "blobs" / "sha256" / sha(image.layers[0]).split(":")[1]
    layer.write_bytes(layer.read_bytes().replace(b"A", b"B"))
    with pytest.raises(PrefetchFailed, match=sha(image.layers[0])):
        prefetch(store, f"localhost/x@{image.digest}", OciSourceSpec(tmp_path / "layout2"))
    assert store.references() == []


@pytest.mark.timeout(600)
def test_build_image_output_imports_and_has_the_linter(tmp_path: Path) -> None:
    """The real toolchain image: cached after the first build (~45 s from nothing here)."""
    outputs = {}
    for variant in ([], ["--without-clippy"]):
        run = subprocess.run([str(REPO_ROOT / "scripts" / "build-image"), *variant],
                             capture_output=True, text=True, check=True, timeout=600)
        outputs[bool(variant)] = run.stdout.strip()
    with_clippy, without = outputs[False], outputs[True]
    assert with_clippy.startswith("localhost/roteiro/clippy:1.95.0@sha256:")
    assert without.startswith("localhost/roteiro/clippy:1.95.0-noclippy@sha256:")
    cache = Path(os.environ.get("XDG_CACHE_HOME") or "/var/tmp") / "roteiro-images"
    store = Store(tmp_path / "store")
    for ref, directory in ((with_clippy, "clippy-1.95.0"),
                           (without, "clippy-1.95.0-noclippy")):
        prefetch(store, ref, OciSourceSpec(cache / directory))
    names = {}
    for ref in (with_clippy, without):
        base, tools = store.resolve(ref).layers
        assert base.digest == store.resolve(with_clippy).layers[0].digest  # shared layer
        with tarfile.open(tools.path) as tar:
            names[ref] = set(tar.getnames())
    assert "usr/local/bin/cargo-clippy" in names[with_clippy]
    assert "usr/local/bin/clippy-driver" in names[with_clippy]
    assert "usr/local/bin/cargo-clippy" not in names[without]
    assert "usr/local/bin/rustc" in names[without]
