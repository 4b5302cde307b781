"""Fuzzing the parsers of documents a registry or an archive serves: any bytes give a
documented value or ManifestError (the store: ImageNotProvisioned), never another
exception. Bounded (the hypothesis profile in tests/conftest.py)."""

from __future__ import annotations

import contextlib
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from roteiro_py.errors import ImageNotProvisioned
from roteiro_py.reference import ImageReference
from roteiro_py.store import Store
from roteiro_py.store.manifest import (
    DOCKER_LIST,
    DOCKER_MANIFEST,
    INDEX_TYPES,
    OCI_CONFIG,
    OCI_INDEX,
    OCI_LAYER_TAR,
    OCI_MANIFEST,
    Descriptor,
    ImageIndex,
    ImageManifest,
    ManifestError,
    check_usable,
    follow_indexes,
    parse_document,
    select_manifest,
)
from tests.unit.store.store_images import make_image, provision, sha

D = "sha256:" + "e" * 64
MEDIA = st.sampled_from([OCI_INDEX, OCI_MANIFEST, DOCKER_LIST, DOCKER_MANIFEST, OCI_CONFIG,
                         OCI_LAYER_TAR, "", "text/plain"])
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False),
                    st.text(max_size=20), MEDIA, st.just(D), st.just(-1))
JSON = st.recursive(SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=12), inner, max_size=4)),
    max_leaves=25)


def descriptor(media: Any, digest: Any, size: Any, platform: Any) -> dict[str, Any]:
    return {"mediaType": media, "digest": digest, "size": size, "platform": platform}


DESCRIPTORS = st.builds(descriptor, st.one_of(MEDIA, JSON), st.one_of(st.just(D), JSON),
                        st.one_of(st.integers(min_value=0, max_value=10**6), JSON),
                        st.one_of(st.just({"os": "linux", "architecture": "amd64"}), JSON))
DOCUMENTS = st.one_of(
    st.fixed_dictionaries({"schemaVersion": st.one_of(st.just(2), JSON),
                           "mediaType": st.one_of(MEDIA, JSON),
                           "manifests": st.one_of(st.lists(DESCRIPTORS, max_size=3), JSON)}),
    st.fixed_dictionaries({"schemaVersion": st.just(2),
                           "config": st.one_of(DESCRIPTORS, JSON),
                           "layers": st.one_of(st.lists(DESCRIPTORS, max_size=3), JSON)}),
    JSON,
)
HINTS = st.one_of(st.none(), MEDIA, st.text(max_size=10))


def _check(data: bytes, hint: str | None) -> None:
    try:
        doc = parse_document(data, hint)
    except ManifestError:
        return
    assert isinstance(doc, ImageIndex | ImageManifest)
    if isinstance(doc, ImageManifest):
        assert all(isinstance(d, Descriptor) for d in (doc.config, *doc.layers))
        with contextlib.suppress(ManifestError):
            check_usable(doc)
        return
    assert doc.media_type in INDEX_TYPES or doc.media_type
    try:
        chosen = select_manifest(doc)
    except ManifestError:
        return
    assert chosen in doc.manifests
    with contextlib.suppress(ManifestError):  # one level further: the same bytes again
        follow_indexes(doc, lambda _desc: data)


@given(DOCUMENTS, HINTS)
def test_any_json_document_parses_or_is_refused(doc: Any, hint: str | None) -> None:
    _check(json.dumps(doc).encode(), hint)


@given(st.binary(max_size=300), HINTS)
def test_any_bytes_parse_or_are_refused(data: bytes, hint: str | None) -> None:
    _check(data, hint)


@pytest.mark.parametrize("bomb", [b"[" * 100_000 + b"]" * 100_000,
                                  b'{"schemaVersion": 2, "size": ' + b"9" * 5000 + b"}"],
                         ids=["nested-100000-deep", "5000-digit-integer"])
def test_json_bombs_are_a_manifest_error(bomb: bytes) -> None:
    """json.loads raises RecursionError / ValueError on these: once an exit 4."""
    with pytest.raises(ManifestError, match="not JSON"):
        parse_document(bomb)
    assert len(bomb) < 4 * 1024 * 1024  # both fit under MAX_DOCUMENT


def test_a_config_bomb_in_the_store_is_not_provisioned(store: Store) -> None:
    good = make_image({"a": b"1"})
    provision(store, good, "localhost/t/good")
    assert store.resolve(f"localhost/t/good@{good.digest}").config  # control arm
    bomb = b"[" * 100_000 + b"]" * 100_000
    manifest = json.dumps({
        "schemaVersion": 2, "mediaType": OCI_MANIFEST,
        "config": {"mediaType": OCI_CONFIG, "digest": sha(bomb), "size": len(bomb)},
        "layers": []}).encode()
    for data in (bomb, manifest):
        store.put_bytes(data, sha(data))
    ref = ImageReference("localhost", "t/bomb", None, sha(manifest))
    store.add_reference(ref, Descriptor(OCI_MANIFEST, sha(manifest), len(manifest)))
    with pytest.raises(ImageNotProvisioned) as refused:
        store.resolve(ref)
    assert f"the config blob {sha(bomb)} is not JSON" in refused.value.guidance().render_text()
