"""`--from oci:PATH`: layout directories and archives, and the real `image build` output."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from roteiro_py.errors import PrefetchFailed
from roteiro_py.store import OciSourceSpec, Store, prefetch
from roteiro_py.store.manifest import OCI_MANIFEST
from tests.unit.store.store_images import Image, make_image, sha


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


@pytest.mark.timeout(1500)
def test_image_build_gives_one_digest_twice_and_an_image_with_and_without_the_linter(tmp_path: Path) -> None:
    """The real toolchain image, from Debian's archive and the host's rustup 1.95.0, built
    in a home of the test's own (~45 s cold here, the .debs then cached in that home):
    a forced rebuild gives the same pin, and --without-clippy shares the Debian layer."""
    exe = Path(sys.executable).with_name("pylint-sandbox")
    env = {**os.environ, "ROTEIRO_HOME": str(tmp_path / "home")}

    def image_build(*options: str) -> str:
        run = subprocess.run([str(exe), "image", "build", "--no-set-image", *options], capture_output=True, text=True,
                             env=env, check=False, timeout=900)
        assert run.returncode == 0, run.stderr[-3000:]
        reference = run.stdout.strip()
        assert f"pylint-sandbox config set lint.image '{reference}'" in run.stderr
        return reference

    with_clippy = image_build("--output", str(tmp_path / "layout"))
    without = image_build("--without-clippy")
    assert image_build("--force") == with_clippy  # every layer written again: the same bytes
    assert with_clippy.startswith("localhost/roteiro/clippy:1.95.0@sha256:")
    assert without.startswith("localhost/roteiro/clippy:1.95.0-noclippy@sha256:")
    store = Store(tmp_path / "home" / "store")
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
    # the --output layout provisions a store of its own to the same pin
    other = Store(tmp_path / "other")
    assert prefetch(other, with_clippy, OciSourceSpec(tmp_path / "layout")).reference == with_clippy
