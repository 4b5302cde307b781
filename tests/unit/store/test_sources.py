"""Source dispatch, refusals before any download, and docker-archive conversion.

The docker-archive tests feed `import_docker_archive` a hand-made archive in the shape
`docker save` writes (the integration test does the same through a real engine); a
hand-made one is the only way to get an export whose layer disagrees with its config.
"""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from roteiro_py.errors import DownloadNotAllowed, TagNotDigest, UsageError
from roteiro_py.store import (
    DockerSourceSpec,
    OciSourceSpec,
    RegistrySourceSpec,
    Store,
    manifest,
    parse_source,
    prefetch,
)
from roteiro_py.store.docker_engine import import_docker_archive, pinned_name
from roteiro_py.store.prefetch import UNRECORDED_SOURCE
from roteiro_py.store.transfer import SourceError
from tests.unit.store.store_images import layer_tar, make_image, provision, sha


def test_parse_source() -> None:
    assert parse_source(None) == RegistrySourceSpec()
    assert parse_source("registry") == RegistrySourceSpec()
    assert parse_source("docker") == DockerSourceSpec()
    assert parse_source("oci:/tmp/x") == OciSourceSpec(Path("/tmp/x"))
    with pytest.raises(UsageError):
        parse_source("oci:")
    with pytest.raises(UsageError):
        parse_source("s3")


def test_without_allow_download_nothing_is_fetched_and_the_url_is_named(store: Store) -> None:
    # Port 9 on loopback: nothing listens, so any attempt to connect would fail
    # differently (PrefetchFailed), not with DownloadNotAllowed.
    ref = "127.0.0.1:9/team/clippy:1.95@sha256:" + "c" * 64
    with pytest.raises(DownloadNotAllowed) as caught:
        prefetch(store, ref, RegistrySourceSpec(), allow_download=False)
    text = caught.value.guidance().render_text()
    assert "http://127.0.0.1:9/v2/team/clippy/" in text
    assert "sha256:" + "c" * 64 in text
    assert not store.root.exists()


def test_remote_registries_are_named_with_https(store: Store) -> None:
    with pytest.raises(DownloadNotAllowed) as caught:
        prefetch(store, "registry.example/a/b@sha256:" + "d" * 64, RegistrySourceSpec())
    assert "https://registry.example/v2/a/b/" in caught.value.guidance().render_text()


def test_already_present_needs_no_download(store: Store) -> None:
    image = make_image({"a": b"1"})
    ref = provision(store, image, "127.0.0.1:9/team/clippy")
    result = prefetch(store, str(ref), RegistrySourceSpec(), allow_download=False)
    assert result.already_present and result.reference == str(ref)
    assert result.source == UNRECORDED_SOURCE  # provisioned without one, not "from 127.0.0.1:9"


def test_tags_are_refused_except_from_docker(store: Store) -> None:
    with pytest.raises(TagNotDigest):
        prefetch(store, "registry.example/a/b:1", RegistrySourceSpec(), allow_download=True)
    with pytest.raises(TagNotDigest):
        prefetch(store, "registry.example/a/b:1", OciSourceSpec(Path("/nonexistent")))


def test_pinned_name_convention() -> None:
    assert str(pinned_name("clippy-local")) == "localhost/clippy-local"
    assert str(pinned_name("team/clippy:1.95")) == "localhost/team/clippy:1.95"
    assert str(pinned_name("registry.example/team/clippy:1.95")) == \
        "registry.example/team/clippy:1.95"
    assert str(pinned_name("localhost/roteiro/clippy:1")) == "localhost/roteiro/clippy:1"


def docker_archive(layers: list[bytes], diff_ids: list[str] | None = None,
                   symlink_second: bool = False) -> bytes:
    config = json.dumps({"architecture": "amd64", "os": "linux", "rootfs": {
        "type": "layers", "diff_ids": diff_ids or [sha(x) for x in layers]}}).encode()
    config_name = sha(config).split(":")[1] + ".json"
    names = [f"layer{i}/layer.tar" for i in range(len(layers))]
    entries: list[tuple[str, bytes | None, str | None]] = []
    for i, (name, layer) in enumerate(zip(names, layers, strict=True)):
        if symlink_second and i == 1:
            entries.append((name, None, "../layer0/layer.tar"))
        else:
            entries.append((name, layer, None))
    entries.append((config_name, config, None))
    manifest = [{"Config": config_name, "RepoTags": ["t:latest"], "Layers": names}]
    entries.append(("manifest.json", json.dumps(manifest).encode(), None))
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data, link in entries:
            info = tarfile.TarInfo(name)
            if link is not None:
                info.type, info.linkname = tarfile.SYMTYPE, link
                tar.addfile(info)
            else:
                assert data is not None
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def test_docker_archive_becomes_an_oci_image(store: Store) -> None:
    layers = [layer_tar({"hello": b"hi"}), layer_tar({"big": b"b" * (2 << 20)})]
    imported = import_docker_archive(store, io.BytesIO(docker_archive(layers)))
    assert [d.digest for d in imported.layers] == [sha(x) for x in layers]
    again = import_docker_archive(store, io.BytesIO(docker_archive(layers)))
    assert again.manifest == imported.manifest  # deterministic: one image, one pin
    manifest = json.loads(store.blob_path(imported.manifest.digest).read_bytes())
    assert manifest["config"]["digest"] == imported.config_digest


def test_docker_archive_with_symlinked_duplicate_layer(store: Store) -> None:
    layer = layer_tar({"same": b"x"})
    imported = import_docker_archive(
        store, io.BytesIO(docker_archive([layer, layer], symlink_second=True)))
    assert [d.digest for d in imported.layers] == [sha(layer)] * 2


def test_docker_archive_disagreeing_with_its_config_is_refused(store: Store) -> None:
    layers = [layer_tar({"hello": b"hi"})]
    with pytest.raises(SourceError, match="diff_ids"):
        import_docker_archive(store, io.BytesIO(docker_archive(layers, ["sha256:" + "0" * 64])))


def test_an_image_already_present_is_said_to_come_from_where_it_really_came_from(
        tmp_path: Path) -> None:
    """Handed `image.tar` and told to prefetch it as ghcr.io/...@digest (the name is never
    checked against the archive), a later plain `prefetch` said "provisioned from
    https://ghcr.io: already present": no byte of it came from there."""
    image = make_image({"a": b"hostile"})
    layout = tmp_path / "layout"
    blobs = layout / "blobs" / "sha256"
    blobs.mkdir(parents=True)
    (layout / "oci-layout").write_text('{"imageLayoutVersion":"1.0.0"}')
    for digest, data in image.blobs().items():
        (blobs / digest.split(":")[1]).write_bytes(data)
    ref = f"ghcr.io/rust-lang/clippy-official:1.99.0@{image.digest}"
    store = Store(tmp_path / "store")
    first = prefetch(store, ref, OciSourceSpec(layout))
    assert not first.already_present and first.source == f"oci:{layout}"  # control
    again = prefetch(store, ref, RegistrySourceSpec())  # what CI's `prefetch` step runs
    assert again.already_present
    assert again.source == f"oci:{layout}", f"said to come from {again.source}"
    assert store.source_of(ref) == f"oci:{layout}"


@pytest.mark.skipif(shutil.which("tar") is None, reason="GNU tar makes the sparse member")
def test_a_docker_export_with_a_sparse_member_is_refused(tmp_path: Path, store: Store) -> None:
    """The export was read without the caps of an oci: archive: a sparse layer.tar of
    any declared size was written into the store."""
    export = tmp_path / "export"
    export.mkdir()
    with open(export / "layer.tar", "wb") as f:
        f.truncate(1 << 30)  # 0 bytes on disk, 1 GiB written
    archive = tmp_path / "export.tar"
    subprocess.run(["tar", "--sparse", "--format=posix", "-C", str(export), "-cf",
                    str(archive), "."], check=True)
    assert archive.stat().st_size < 65536
    written: list[int] = []
    with open(archive, "rb") as stream, pytest.raises(SourceError, match="sparse file"):
        import_docker_archive(store, stream, lambda _d, done, _t: written.append(done))
    assert written == [], f"{max(written)} bytes written from a {archive.stat().st_size}-byte export"


def test_a_docker_export_declaring_more_than_an_image_may_hold_is_refused(
        store: Store) -> None:
    info = tarfile.TarInfo("layer.tar")
    info.size = manifest.MAX_IMAGE_BYTES + 1
    stream = io.BytesIO(info.tobuf(tarfile.GNU_FORMAT) + bytes(1 << 20))
    with pytest.raises(SourceError) as refused:
        import_docker_archive(store, stream)
    assert f"more than {manifest.MAX_IMAGE_BYTES} bytes" in str(refused.value)
    assert stream.tell() < 2 << 20  # refused at the header, nothing read past it


def test_a_docker_export_with_a_large_global_pax_header_is_refused(store: Store) -> None:
    records = b"".join(f"{len(f' g{k:06d}=') + 3} g{k:06d}=\n".encode()
                       for k in range(2000))
    head = tarfile.TarInfo("pax_global_header")
    head.type, head.size = tarfile.XGLTYPE, len(records)
    stream = io.BytesIO(head.tobuf(tarfile.USTAR_FORMAT) + records
                        + b"\0" * ((-len(records)) % 512) + docker_archive([layer_tar({})]))
    with pytest.raises(SourceError, match="MAX_GLOBAL_HEADER_DATA"):
        import_docker_archive(store, stream)
