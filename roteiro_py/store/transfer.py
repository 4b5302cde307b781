"""Copying one pinned image from a source into the store, verifying every byte.

Registry and OCI-layout sources differ only in how a blob is opened; the walk is here,
once: fetch the pinned document and check it hashes to the pin *before anything is
written* (so a wrong pin leaves the store untouched), descend an index to the host
platform's manifest (checked against the index's descriptor), refuse layers the VM could
not unpack, copy config and layers through `BlobWriter` (verified as written; blobs
already stored and verifying are reused), write the documents, and record the reference
in `index.json` last.
"""

from __future__ import annotations

import hashlib
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import IO, Protocol

from roteiro_py.reference import ImageReference
from roteiro_py.store.blobs import BlobMismatch, ProgressCallback
from roteiro_py.store.layout import Store
from roteiro_py.store.manifest import (
    MAX_DOCUMENT,
    Descriptor,
    ManifestError,
    check_usable,
    follow_indexes,
    parse_document,
)


class SourceError(Exception):
    """A source could not supply what was asked; str() is the user-facing reason."""


class BlobSource(Protocol):
    #: Where the bytes come from, for messages and the store's source annotation.
    description: str

    def fetch_document(self, digest: str) -> tuple[bytes, str | None]:
        """The manifest or index stored under `digest` (at most MAX_DOCUMENT + 1 bytes)
        and the media type the source claims for it, if any. Not yet verified."""
        ...

    def open_blob(self, desc: Descriptor) -> AbstractContextManager[IO[bytes]]:
        """A stream of the blob's bytes. Not yet verified."""
        ...


@dataclass(frozen=True)
class Transfer:
    pinned: Descriptor
    manifest_digest: str
    bytes_fetched: int
    blobs_fetched: int
    blobs_reused: int


def _verified_document(source: BlobSource, digest: str, size: int | None,
                       what: str) -> tuple[bytes, str | None]:
    data, media_type = source.fetch_document(digest)
    if len(data) > MAX_DOCUMENT:
        raise SourceError(f"the {what} {digest} is larger than {MAX_DOCUMENT} bytes")
    actual = f"sha256:{hashlib.sha256(data).hexdigest()}"
    if actual != digest:
        raise SourceError(f"the {what} served for {digest} hashes to {actual}: it is not "
                          "the pinned content")
    if size is not None and len(data) != size:
        raise SourceError(f"the {what} {digest} is {len(data)} bytes, not {size}")
    return data, media_type


def transfer(store: Store, ref: ImageReference, source: BlobSource,
             progress: ProgressCallback | None = None) -> Transfer:
    """Provision `ref` (pinned) from `source`; raises SourceError with nothing recorded."""
    assert ref.digest is not None
    data, hint = _verified_document(source, ref.digest, None, "manifest")
    documents: list[tuple[Descriptor, bytes]] = []
    try:
        doc = parse_document(data, hint)
        pinned = Descriptor(doc.media_type, ref.digest, len(data))
        documents.append((pinned, data))
        doc, chain = follow_indexes(doc, lambda chosen: _verified_document(
            source, chosen.digest, chosen.size, "platform manifest")[0])
        documents.extend(chain)
        manifest_digest = documents[-1][0].digest
        check_usable(doc)
    except ManifestError as exc:
        raise SourceError(f"the image {ref.digest} cannot be used: {exc}") from None

    fetched = reused = nbytes = 0
    for desc in [doc.config, *doc.layers]:
        if store.has_blob(desc.digest, desc.size):
            reused += 1
            continue
        try:
            with source.open_blob(desc) as stream, store.new_blob(
                desc.digest, desc.size, progress
            ) as writer:
                # One byte past the size is read so an over-long blob is caught.
                writer.copy_from(stream, limit=desc.size + 1)
                writer.commit()
        except BlobMismatch as exc:
            raise SourceError(str(exc)) from None
        except OSError as exc:
            raise SourceError(f"reading blob {desc.digest} failed: {exc}") from None
        fetched += 1
        nbytes += desc.size
    for desc, body in documents:
        store.put_bytes(body, desc.digest)
    try:
        store.add_reference(ref, pinned, source.description)
    except ManifestError as exc:
        raise SourceError(f"the store changed under the pull: {exc}; run it again") from None
    return Transfer(pinned, manifest_digest, nbytes, fetched, reused)
