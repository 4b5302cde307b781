"""OCI and Docker image documents: descriptors, manifests, indexes, and platform choice.

Everything here parses JSON that came from outside (a registry, an archive, a file in the
store) and is then used to name files: a descriptor's digest becomes a path under
`blobs/sha256/`. So every digest is checked against `sha256:<64 lowercase hex>` before it
is used, and no other algorithm is accepted; without that, a manifest listing
`sha256:../../../etc/passwd` would make the store read or write outside itself.

A pin may name an index (a multi-platform image) or a manifest. An index resolves to the
manifest for the host's platform (linux/amd64 on the machines this is built on); the
choice is made in one place, `select_manifest`, so the store and every source agree on it.
"""

from __future__ import annotations

import json
import platform
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_CONFIG = "application/vnd.docker.container.image.v1+json"

OCI_LAYER_TAR = "application/vnd.oci.image.layer.v1.tar"
OCI_LAYER_GZIP = "application/vnd.oci.image.layer.v1.tar+gzip"
OCI_LAYER_ZSTD = "application/vnd.oci.image.layer.v1.tar+zstd"
DOCKER_LAYER_GZIP = "application/vnd.docker.image.rootfs.diff.tar.gzip"
DOCKER_LAYER_TAR = "application/vnd.docker.image.rootfs.diff.tar"

INDEX_TYPES = frozenset({OCI_INDEX, DOCKER_LIST})
MANIFEST_TYPES = frozenset({OCI_MANIFEST, DOCKER_MANIFEST})
CONFIG_TYPES = frozenset({OCI_CONFIG, DOCKER_CONFIG})
#: Layer media types the VM backend can unpack into a root filesystem. Anything else
#: (non-distributable "foreign" layers, encrypted layers) is refused at prefetch time, so
#: the store never holds an image that resolves but cannot be booted.
LAYER_TYPES = frozenset(
    {OCI_LAYER_TAR, OCI_LAYER_GZIP, OCI_LAYER_ZSTD, DOCKER_LAYER_GZIP, DOCKER_LAYER_TAR}
)

#: What a registry is asked for; order is preference (OCI first, then Docker's).
ACCEPT = ", ".join((OCI_INDEX, OCI_MANIFEST, DOCKER_LIST, DOCKER_MANIFEST))

#: Manifests and configs are read whole into memory; a real one is a few KiB (the
#: 754 MB toolchain image's manifest is under 1 KiB). A cap keeps a hostile source from
#: making the reader allocate without bound.
MAX_DOCUMENT = 4 * 1024 * 1024

_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")


class ManifestError(ValueError):
    """A document that is not a usable image manifest or index; the text says why."""


def load_json(data: bytes) -> Any:
    """JSON from outside, or ManifestError.

    json.loads raises more than JSONDecodeError on hostile input: ValueError for an
    integer past Python's 4300-digit limit, RecursionError for arrays nested a few
    thousand deep (4 MiB allows two million). Both were a crash (exit 4).
    """
    try:
        return json.loads(data)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, UnicodeDecodeError too
        raise ManifestError(f"not JSON: {str(exc)[:200]}") from None


def check_digest(value: object) -> str:
    """Return `value` if it is `sha256:<64 hex>`, else raise: it is about to become a path."""
    if not isinstance(value, str) or not _DIGEST.fullmatch(value):
        raise ManifestError(f"invalid digest {str(value)[:80]!r} (expected sha256:<64 hex>)")
    return value


def hex_of(digest: str) -> str:
    return check_digest(digest).split(":", 1)[1]


@dataclass(frozen=True)
class Descriptor:
    media_type: str
    digest: str
    size: int
    platform: dict[str, Any] | None = None
    annotations: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"mediaType": self.media_type, "digest": self.digest,
                               "size": self.size}
        if self.platform is not None:
            out["platform"] = self.platform
        if self.annotations:
            out["annotations"] = dict(self.annotations)
        return out


def parse_descriptor(obj: object, *, what: str) -> Descriptor:
    if not isinstance(obj, dict):
        raise ManifestError(f"{what} is not a JSON object")
    media_type = obj.get("mediaType")
    size = obj.get("size")
    if not isinstance(media_type, str):
        raise ManifestError(f"{what} has no mediaType")
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise ManifestError(f"{what} has no valid size")
    plat = obj.get("platform")
    annotations = obj.get("annotations") or {}
    if not isinstance(annotations, dict):
        raise ManifestError(f"{what} has annotations that are not an object")
    return Descriptor(
        media_type=media_type,
        digest=check_digest(obj.get("digest")),
        size=size,
        platform=plat if isinstance(plat, dict) else None,
        annotations={str(k): str(v) for k, v in annotations.items()},
    )


@dataclass(frozen=True)
class ImageIndex:
    media_type: str
    manifests: list[Descriptor]


@dataclass(frozen=True)
class ImageManifest:
    media_type: str
    config: Descriptor
    layers: list[Descriptor]


def parse_document(data: bytes, hint: str | None = None) -> ImageIndex | ImageManifest:
    """Parse a manifest or an index; `hint` is the media type a descriptor or header gave.

    The document's own `mediaType` wins when present (OCI makes it optional); without it
    the shape decides (`manifests` -> index, `layers` -> manifest). A hint that contradicts
    the document is an error: a source that says "manifest" and serves an index is broken
    or lying, and the store records the pin's media type from this decision.
    """
    doc = load_json(data)
    if not isinstance(doc, dict):
        raise ManifestError("not a JSON object")
    if doc.get("schemaVersion") != 2:
        raise ManifestError(f"schemaVersion {doc.get('schemaVersion')!r} is not supported "
                            "(only schema 2: OCI and Docker v2 manifests)")
    declared = doc.get("mediaType")
    if isinstance(declared, str):
        media_type = declared
    elif "manifests" in doc:
        media_type = OCI_INDEX
    elif "layers" in doc:
        media_type = OCI_MANIFEST
    else:
        raise ManifestError("neither a manifest nor an index (no layers, no manifests)")
    if hint in INDEX_TYPES | MANIFEST_TYPES and (hint in INDEX_TYPES) != (
        media_type in INDEX_TYPES
    ):
        raise ManifestError(f"described as {hint} but the document is {media_type}")
    if media_type in INDEX_TYPES:
        raw = doc.get("manifests")
        if not isinstance(raw, list):
            raise ManifestError("index has no manifests list")
        return ImageIndex(media_type, [parse_descriptor(m, what=f"manifests[{i}]")
                                       for i, m in enumerate(raw)])
    if media_type in MANIFEST_TYPES:
        config = parse_descriptor(doc.get("config"), what="config")
        raw_layers = doc.get("layers")
        if not isinstance(raw_layers, list):
            raise ManifestError("manifest has no layers list")
        layers = [parse_descriptor(layer, what=f"layers[{i}]")
                  for i, layer in enumerate(raw_layers)]
        return ImageManifest(media_type, config, layers)
    raise ManifestError(f"media type {media_type!r} is neither a manifest nor an index")


#: Bytes of all layers of one image together, as its manifest declares them, checked
#: before a byte is written: the toolchain image is 754 MB, and a flattened image may
#: hold at most 16 GiB (rootfs.MAX_FLATTENED_BYTES). A declared size is all a sparse file
#: in a layout directory (0 bytes on disk) needs to fill the store's disk.
MAX_IMAGE_BYTES = 16 * 1024**3

#: Layers in one image. Docker's overlay driver stops at 127; each layer is one request
#: of at most registry.DEADLINE, so this also bounds how long a pull can be kept going.
MAX_LAYERS = 256


def check_usable(manifest: ImageManifest) -> None:
    """Refuse a manifest whose config or layers the VM backend could not use, or that
    declares more bytes than the store will write for one image."""
    if len(manifest.layers) > MAX_LAYERS:
        raise ManifestError(f"the manifest lists {len(manifest.layers)} layers, more than "
                            f"{MAX_LAYERS} (manifest.MAX_LAYERS)")
    if manifest.config.size > MAX_DOCUMENT:
        raise ManifestError(f"the config {manifest.config.digest} is declared as "
                            f"{manifest.config.size} bytes, more than {MAX_DOCUMENT} "
                            "(manifest.MAX_DOCUMENT)")
    total = sum(layer.size for layer in manifest.layers)
    if total > MAX_IMAGE_BYTES:
        raise ManifestError(f"the layers are declared as {total} bytes together, more than "
                            f"{MAX_IMAGE_BYTES} (manifest.MAX_IMAGE_BYTES)")
    if manifest.config.media_type not in CONFIG_TYPES:
        raise ManifestError(f"config media type {manifest.config.media_type!r} is not an "
                            "image config")
    for i, layer in enumerate(manifest.layers):
        if layer.media_type not in LAYER_TYPES:
            raise ManifestError(f"layer {i} ({layer.digest}) has media type "
                                f"{layer.media_type!r}, which cannot be unpacked")


_ARCH = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}


def host_platform() -> tuple[str, str]:
    """(os, architecture) in OCI's names; the guest runs the host's architecture."""
    machine = platform.machine().lower()
    return "linux", _ARCH.get(machine, machine)


def select_manifest(index: ImageIndex, want: tuple[str, str] | None = None) -> Descriptor:
    """The index entry for the host platform; first match wins, as Docker does.

    Attestation manifests (`platform` unknown/unknown) never match. Without a match the
    error lists what the index offers, so the user sees it is a platform problem.
    """
    os_name, arch = want or host_platform()
    for desc in index.manifests:
        plat = desc.platform or {}
        if plat.get("os") == os_name and plat.get("architecture") == arch:
            if desc.media_type not in MANIFEST_TYPES | INDEX_TYPES:
                continue
            return desc
    offered = sorted({f"{(d.platform or {}).get('os')}/{(d.platform or {}).get('architecture')}"
                      for d in index.manifests})
    raise ManifestError(f"the index has no manifest for {os_name}/{arch} "
                        f"(it offers: {', '.join(offered) or 'nothing'})")


#: Indexes may point at indexes; deeper than this is refused rather than followed.
MAX_INDEX_DEPTH = 4


def follow_indexes(
    doc: ImageIndex | ImageManifest, fetch: Callable[[Descriptor], bytes]
) -> tuple[ImageManifest, list[tuple[Descriptor, bytes]]]:
    """From a pinned document to the host platform's manifest, through nested indexes.

    `fetch` reads (and verifies) the document a descriptor names: the store reads its own
    blobs, a source downloads. Returns the manifest and each (descriptor, bytes) followed,
    the platform manifest last; an empty list when the pin is a manifest itself.
    """
    chain: list[tuple[Descriptor, bytes]] = []
    while isinstance(doc, ImageIndex):
        if len(chain) == MAX_INDEX_DEPTH:
            raise ManifestError(f"indexes nested more than {MAX_INDEX_DEPTH} deep")
        chosen = select_manifest(doc)
        data = fetch(chosen)
        doc = parse_document(data, chosen.media_type)
        chain.append((chosen, data))
    return doc, chain
