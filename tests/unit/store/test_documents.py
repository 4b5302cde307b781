"""Parsing untrusted image documents, platform choice, auth headers and credentials."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from roteiro_py.store.auth import Credentials, credentials_for, parse_www_authenticate
from roteiro_py.store.manifest import (
    MAX_LAYERS,
    OCI_CONFIG,
    OCI_INDEX,
    OCI_LAYER_TAR,
    OCI_MANIFEST,
    Descriptor,
    ImageIndex,
    ImageManifest,
    ManifestError,
    check_digest,
    check_usable,
    parse_document,
    select_manifest,
)


@pytest.mark.parametrize("bad", ["sha256:../../etc/passwd", "sha512:" + "a" * 64,
                                 "sha256:" + "A" * 64, "sha256:" + "a" * 63, None, 5])
def test_digests_that_would_escape_the_store_are_refused(bad: object) -> None:
    with pytest.raises(ManifestError):
        check_digest(bad)


def test_document_kind_from_shape_and_hint_conflict() -> None:
    index = json.dumps({"schemaVersion": 2, "manifests": []}).encode()
    assert isinstance(parse_document(index), ImageIndex)
    with pytest.raises(ManifestError, match="described as"):
        parse_document(index, "application/vnd.oci.image.manifest.v1+json")
    with pytest.raises(ManifestError, match="schemaVersion"):
        parse_document(b'{"schemaVersion": 1, "fsLayers": []}')


def _entry(arch: str, os_name: str = "linux") -> dict[str, object]:
    return {"mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": "sha256:" + {"amd64": "a", "arm64": "b"}.get(arch, "c") * 64, "size": 1,
            "platform": {"os": os_name, "architecture": arch}}


def test_select_manifest_skips_attestations_and_lists_offers() -> None:
    doc = parse_document(json.dumps({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": [
        _entry("unknown", "unknown"), _entry("arm64"), _entry("amd64")]}).encode())
    assert isinstance(doc, ImageIndex)
    assert select_manifest(doc, ("linux", "amd64")).digest == "sha256:" + "a" * 64
    with pytest.raises(ManifestError, match="linux/arm64, unknown/unknown"):
        select_manifest(doc, ("linux", "s390x"))


def test_parse_www_authenticate() -> None:
    [bearer] = parse_www_authenticate(
        'Bearer realm="https://auth.docker.io/token",service="registry.docker.io",'
        'scope="repository:library/alpine:pull"')
    assert bearer.scheme == "bearer"
    assert bearer.params == {"realm": "https://auth.docker.io/token",
                             "service": "registry.docker.io",
                             "scope": "repository:library/alpine:pull"}
    basic, token = parse_www_authenticate('Basic realm="a \\"b\\"", Bearer realm=x,error=y')
    assert (basic.scheme, basic.params) == ("basic", {"realm": 'a "b"'})
    assert (token.scheme, token.params) == ("bearer", {"realm": "x", "error": "y"})
    assert parse_www_authenticate("") == []


def test_credentials_from_docker_config(tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    secret = "s3cr3t:with:colons"
    config.write_text(json.dumps({"auths": {
        "registry.example:5000": {"auth": base64.b64encode(f"ann:{secret}".encode()).decode()},
        "https://index.docker.io/v1/": {"auth": base64.b64encode(b"hub:pw").decode()},
    }}))
    creds = credentials_for("registry.example:5000", config)
    assert creds == Credentials("ann", secret)
    assert secret not in repr(creds) and secret not in str(creds) and secret not in f"{creds}"
    assert credentials_for("registry-1.docker.io", config) == Credentials("hub", "pw")
    assert credentials_for("other.example", config) is None
    config.write_text("{not json")
    assert credentials_for("registry.example:5000", config) is None


def test_follow_indexes_reaches_the_platform_manifest_and_bounds_the_nesting() -> None:
    import json as _json

    from roteiro_py.store import manifest as m

    plat = {"os": "linux", "architecture": "amd64"}
    leaf = _json.dumps({"schemaVersion": 2, "mediaType": m.OCI_MANIFEST,
                        "config": {"mediaType": m.OCI_CONFIG, "digest": "sha256:" + "c" * 64, "size": 2},
                        "layers": []}).encode()

    def nested(depth: int) -> tuple[m.ImageIndex, dict[str, bytes]]:
        docs: dict[str, bytes] = {}
        child, media = leaf, m.OCI_MANIFEST
        for level in range(depth):
            digest = f"sha256:{level:064x}"
            docs[digest] = child
            child = _json.dumps({"schemaVersion": 2, "mediaType": m.OCI_INDEX, "manifests": [
                {"mediaType": media, "digest": digest, "size": len(docs[digest]), "platform": plat}]}).encode()
            media = m.OCI_INDEX
        top = m.parse_document(child, m.OCI_INDEX)
        assert isinstance(top, m.ImageIndex)
        return top, docs

    top, docs = nested(m.MAX_INDEX_DEPTH)
    found, chain = m.follow_indexes(top, lambda desc: docs[desc.digest])
    assert isinstance(found, m.ImageManifest) and found.config.digest == "sha256:" + "c" * 64
    assert len(chain) == m.MAX_INDEX_DEPTH and chain[-1][1] == leaf
    top, docs = nested(m.MAX_INDEX_DEPTH + 1)
    with pytest.raises(m.ManifestError, match=f"more than {m.MAX_INDEX_DEPTH} deep"):
        m.follow_indexes(top, lambda desc: docs[desc.digest])


def test_a_manifest_with_more_layers_than_the_bound_is_unusable() -> None:
    def manifest(layers: int) -> ImageManifest:
        d = "sha256:" + "f" * 64
        return ImageManifest(OCI_MANIFEST, Descriptor(OCI_CONFIG, d, 2),
                             [Descriptor(OCI_LAYER_TAR, d, 1)] * layers)

    check_usable(manifest(MAX_LAYERS))  # control: at the bound it is usable
    with pytest.raises(ManifestError, match=f"more than {MAX_LAYERS} \\(manifest.MAX_LAYERS\\)"):
        check_usable(manifest(MAX_LAYERS + 1))
