"""Hostile `oci:` sources: links, FIFOs and member floods end in a refusal, never a hang,
a raw exception or a host file read as a blob."""

from __future__ import annotations

import io
import json
import os
import tarfile
import threading
from pathlib import Path

import pytest
from store_images import Image, make_image

from roteiro_py.errors import PrefetchFailed
from roteiro_py.store import OciSourceSpec, Store, oci_source, prefetch
from roteiro_py.store.manifest import OCI_MANIFEST
from roteiro_py.store.transfer import SourceError


def hexd(digest: str) -> str:
    return digest.split(":", 1)[1]


def write_layout(root: Path, image: Image) -> Path:
    blobs = root / "blobs" / "sha256"
    blobs.mkdir(parents=True)
    (root / "oci-layout").write_text('{"imageLayoutVersion":"1.0.0"}')
    for digest, data in image.blobs().items():
        (blobs / hexd(digest)).write_bytes(data)
    (root / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [{
        "mediaType": OCI_MANIFEST, "digest": image.digest, "size": len(image.manifest)}]}))
    return root


def ref_of(image: Image) -> str:
    return f"localhost/airgap/clippy@{image.digest}"


def test_a_layout_blob_that_is_a_link_to_a_host_file_is_refused(tmp_path: Path) -> None:
    image = make_image({"a": b"layer bytes"})
    layout = write_layout(tmp_path / "layout", image)
    layer = hexd(next(iter(image.blobs().keys() - {image.digest})))
    # control arm: the regular layout provisions
    assert prefetch(Store(tmp_path / "ok"), ref_of(image), OciSourceSpec(layout)).reference
    # the same bytes, but the blob is a link to a file outside the layout
    outside = tmp_path / "host-file"
    outside.write_bytes((layout / "blobs" / "sha256" / layer).read_bytes())
    (layout / "blobs" / "sha256" / layer).unlink()
    (layout / "blobs" / "sha256" / layer).symlink_to(outside)
    with pytest.raises(PrefetchFailed) as refused:
        prefetch(Store(tmp_path / "store"), ref_of(image), OciSourceSpec(layout))
    text = refused.value.guidance().render_text()
    assert f"blobs/sha256/{layer}" in text and "a symbolic link" in text
    assert str(layout) in text and refused.value.exit_code == 3


def test_a_layout_whose_blobs_directory_is_a_link_is_refused(tmp_path: Path) -> None:
    image = make_image({"a": b"x"})
    real = write_layout(tmp_path / "real", image)
    layout = tmp_path / "layout"
    (layout / "blobs").mkdir(parents=True)
    (layout / "oci-layout").write_text('{"imageLayoutVersion":"1.0.0"}')
    (layout / "blobs" / "sha256").symlink_to(real / "blobs" / "sha256")
    with pytest.raises(PrefetchFailed, match="'sha256' in .* is not a directory"):
        prefetch(Store(tmp_path / "store"), ref_of(image), OciSourceSpec(layout))


def test_a_layout_blob_that_is_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    image = make_image({"a": b"x"})
    layout = write_layout(tmp_path / "layout", image)
    fifo = layout / "blobs" / "sha256" / hexd(image.digest)
    fifo.unlink()
    os.mkfifo(fifo)
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            prefetch(Store(tmp_path / "store"), ref_of(image), OciSourceSpec(layout))
            outcome.append(None)
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            outcome.append(exc)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(10)
    if worker.is_alive():  # unblock the open() so the thread ends, then fail
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        worker.join(10)
        pytest.fail("prefetch blocked opening a FIFO posing as a blob")
    assert isinstance(outcome[0], PrefetchFailed), outcome
    assert "is a FIFO" in outcome[0].guidance().render_text()


def archive_of(members: list[tuple[str, bytes, bytes, str]], path: Path) -> Path:
    """(name, type, data, linkname) members, written with tarfile."""
    with tarfile.open(path, "w") as tar:
        for name, kind, data, link in members:
            info = tarfile.TarInfo(name)
            info.type, info.linkname = kind, link
            info.size = len(data) if kind == tarfile.REGTYPE else 0
            tar.addfile(info, io.BytesIO(data) if kind == tarfile.REGTYPE else None)
    return path


def layout_members(image: Image) -> list[tuple[str, bytes, bytes, str]]:
    return [("oci-layout", tarfile.REGTYPE, b'{"imageLayoutVersion":"1.0.0"}', ""),
            *[(f"blobs/sha256/{hexd(d)}", tarfile.REGTYPE, data, "")
              for d, data in image.blobs().items()]]


@pytest.mark.parametrize("kind,said", [(tarfile.SYMTYPE, "a symbolic link"),
                                       (tarfile.FIFOTYPE, "a FIFO"),
                                       (tarfile.CHRTYPE, "a device node")])
def test_an_archive_member_posing_as_a_blob_is_refused(tmp_path: Path, kind: bytes,
                                                       said: str) -> None:
    image = make_image({"a": b"x"})
    good = layout_members(image)
    # control arm: the regular archive provisions
    ok = archive_of(good, tmp_path / "ok.tar")
    assert prefetch(Store(tmp_path / "ok"), ref_of(image), OciSourceSpec(ok)).reference
    name = f"blobs/sha256/{hexd(image.digest)}"
    evil = [m for m in good if m[0] != name] + [(name, kind, b"", "../../etc/passwd")]
    path = archive_of(evil, tmp_path / "evil.tar")
    with pytest.raises(PrefetchFailed) as refused:
        prefetch(Store(tmp_path / "store"), ref_of(image), OciSourceSpec(path))
    text = refused.value.guidance().render_text()
    assert name in text and said in text and str(path) in text


def test_an_archive_with_too_many_members_is_refused_naming_the_limit(tmp_path: Path) -> None:
    image = make_image({"a": b"x"})
    path = archive_of([*layout_members(image),
                       *[(f"junk/{i}", tarfile.REGTYPE, b"", "") for i in range(20)]],
                      tmp_path / "many.tar")
    oci_source.LayoutArchiveSource(path, max_members=30).close()  # control: under the bound it opens
    with pytest.raises(SourceError) as refused:
        oci_source.LayoutArchiveSource(path, max_members=10)
    assert "more than 10 members" in str(refused.value) and str(path) in str(refused.value)
    assert "MAX_ARCHIVE_MEMBERS" in str(refused.value) and oci_source.MAX_ARCHIVE_MEMBERS >= 1000


def test_an_archive_of_chained_extended_headers_is_refused(tmp_path: Path) -> None:
    record = b"13 comment=x\n"
    path = tmp_path / "chain.tar"
    with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as tar:
        for _ in range(3000):
            info = tarfile.TarInfo("PaxHeader")
            info.type, info.size = tarfile.XHDTYPE, len(record)
            tar.addfile(info, io.BytesIO(record))
        info = tarfile.TarInfo("oci-layout")
        tar.addfile(info, io.BytesIO(b""))
    image = make_image({"a": b"x"})
    with pytest.raises(PrefetchFailed) as refused:
        prefetch(Store(tmp_path / "store"), ref_of(image), OciSourceSpec(path))
    assert "extended headers in a row" in refused.value.guidance().render_text()


def test_the_way_forward_for_another_name_is_its_own_prefetch(tmp_path: Path) -> None:
    """C (9.5): the digest stored under name A is not provisioned as B; prefetching B
    records B (its blobs reused, nothing downloaded twice), and then B resolves."""
    image = make_image({"a": b"shared"})
    layout = write_layout(tmp_path / "layout", image)
    store = Store(tmp_path / "store")
    a = f"localhost/team/a@{image.digest}"
    b = f"localhost/team/b@{image.digest}"
    prefetch(store, a, OciSourceSpec(layout))
    assert store.is_present(a) and not store.is_present(b)
    again = prefetch(store, b, OciSourceSpec(layout))
    assert not again.already_present and again.blobs_fetched == 0 and again.blobs_reused == 2
    assert store.resolve(b).reference == b and store.is_present(a)
