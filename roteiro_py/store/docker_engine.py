"""`--from docker`: an image the user built with the local Docker engine, made a pin.

`docker save` (the SDK's `image.save()`) streams a docker-archive: a tar holding
`manifest.json`, the image config (`<id>.json`, or `blobs/sha256/<hex>` from Docker 25
on) and one uncompressed tar per layer. It is read as a stream, never unpacked to disk
as a whole: each layer goes straight through `BlobWriter` into the store, named by the
digest of what arrived. Those digests are then checked against the config's own
`rootfs.diff_ids` (the engine's independent record of each layer), so a truncated or
altered stream is refused. A config blob (its digest is the engine's image ID) and an
OCI manifest are written, and the manifest's digest is the pin.

The manifest is serialised deterministically (fixed key order, no whitespace), so the
same engine image always yields the same pin.

Pinned-reference convention (what goes into `[lint] image`): the name as the user gave
it, without `localhost/` in front when it already names a registry host, with the tag
kept when one was given, then `@sha256:<digest of the OCI manifest written>`:
`docker build -t clippy-local .` -> `localhost/clippy-local@sha256:…`;
`-t registry.example/team/clippy:1.95` -> `registry.example/team/clippy:1.95@sha256:…`.
The digest is of the manifest this module writes (uncompressed layers), so it differs
from the digest the same image gets when pushed to a registry (compressed layers).
"""

from __future__ import annotations

import io
import json
import posixpath
import tarfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import IO, Any

from roteiro_py.reference import ImageReference, parse
from roteiro_py.store.blobs import BlobMismatch, ProgressCallback
from roteiro_py.store.layout import Store
from roteiro_py.store.manifest import (
    MAX_IMAGE_BYTES,
    OCI_CONFIG,
    OCI_LAYER_TAR,
    OCI_MANIFEST,
    Descriptor,
    check_digest,
    load_json,
)
from roteiro_py.store.tarheaders import BoundedTarInfo, member_refusal
from roteiro_py.store.transfer import SourceError

#: Entries of the archive at most this big are buffered in memory until manifest.json
#: (which comes last) says what they are; bigger ones stream into the store at once.
_SMALL = 1 << 20
_MAX_BUFFERED = 64 << 20


class _IterReader(io.RawIOBase):
    """A file-like view of the SDK's chunk generator, for tarfile's stream mode."""

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self._chunks: Iterator[bytes] = iter(chunks)
        self._buffer = b""

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        while not self._buffer:
            try:
                self._buffer = next(self._chunks)
            except StopIteration:
                return 0
        n = min(len(b), len(self._buffer))
        b[:n] = self._buffer[:n]
        self._buffer = self._buffer[n:]
        return n


@dataclass(frozen=True)
class ImportedImage:
    manifest: Descriptor
    config_digest: str
    layers: list[Descriptor]
    repo_tags: list[str]
    bytes_written: int


def import_docker_archive(store: Store, stream: IO[bytes] | io.BufferedReader,
                          progress: ProgressCallback | None = None) -> ImportedImage:
    """Convert one docker-archive stream into OCI blobs in `store`; return its manifest.

    The reference is not recorded here (the caller does, last). Raises SourceError.
    """
    stored: dict[str, tuple[str, int]] = {}  # archive name -> (digest, size)
    small: dict[str, bytes] = {}
    links: dict[str, str] = {}
    buffered = written = declared = 0
    try:
        with tarfile.open(fileobj=stream, mode="r|", tarinfo=BoundedTarInfo) as archive:
            for member in archive:
                # a stream keeps every member otherwise; `members` is public tarfile API
                # that typeshed leaves out
                archive.members.clear()  # type: ignore[attr-defined]
                declared += member.size
                why = member_refusal(member, declared, MAX_IMAGE_BYTES, "manifest.MAX_IMAGE_BYTES")
                if why:
                    raise SourceError(f"the image export's {why}")
                name = posixpath.normpath(member.name)
                if member.issym() or member.islnk():
                    target = (member.linkname if member.islnk()
                              else posixpath.join(posixpath.dirname(name), member.linkname))
                    links[name] = posixpath.normpath(target)
                    continue
                if not member.isfile():
                    continue
                source = archive.extractfile(member)
                assert source is not None
                if member.size <= _SMALL:
                    buffered += member.size
                    if buffered > _MAX_BUFFERED:
                        raise SourceError("the archive has more small files than an image "
                                          "export can")
                    small[name] = source.read()
                    continue
                with store.new_blob(progress=progress) as writer:
                    writer.copy_from(source)
                    stored[name] = (writer.commit(), writer.size)
                    written += writer.size
    except (tarfile.TarError, EOFError, ValueError) as exc:  # ValueError: sparse maps
        raise SourceError(f"the engine's export is not a readable tar: {exc}") from None

    def lookup(name: str) -> str:
        seen = 0
        name = posixpath.normpath(name)
        while name in links and seen < 16:
            name, seen = links[name], seen + 1
        return name

    try:
        index = load_json(small[lookup("manifest.json")])
        entry = index[0]
        config_name = lookup(entry["Config"])
        layer_names = [lookup(n) for n in entry["Layers"]]
        repo_tags = list(entry.get("RepoTags") or [])
    except (KeyError, IndexError, TypeError, ValueError) as exc:  # ManifestError too
        raise SourceError(f"the engine's export has no usable manifest.json ({exc!r})") from None
    if len(index) != 1:
        raise SourceError(f"the engine's export holds {len(index)} images, not one")
    config_bytes = small.get(config_name)
    if config_bytes is None:
        raise SourceError(f"the engine's export lacks the image config {config_name}")
    try:
        config = load_json(config_bytes)
        diff_ids = [check_digest(d) for d in config["rootfs"]["diff_ids"]]
    except (KeyError, TypeError, ValueError) as exc:  # ManifestError too
        raise SourceError(f"the image config has no usable rootfs.diff_ids ({exc})") from None

    layers: list[Descriptor] = []
    for i, name in enumerate(layer_names):
        if name in stored:
            digest, size = stored[name]
        elif name in small:
            digest, size = store.put_bytes(small[name]), len(small[name])
            written += size
        else:
            raise SourceError(f"the engine's export lacks layer {i} ({name})")
        layers.append(Descriptor(OCI_LAYER_TAR, digest, size))
    if [d.digest for d in layers] != diff_ids:
        raise SourceError("the exported layers do not match the image config's diff_ids "
                          f"(got {[d.digest for d in layers]}, config says {diff_ids}): "
                          "the export was altered or cut short")
    config_digest = store.put_bytes(config_bytes)
    written += len(config_bytes)
    manifest_body = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": Descriptor(OCI_CONFIG, config_digest, len(config_bytes)).to_json(),
        "layers": [d.to_json() for d in layers],
    }
    manifest_bytes = json.dumps(manifest_body, separators=(",", ":")).encode()
    manifest_digest = store.put_bytes(manifest_bytes)
    written += len(manifest_bytes)
    return ImportedImage(Descriptor(OCI_MANIFEST, manifest_digest, len(manifest_bytes)),
                         config_digest, layers, repo_tags, written)


def pinned_name(text: str) -> ImageReference:
    """The reference to record for the engine image the user named `text` (see module)."""
    ref = parse(text)
    explicit_host = "/" in text.split("@")[0] and ref.registry != "registry-1.docker.io"
    if explicit_host:
        return ImageReference(ref.registry, ref.repository, ref.tag, None)
    path = text.split("@")[0]
    if ref.tag:
        path = path[: -(len(ref.tag) + 1)]
    if path.startswith(("docker.io/", "index.docker.io/")):
        path = path.split("/", 1)[1]
    return parse(f"localhost/{path}" + (f":{ref.tag}" if ref.tag else ""))


def engine_name(ref_text: str) -> str:
    """The name to ask the engine for: the user's text without a digest."""
    return ref_text.strip().split("@", 1)[0]


def save_image(name: str) -> tuple[Iterable[bytes], str]:
    """The engine's export stream for `name`, and the image ID; SourceError if unavailable."""
    try:
        # lazy: the docker SDK only for `prefetch --from docker`
        import docker
        import docker.errors
    except ImportError as exc:  # pragma: no cover - docker is a declared dependency
        raise SourceError(f"the docker SDK is not installed: {exc}") from None
    try:
        client = docker.from_env()
        try:
            image = client.images.get(name)
        except docker.errors.ImageNotFound:
            if not name.startswith("localhost/"):
                raise
            image = client.images.get(name[len("localhost/"):])
        return image.save(named=False), str(image.id)
    except docker.errors.ImageNotFound:
        raise SourceError(f"the Docker engine has no image named {name!r} (build it with "
                          f"`docker build -t {name} …` first)") from None
    except docker.errors.DockerException as exc:
        raise SourceError(f"could not use the Docker engine: {exc}") from None


def import_from_engine(store: Store, name: str,
                       progress: ProgressCallback | None = None) -> ImportedImage:
    chunks, _image_id = save_image(name)
    try:
        reader = io.BufferedReader(_IterReader(chunks), buffer_size=1 << 20)
        return import_docker_archive(store, reader, progress)
    except BlobMismatch as exc:
        raise SourceError(str(exc)) from None
    except OSError as exc:
        raise SourceError(f"reading the engine's export failed: {exc}") from None
