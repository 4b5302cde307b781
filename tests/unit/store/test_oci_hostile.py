"""Hostile `oci:` sources: links, FIFOs and member floods end in a refusal, never a hang,
a raw exception or a host file read as a blob."""

from __future__ import annotations

import bz2
import io
import json
import os
import shutil
import subprocess
import tarfile
import threading
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import pytest

from roteiro_py.errors import PrefetchFailed
from roteiro_py.store import OciSourceSpec, Store, manifest, oci_source, prefetch, tarheaders
from roteiro_py.store.manifest import OCI_CONFIG, OCI_LAYER_TAR, OCI_MANIFEST
from roteiro_py.store.transfer import SourceError
from tests.unit.store.store_images import Image, make_image, sha


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


# -- declared sizes: a few KB of source must not write GBs into the store ----------------

#: What a hostile few-KB source may make the host write before it is refused; any cap on
#: declared sizes stops far below it.
WRITE_ALARM = 256 * 1024**2


class Alarm(Exception):
    pass


def alarm_progress(seen: dict[str, int]) -> Callable[[str, int, int], None]:
    def progress(digest: str, done: int, total: int) -> None:
        seen[digest] = done
        if done > WRITE_ALARM:
            raise Alarm(f"{done} bytes written for {digest} from a tiny source")
    return progress


def sparse_layout(root: Path, *, layer_claims: int, config_claims: int | None = None,
                  ) -> tuple[Path, str]:
    """A layout whose manifest declares `layer_claims` bytes for a layer that is a sparse
    file of that size (0 bytes on disk); its config likewise when `config_claims`."""
    blobs = root / "blobs" / "sha256"
    blobs.mkdir(parents=True)
    (root / "oci-layout").write_text('{"imageLayoutVersion":"1.0.0"}')
    layer_digest = "sha256:" + "5" * 64  # the hash is checked only after every byte
    config = json.dumps({"architecture": "amd64", "os": "linux",
                         "rootfs": {"type": "layers", "diff_ids": [layer_digest]}}).encode()
    config_desc = {"mediaType": OCI_CONFIG, "digest": sha(config), "size": len(config)}
    (blobs / hexd(sha(config))).write_bytes(config)
    if config_claims is not None:
        config_desc = {"mediaType": OCI_CONFIG, "digest": "sha256:" + "6" * 64,
                       "size": config_claims}
        with open(blobs / ("6" * 64), "wb") as f:
            f.truncate(config_claims)
    with open(blobs / hexd(layer_digest), "wb") as f:
        f.truncate(layer_claims)
    manifest = json.dumps({
        "schemaVersion": 2, "mediaType": OCI_MANIFEST, "config": config_desc,
        "layers": [{"mediaType": OCI_LAYER_TAR, "digest": layer_digest,
                    "size": layer_claims}],
    }).encode()
    (blobs / hexd(sha(manifest))).write_bytes(manifest)
    return root, f"localhost/airgap/clippy@{sha(manifest)}"


def prefetch_watched(tmp_path: Path, ref: str, source: Path) -> tuple[str, dict[str, int]]:
    """The refusal's text (or "provisioned"), and the bytes written per blob."""
    seen: dict[str, int] = {}
    try:
        prefetch(Store(tmp_path / "store"), ref, OciSourceSpec(source),
                 progress=alarm_progress(seen))
    except PrefetchFailed as exc:
        return exc.guidance().render_text(), seen
    except Alarm as exc:
        pytest.fail(f"no cap on declared sizes: {exc}")
    return "provisioned", seen


def test_an_image_declaring_more_than_the_cap_is_refused_before_a_byte_is_written(
        tmp_path: Path) -> None:
    """A sparse file of 64 GiB in a layout directory (0 bytes on disk) was copied into
    the store at whatever size the manifest declared."""
    layout, ref = sparse_layout(tmp_path / "big", layer_claims=64 * 1024**3)
    assert sum(p.stat().st_blocks for p in layout.rglob("*") if p.is_file()) * 512 < 65536
    text, seen = prefetch_watched(tmp_path / "a", ref, layout)
    assert f"more than {manifest.MAX_IMAGE_BYTES} (manifest.MAX_IMAGE_BYTES)" in text
    assert sum(seen.values()) == 0, seen
    # control: a declared size under the cap is copied (and then fails its digest)
    layout, ref = sparse_layout(tmp_path / "small", layer_claims=1 << 20)
    text, seen = prefetch_watched(tmp_path / "b", ref, layout)
    assert seen.get("sha256:" + "5" * 64) == 1 << 20 and "MAX_IMAGE_BYTES" not in text


def test_a_config_declared_over_max_document_is_refused_before_it_is_written(
        tmp_path: Path) -> None:
    """Store.resolve refuses a config over MAX_DOCUMENT; prefetch wrote it first."""
    layout, ref = sparse_layout(tmp_path / "layout", layer_claims=1024,
                                config_claims=64 * 1024**3)
    text, seen = prefetch_watched(tmp_path, ref, layout)
    assert f"more than {manifest.MAX_DOCUMENT} (manifest.MAX_DOCUMENT)" in text
    assert "config" in text and sum(seen.values()) == 0, seen


@pytest.mark.skipif(shutil.which("tar") is None, reason="GNU tar makes the sparse member")
def test_a_sparse_member_of_an_archive_is_refused(tmp_path: Path) -> None:
    """A 20 KB archive carried a GNU-sparse blob of any size (here 1 GiB, under the
    image cap) into the store."""
    layout, ref = sparse_layout(tmp_path / "layout", layer_claims=1024**3)
    archive = tmp_path / "image.tar"
    subprocess.run(["tar", "--sparse", "--format=posix", "-C", str(layout), "-cf",
                    str(archive), "."], check=True)
    assert archive.stat().st_size < 65536, archive.stat().st_size
    text, seen = prefetch_watched(tmp_path, ref, archive)
    assert "is a sparse file" in text and "5" * 64 in text
    assert sum(seen.values()) == 0, seen
    # control: without --sparse the same layout is an archive that opens
    plain = tmp_path / "plain.tar"
    small, _ = sparse_layout(tmp_path / "small", layer_claims=1024)
    subprocess.run(["tar", "--format=posix", "-C", str(small), "-cf", str(plain), "."],
                   check=True)
    oci_source.LayoutArchiveSource(plain).close()


def test_an_archive_declaring_more_than_the_cap_is_refused_at_its_header(
        tmp_path: Path) -> None:
    """Walking a compressed archive decompresses every member it skips: a 1.3 MB bz2
    archive declaring 1 TiB was hours of CPU. Here a 1 TiB member header in a bz2
    archive whose data stops after 1 MiB: refused at the header, not read through."""
    info = tarfile.TarInfo("padding")
    info.size = 1 << 40
    archive = tmp_path / "image.tar.bz2"
    with bz2.open(archive, "wb") as f:
        f.write(info.tobuf(tarfile.GNU_FORMAT))
        f.write(bytes(1 << 20))
    started = time.monotonic()
    with pytest.raises(SourceError) as refused:
        oci_source.LayoutArchiveSource(archive)
    assert (f"more than {oci_source.MAX_ARCHIVE_BYTES} bytes" in str(refused.value)
            and "MAX_ARCHIVE_BYTES" in str(refused.value))
    assert time.monotonic() - started < 5
    # control: the same header declaring 1 KiB is walked past (and then lacks oci-layout)
    info.size = 1024
    with bz2.open(archive, "wb") as f:
        f.write(info.tobuf(tarfile.GNU_FORMAT) + bytes(1024) + bytes(1024))
    with pytest.raises(SourceError, match="no oci-layout"):
        oci_source.LayoutArchiveSource(archive)


def test_a_global_pax_header_in_an_archive_is_capped(tmp_path: Path) -> None:
    """tarfile copied a 1 MiB global header's keys into every member: ~1.8 MB per member,
    ~18 GB at the member cap from a 6 MB archive."""
    def archive_with_global_header(size: int, path: Path) -> Path:
        records, k = b"", 0
        while len(records) < size:
            body = f" g{k:06d}=\n"
            records += f"{len(body) + 2}{body}".encode()
            k += 1
        head = tarfile.TarInfo("pax_global_header")
        head.type, head.size = tarfile.XGLTYPE, len(records)
        with open(path, "wb") as f:
            f.write(head.tobuf(tarfile.USTAR_FORMAT) + records
                    + b"\0" * ((-len(records)) % 512))
            with tarfile.open(fileobj=f, mode="w", format=tarfile.USTAR_FORMAT) as tar:
                info = tarfile.TarInfo("oci-layout")
                tar.addfile(info, io.BytesIO(b""))
                for i in range(60):
                    tar.addfile(tarfile.TarInfo(f"padding/{i}"), io.BytesIO(b""))
        return path

    oci_source.LayoutArchiveSource(archive_with_global_header(52, tmp_path / "ok.tar")).close()
    tracemalloc.start()
    try:
        with pytest.raises(SourceError) as refused:
            oci_source.LayoutArchiveSource(archive_with_global_header(
                tarheaders.MAX_HEADER_DATA - 1024, tmp_path / "big.tar"))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert f"more than {tarheaders.MAX_GLOBAL_HEADER_DATA} " in str(refused.value)
    assert peak < 8 * 1024**2, f"{peak / 1024**2:.0f} MiB held for a 1 MiB header"
