"""`--from docker` against the machine's real Docker engine (no pull: FROM scratch)."""

from __future__ import annotations

import tarfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from roteiro_py.errors import PrefetchFailed
from roteiro_py.reference import parse_pinned
from roteiro_py.store import DockerSourceSpec, Store, prefetch


@pytest.fixture
def engine_image(tmp_path: Path) -> Iterator[str]:
    client = docker.from_env()
    context = tmp_path / "context"
    context.mkdir()
    (context / "hello.txt").write_text("hello from the engine\n")
    (context / "Dockerfile").write_text("FROM scratch\nCOPY hello.txt /hello.txt\n")
    name = f"roteiro-store-test-{uuid.uuid4().hex[:12]}"
    client.images.build(path=str(context), tag=f"{name}:v1", rm=True, pull=False)
    try:
        yield name
    finally:
        client.images.remove(f"{name}:v1", force=True)
        client.close()


def test_engine_image_becomes_a_present_pin(engine_image: str, tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    result = prefetch(store, f"{engine_image}:v1", DockerSourceSpec())
    ref = parse_pinned(result.reference)
    assert result.reference == f"localhost/{engine_image}:v1@{result.manifest_digest}"
    assert store.is_present(result.reference)
    [layer] = store.resolve(ref).layers
    with tarfile.open(layer.path) as tar:
        member = tar.extractfile("hello.txt")
        assert member is not None and member.read() == b"hello from the engine\n"

    # The same engine image gives the same pin, and the pin is accepted back.
    again = prefetch(Store(tmp_path / "other"), result.reference, DockerSourceSpec())
    assert again.reference == result.reference

    data = bytearray(layer.path.read_bytes())
    data[100] ^= 0x01
    layer.path.write_bytes(bytes(data))
    presence = store.is_present(ref)
    assert not presence and layer.digest in (presence.detail or "")


def test_stale_pin_and_unknown_name_are_refused(engine_image: str, tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    with pytest.raises(PrefetchFailed, match="rebuilt or retagged"):
        prefetch(store, f"{engine_image}:v1@sha256:{'0' * 64}", DockerSourceSpec())
    assert store.references() == []
    with pytest.raises(PrefetchFailed) as caught:
        prefetch(store, f"{engine_image}:nope", DockerSourceSpec())
    assert "has no image named" in caught.value.guidance().render_text()


