"""The image store: an OCI image layout under `paths.store_root()`, and what is in it.

Layout (OCI image-layout spec 1.0): `oci-layout`, `blobs/sha256/<hex>`, and `index.json`
whose `manifests` list one descriptor per provisioned reference, annotated with
`org.opencontainers.image.ref.name` = the full pinned reference. The descriptor is the
pin itself: its digest is the reference's digest and its mediaType says whether that is
an index (multi-platform) or a single manifest.

Guarantees, and why:

- `index.json` is the commit point. A source writes every blob first (each verified as it
  is written, see `blobs.py`), then `add_reference` checks under the store lock that every
  blob the reference needs is there and rewrites `index.json` atomically (temp file +
  `os.replace`). A pull killed at any moment therefore leaves no entry for its reference.
- `is_present` (prefetch, `doctor --verify`) does not trust the index: it re-hashes the
  manifest, the config and every layer on every call. Cost: one sequential read of the
  image at ~1.7 GB/s sha256 on these machines (the 990 MB toolchain image: about 0.5 s,
  up to 2 s under load, blobs hashed in parallel threads). It deliberately keeps no
  cache keyed by (path, size, mtime_ns): ext4 timestamps advance at the kernel tick
  (~4 ms), so a byte flipped right after a write keeps the same key; `os.utime` restores
  an mtime at will; and media corruption never touches it. Such a cache would answer
  "present" for exactly the corrupted blob this check exists to catch.
- `resolve`, on every lint, re-hashes only the manifest and the config (a few KB) and
  checks each layer's presence and size. Paying the full re-hash per lint protected
  nothing: a lint whose root filesystem is cached never reads a layer (the image that
  boots is checked instead, by the record sealed when it was built:
  vm/disks/rootfs_record.py), and one that builds it reads every layer anyway, hashing
  the raw bytes as they stream through decompression and refusing, with nothing
  cached, a layer that does not match its digest (vm/disks/rootfs.py). So a layer's
  bytes are verified when written (blobs.py) and whenever they are read to build what
  boots, once each time, not 990 MB per lint.
- A reference is looked up by its (registry/repository, digest) pair, as it was
  provisioned: the digest pins the bytes, and the name is the provenance a report prints.
  Resolved by digest alone, `ghcr.io/rust-lang/clippy-official:1.99.0@<digest of another
  image>` would resolve and be printed as where the image came from; so another name
  with a stored digest is not provisioned, and prefetching it under that name (which
  verifies the name serves that digest; its blobs are reused) is the way forward. The
  tag is not compared: a name with a digest pins the same bytes whatever the tag says.
- The store lock (`.lock`, filelock) serialises `index.json` updates and `prune`. Blob
  writes take no lock: they are content-addressed and atomic. `prune` leaves alone any
  unreferenced blob or temp file younger than its grace period, so it cannot delete the
  blobs of a pull that is still running; and `add_reference` re-checks the blobs under
  the lock, so a pull whose blobs were pruned fails instead of committing a hole.
- A lint holds the image it uses (`in_use`: `uses/<pinned hex>.lock` shared, from the
  root filesystem's check until its VM is done) and records that use
  (`uses/<pinned hex>.used`, roteiro_py/eviction.py: nothing else says when an image was
  last used; a layer's atime is read by nobody once the root filesystem is built).
- `remove_image` (`cache remove-image`) takes that lock exclusive without waiting (a held
  one is a running lint: ImageInUse, nothing removed), then under the store lock unlinks
  the index entry first (the commit point: a crash after it leaves only unreferenced
  blobs, which `prefetch --prune` removes), then each blob no remaining image reaches,
  and returns what it freed. When a remaining image cannot be walked, its blobs cannot
  be told from the removed one's, so no blob goes (as in `prune`). A pull of another
  image that reused a blob removed here fails at `add_reference` (which re-checks under
  the lock) and is run again; it never commits a hole.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from filelock import FileLock

from roteiro_py import paths
from roteiro_py.errors import (
    ImageInUse,
    ImageNotInStore,
    ImageNotProvisioned,
    MalformedReference,
    TagNotDigest,
)
from roteiro_py.eviction import last_use, record_use
from roteiro_py.locks import shared_within, taken_if_free
from roteiro_py.reference import ImageReference, parse, parse_pinned
from roteiro_py.store.blobs import (
    TEMP_PREFIX,
    BlobWriter,
    ProgressCallback,
    hash_file,
)
from roteiro_py.store.manifest import (
    INDEX_TYPES,
    MANIFEST_TYPES,
    MAX_DOCUMENT,
    Descriptor,
    ImageIndex,
    ImageManifest,
    ManifestError,
    check_digest,
    follow_indexes,
    hex_of,
    load_json,
    parse_descriptor,
    parse_document,
)

REF_NAME = "org.opencontainers.image.ref.name"
#: Where a reference was provisioned from (a registry URL, "docker-engine", an OCI path).
SOURCE_ANNOTATION = "io.roteiro.source"
#: Unreferenced blobs and temp files younger than this are assumed to belong to a pull
#: in progress. An hour is far longer than the 754 MB toolchain takes over loopback or
#: a LAN, and short enough that interrupted pulls do not pile up for long.
PRUNE_GRACE_SECONDS = 3600
#: The most provisioned references, and blob names, `usage` and `remove_image` look at.
MAX_LISTED = 10_000


@dataclass(frozen=True)
class Presence:
    present: bool
    detail: str | None = None

    def __bool__(self) -> bool:
        return self.present


@dataclass(frozen=True)
class Layer:
    digest: str
    media_type: str
    path: Path
    size: int


@dataclass(frozen=True)
class ResolvedImage:
    """A provisioned image, ready for the VM backend to unpack in `layers` order.

    pinned_digest is the reference's digest (an index or a manifest); manifest_digest is
    the image manifest actually used (the host platform's, when the pin is an index).
    """

    reference: str
    pinned_digest: str
    manifest_digest: str
    config_digest: str
    config: dict[str, Any]
    layers: list[Layer]


@dataclass(frozen=True)
class StoredReference:
    name: str
    descriptor: Descriptor
    source: str | None


@dataclass(frozen=True)
class ImageUsage:
    """One provisioned reference as `cache list` shows it: `own_bytes` are the allocated
    bytes of the blobs only it reaches (what removing it frees), `shared_bytes` those of
    blobs another reference reaches too (counted once, store-wide, by `StoreUsage`);
    `last_used` is its recorded last use (`recorded`), else when it was provisioned (the
    mtime of its pinned manifest); `detail` says why it could not be walked."""

    name: str
    digest: str
    own_bytes: int
    shared_bytes: int
    last_used: float
    recorded: bool
    path: Path
    detail: str | None = None


@dataclass(frozen=True)
class StoreUsage:
    """The whole store: each reference, the blobs shared among them (counted once), and
    the blobs no reference reaches (an interrupted pull's; `prefetch --prune`)."""

    images: list[ImageUsage]
    shared_bytes: int
    unreferenced_bytes: int


@dataclass(frozen=True)
class ImageRemoval:
    """What `remove_image` did: the reference, the blobs unlinked and their bytes, and the
    digests that were its own and are gone (a manifest's root filesystem is a derived cache)."""

    reference: str
    blobs_removed: int
    freed: int
    digests: frozenset[str]
    blobs_kept_reason: str | None = None


class _Absent(Exception):
    """Internal: the walk found a blob missing or corrupt; the text is the user's detail."""


@dataclass(frozen=True)
class _Walk:
    pinned: Descriptor
    manifest_digest: str
    manifest: ImageManifest
    documents: list[Descriptor]  # the pin, and the platform manifest when the pin is an index


def _as_reference(reference: str | ImageReference) -> ImageReference:
    if isinstance(reference, ImageReference):
        if reference.digest is None:
            return parse_pinned(str(reference))
        return reference
    return parse_pinned(reference)


class Store:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.blobs_dir = root / "blobs" / "sha256"
        self.index_path = root / "index.json"
        self.lock = FileLock(str(root / ".lock"))

    @classmethod
    def default(cls) -> Store:
        return cls(paths.store_root())

    # -- writing -----------------------------------------------------------------------

    def ensure_layout(self) -> None:
        """Create the layout's skeleton; idempotent and safe to race."""
        self.blobs_dir.mkdir(parents=True, exist_ok=True)
        layout = self.root / "oci-layout"
        if not layout.exists():
            self._write_atomic(layout, b'{"imageLayoutVersion":"1.0.0"}')

    def blob_path(self, digest: str) -> Path:
        return self.blobs_dir / hex_of(digest)

    def new_blob(
        self,
        expected_digest: str | None = None,
        expected_size: int | None = None,
        progress: ProgressCallback | None = None,
    ) -> BlobWriter:
        self.ensure_layout()
        return BlobWriter(self.blobs_dir, expected_digest, expected_size, progress)

    def put_bytes(self, data: bytes, expected_digest: str | None = None) -> str:
        with self.new_blob(expected_digest, len(data)) as writer:
            writer.write(data)
            return writer.commit()

    def has_blob(self, digest: str, size: int | None = None) -> bool:
        """True when the blob is stored and hashes to its name (so a download can be skipped)."""
        path = self.blob_path(digest)
        try:
            if size is not None and path.stat().st_size != size:
                return False
            return hash_file(path)[0] == digest
        except FileNotFoundError:
            return False

    def add_reference(self, reference: ImageReference, pinned: Descriptor,
                      source: str | None = None) -> None:
        """Record `reference` as provisioned: the last step of every prefetch.

        Raises ManifestError (with the missing blob's digest) if any blob the reference
        needs is not stored; nothing is recorded then.
        """
        if reference.digest != pinned.digest:
            raise ValueError(f"reference {reference} does not carry digest {pinned.digest}")
        self.ensure_layout()
        with self.lock:
            try:
                self._walk(pinned, verify=False)
            except _Absent as exc:
                raise ManifestError(str(exc)) from None
            entries = [e for e in self._read_index_entries()
                       if not (e.get("digest") == pinned.digest
                               and (e.get("annotations") or {}).get(REF_NAME) == str(reference))]
            annotations = {REF_NAME: str(reference)}
            if source:
                annotations[SOURCE_ANNOTATION] = source
            entries.append(Descriptor(pinned.media_type, pinned.digest, pinned.size,
                                      annotations=annotations).to_json())
            # Blobs were fsynced one by one; their directory entries are made durable
            # before the index that points at them.
            self._fsync_dir(self.blobs_dir)
            body = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
                    "manifests": entries}
            self._write_atomic(self.index_path, json.dumps(body, indent=2).encode() + b"\n")

    def remove_reference(self, reference: str | ImageReference) -> bool:
        """Forget `reference` (its name and digest); other names of its digest stay."""
        ref = _as_reference(reference)
        with self.lock:
            entries = self._read_index_entries()
            kept = [e for e in entries if not (
                e.get("digest") == ref.digest
                and _same_name((e.get("annotations") or {}).get(REF_NAME), ref))]
            if len(kept) == len(entries):
                return False
            body = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
                    "manifests": kept}
            self._write_atomic(self.index_path, json.dumps(body, indent=2).encode() + b"\n")
            return True

    # -- reading -----------------------------------------------------------------------

    def references(self) -> list[StoredReference]:
        out = []
        for i, entry in enumerate(self._read_index_entries()):
            try:
                desc = parse_descriptor(entry, what=f"index.json manifests[{i}]")
            except ManifestError:
                continue
            name = desc.annotations.get(REF_NAME)
            if name:
                out.append(StoredReference(name, desc, desc.annotations.get(SOURCE_ANNOTATION)))
        return out

    def source_of(self, reference: str | ImageReference) -> str | None:
        """Where the entry for `reference` was provisioned from (its SOURCE_ANNOTATION), or
        None when it is not listed or has none. `prefetch` says this, not the source it
        was asked to use: the name is never checked against where the bytes came from."""
        stored = self._lookup(_as_reference(reference))
        return stored.source if stored else None

    def is_present(self, reference: str | ImageReference) -> Presence:
        """Present only if the index lists the digest and every blob verifies (re-hashed)."""
        ref = _as_reference(reference)
        stored = self._lookup(ref)
        if stored is None:
            return Presence(False, self._not_listed(ref))
        try:
            self._walk(stored.descriptor, verify=True)
        except _Absent as exc:
            return Presence(False, str(exc))
        return Presence(True)

    def resolve(self, reference: str | ImageReference) -> ResolvedImage:
        """The image for `reference`, or ImageNotProvisioned naming what is wrong.

        The manifest (and index) and the config are re-hashed (a few KB); the layers are
        checked by presence and size only. Their bytes are hashed where they are used:
        as they stream into the root filesystem (vm/disks/rootfs.py, which refuses one
        that does not match), and that root filesystem is what boots (module docstring).
        """
        ref = _as_reference(reference)
        stored = self._lookup(ref)
        if stored is None:
            raise ImageNotProvisioned(str(ref), self.root, self._not_listed(ref))
        try:
            walk = self._walk(stored.descriptor, verify=False)
            config = load_json(self._read_document(walk.manifest.config))
        except _Absent as exc:
            raise ImageNotProvisioned(str(ref), self.root, str(exc)) from None
        except ManifestError as exc:
            raise ImageNotProvisioned(str(ref), self.root,
                                      f"the config blob {walk.manifest.config.digest} is "
                                      f"not JSON ({exc})") from None
        if not isinstance(config, dict):
            raise ImageNotProvisioned(str(ref), self.root, "the image config is not an object")
        layers = [Layer(d.digest, d.media_type, self.blob_path(d.digest), d.size)
                  for d in walk.manifest.layers]
        # The name shown as provenance is the one the image was provisioned under; a tag
        # the configured reference adds (`:1.99.0`) was never checked against anything, so
        # it is shown only when it is the provisioned one.
        shown = stored.name if stored.name == str(ref) else f"{ref.name}@{ref.digest}"
        return ResolvedImage(shown, walk.pinned.digest, walk.manifest_digest,
                             walk.manifest.config.digest, config, layers)

    # -- use, and removal of one image ------------------------------------------------

    def use_path(self, digest: str, suffix: str) -> Path:
        """`uses/<hex of the pinned digest><suffix>`: `.lock` (held by a lint) or `.used`."""
        return self.root / "uses" / f"{hex_of(digest)}{suffix}"

    @contextlib.contextmanager
    def in_use(self, image: ResolvedImage, *, until: float | None,
               seconds: float) -> Iterator[None]:
        """Hold `image` for the block (its use lock shared; lints of one image side by
        side) and record its use. Inside it, the image is checked listed again: a
        `remove_image` between `resolve` and here is ImageNotProvisioned, never a root
        filesystem built from half-removed blobs."""
        lock = self.use_path(image.pinned_digest, ".lock")
        lock.parent.mkdir(parents=True, exist_ok=True)
        with shared_within(lock, until=until, seconds=seconds,
                           waiting_for=f"`cache remove-image` of {image.reference}"):
            if not any(s.descriptor.digest == image.pinned_digest for s in self.references()):
                raise ImageNotProvisioned(image.reference, self.root,
                                          "it was removed from the store while this run started")
            record_use(self.use_path(image.pinned_digest, ".used"))
            yield

    def usage(self) -> StoreUsage:
        """Every provisioned reference with its size on disk and last use (see ImageUsage);
        MAX_LISTED references and blob names at most."""
        stored = self.references()[:MAX_LISTED]
        reach: list[set[str] | None] = []
        details: list[str | None] = []
        for entry in stored:
            try:
                reach.append(self._reachable(entry.descriptor))
                details.append(None)
            except (_Absent, ManifestError) as exc:
                reach.append(None)
                details.append(f"its manifest cannot be read: {exc}")
        holders: dict[str, int] = {}
        for found in reach:
            for digest in found or ():
                holders[digest] = holders.get(digest, 0) + 1
        sizes = self._blob_sizes()
        images = []
        for entry, found, detail in zip(stored, reach, details, strict=True):
            own = sum(sizes.get(d, 0) for d in found or () if holders[d] == 1)
            shared = sum(sizes.get(d, 0) for d in found or () if holders[d] > 1)
            pinned = self.blob_path(entry.descriptor.digest)
            try:
                provisioned = pinned.lstat().st_mtime
            except OSError:
                provisioned = 0.0
            when, recorded = last_use(self.use_path(entry.descriptor.digest, ".used"),
                                      provisioned)
            images.append(ImageUsage(entry.name, entry.descriptor.digest, own, shared, when,
                                     recorded, pinned, detail))
        shared_total = sum(size for d, size in sizes.items() if holders.get(d, 0) > 1)
        unreferenced = sum(size for d, size in sizes.items() if d not in holders)
        return StoreUsage(images, shared_total, unreferenced)

    def remove_image(self, reference: str) -> ImageRemoval:
        """Remove the provisioned `reference` (its full text as `cache list` shows it, or a
        pinned reference naming it) and every blob no other reference reaches: see the
        module doc for the order and the locks. ImageNotInStore when none is provisioned
        as that, ImageInUse when a running lint holds it; nothing is removed then."""
        stored = self.named(reference)
        digest = stored.descriptor.digest
        lock = self.use_path(digest, ".lock")
        lock.parent.mkdir(parents=True, exist_ok=True)
        with taken_if_free(lock) as free:
            if not free:
                raise ImageInUse(stored.name)
            with self.lock:
                entries = self._read_index_entries()
                kept = [e for e in entries if not (
                    e.get("digest") == digest
                    and (e.get("annotations") or {}).get(REF_NAME) == stored.name)]
                if len(kept) == len(entries):  # removed by another command meanwhile
                    raise ImageNotInStore(reference, self.root,
                                          [s.name for s in self.references()])
                try:
                    gone = self._reachable(stored.descriptor)
                except (_Absent, ManifestError):
                    gone = {digest}
                body = {"schemaVersion": 2,
                        "mediaType": "application/vnd.oci.image.index.v1+json",
                        "manifests": kept}
                self._write_atomic(self.index_path, json.dumps(body, indent=2).encode() + b"\n")
                still, reason = self._still_reached()
                removed = freed = 0
                if reason is None:
                    for blob in sorted(gone - still):
                        path = self.blob_path(blob)
                        with contextlib.suppress(FileNotFoundError):
                            size = path.lstat().st_blocks * 512
                            path.unlink()
                            removed, freed = removed + 1, freed + size
                    self._fsync_dir(self.blobs_dir)
            with contextlib.suppress(FileNotFoundError):
                self.use_path(digest, ".used").unlink()
        return ImageRemoval(stored.name, removed, freed,
                            frozenset(gone - still) if reason is None else frozenset(), reason)

    def named(self, reference: str) -> StoredReference:
        """The stored reference `reference` names: its exact text, else the pinned
        reference's (registry/repository, digest) entry; ImageNotInStore otherwise."""
        stored = self.references()[:MAX_LISTED]
        for entry in stored:
            if entry.name == reference:
                return entry
        try:
            found = self._lookup(parse_pinned(reference))
        except (MalformedReference, TagNotDigest, ValueError):
            found = None
        if found is None:
            raise ImageNotInStore(reference, self.root, [s.name for s in stored])
        return found

    def _still_reached(self) -> tuple[set[str], str | None]:
        """Every digest a listed reference reaches, or a reason no blob may go (one of
        them cannot be walked, so its blobs cannot be told apart)."""
        still: set[str] = set()
        for entry in self.references():
            try:
                still |= self._reachable(entry.descriptor)
            except (_Absent, ManifestError) as exc:
                return still, (f"the manifest of {entry.name} cannot be read ({exc}), so no "
                               "blob was removed; `prefetch --prune` removes them once it is "
                               "provisioned again")
        return still, None

    def _blob_sizes(self) -> dict[str, int]:
        """Allocated bytes of each stored blob by digest (MAX_LISTED names; temp files and
        links left out)."""
        sizes: dict[str, int] = {}
        with contextlib.suppress(FileNotFoundError, NotADirectoryError), \
                os.scandir(self.blobs_dir) as scan:
            for seen, entry in enumerate(scan):
                if seen >= MAX_LISTED:
                    break
                if entry.name.startswith(TEMP_PREFIX) or len(entry.name) != 64:
                    continue
                with contextlib.suppress(OSError):
                    st = entry.stat(follow_symlinks=False)
                    if stat.S_ISREG(st.st_mode):
                        sizes[f"sha256:{entry.name}"] = st.st_blocks * 512
        return sizes

    # -- garbage collection ----------------------------------------------------------

    def prune(self, grace_seconds: float = PRUNE_GRACE_SECONDS) -> int:
        """Delete unreferenced blobs and stale temp files; return the bytes freed.

        If any reference cannot be walked (its manifest is missing or corrupt), its
        layers cannot be told apart from garbage, so only temp files are removed: a
        damaged reference is re-provisioned, not silently stripped of its layers.
        """
        if not self.blobs_dir.is_dir():
            return 0
        freed = 0
        cutoff = time.time() - grace_seconds
        with self.lock:
            keep: set[str] = set()
            walkable = True
            for stored in self.references():
                try:
                    keep |= self._reachable(stored.descriptor)
                except (_Absent, ManifestError):
                    walkable = False
            for entry in self.blobs_dir.iterdir():
                try:
                    st = entry.stat()
                except FileNotFoundError:
                    continue
                if st.st_mtime > cutoff:
                    continue
                is_temp = entry.name.startswith(TEMP_PREFIX)
                if not is_temp and (not walkable or f"sha256:{entry.name}" in keep):
                    continue
                with contextlib.suppress(FileNotFoundError):
                    entry.unlink()
                    freed += st.st_size
        return freed

    # -- internals ---------------------------------------------------------------------

    def _lookup(self, ref: ImageReference) -> StoredReference | None:
        """The entry provisioned under ref's name with ref's digest (the exact text first)."""
        matches = [s for s in self.references()
                   if s.descriptor.digest == ref.digest and _same_name(s.name, ref)]
        exact = [s for s in matches if s.name == str(ref)]
        found = exact or matches
        return found[0] if found else None

    def _not_listed(self, ref: ImageReference) -> str:
        others = sorted({s.name for s in self.references() if s.descriptor.digest == ref.digest})
        if others:
            shown = ", ".join(others[:3]) + (f" and {len(others) - 3} more" if len(others) > 3
                                             else "")
            return (f"the digest {ref.digest} was provisioned only under another name "
                    f"({shown}), not as {ref.name}; a name is provenance and is not taken "
                    "on trust")
        return f"the store's index.json lists no image with digest {ref.digest}"

    def _read_index_entries(self) -> list[dict[str, Any]]:
        try:
            data = load_json(self.index_path.read_bytes())
        except FileNotFoundError:
            return []
        except ManifestError:
            # index.json is only ever replaced atomically, so this is outside damage;
            # treating it as empty makes every reference absent rather than guessed.
            return []
        manifests = data.get("manifests") if isinstance(data, dict) else None
        return [m for m in manifests if isinstance(m, dict)] if isinstance(manifests, list) else []

    def _read_document(self, desc: Descriptor) -> bytes:
        """Read a manifest/index/config blob whole and check it; raise _Absent if not ok."""
        path = self.blob_path(desc.digest)
        if desc.size > MAX_DOCUMENT:
            raise _Absent(f"blob {desc.digest} claims {desc.size} bytes, more than a "
                          "manifest or config may be")
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise _Absent(f"blob {desc.digest} is missing from the store") from None
        self._check_bytes(desc, len(data), _sha256(data))
        return data

    def _check_bytes(self, desc: Descriptor, size: int, digest: str) -> None:
        if size != desc.size:
            raise _Absent(f"blob {desc.digest} is {size} bytes, not {desc.size}: it is "
                          f"{'truncated' if size < desc.size else 'longer than recorded'}")
        if digest != desc.digest:
            raise _Absent(f"blob {desc.digest} is corrupt: its content hashes to {digest}")

    def _check_blob(self, desc: Descriptor, verify: bool) -> None:
        path = self.blob_path(desc.digest)
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            raise _Absent(f"blob {desc.digest} is missing from the store") from None
        if size != desc.size:
            self._check_bytes(desc, size, "")
        if verify:
            self._check_bytes(desc, size, hash_file(path)[0])

    def _walk(self, pinned: Descriptor, *, verify: bool) -> _Walk:
        try:
            data = self._read_document(pinned)
            doc, chain = follow_indexes(parse_document(data, pinned.media_type), self._read_document)
            documents = [pinned, *(desc for desc, _ in chain)]
            manifest_digest = documents[-1].digest
        except ManifestError as exc:
            raise _Absent(f"the stored manifest of {pinned.digest} is unusable: {exc}") from None
        blobs = [doc.config, *doc.layers]
        if verify and len(blobs) > 1:
            # lazy: only is_present re-hashes (prefetch, doctor); a lint's resolve checks
            # sizes, before its VM (bench/cli_startup.py)
            from concurrent.futures import ThreadPoolExecutor

            # hashlib releases the GIL for large buffers: two layers hash on two cores.
            workers = min(4, os.cpu_count() or 1, len(blobs))
            with ThreadPoolExecutor(max_workers=workers) as pool:
                errors = list(pool.map(lambda d: _capture(self._check_blob, d, verify), blobs))
            for error in errors:
                if error is not None:
                    raise error
        else:
            for desc in blobs:
                self._check_blob(desc, verify)
        return _Walk(pinned, manifest_digest, doc, documents)

    def _reachable(self, pinned: Descriptor) -> set[str]:
        """Every digest a reference keeps alive, including other platforms' stored manifests."""
        seen: set[str] = set()
        todo = [pinned]
        while todo:
            desc = todo.pop()
            if desc.digest in seen:
                continue
            seen.add(desc.digest)
            if desc.media_type in INDEX_TYPES | MANIFEST_TYPES:
                if desc.media_type in INDEX_TYPES and not self.blob_path(desc.digest).exists():
                    continue
                doc = parse_document(self._read_document(desc), desc.media_type)
                if isinstance(doc, ImageIndex):
                    todo.extend(d for d in doc.manifests
                                if self.blob_path(d.digest).exists() or d.digest == desc.digest)
                else:
                    seen.add(doc.config.digest)
                    seen.update(layer.digest for layer in doc.layers)
        return seen

    def _write_atomic(self, path: Path, data: bytes) -> None:
        fd, name = tempfile.mkstemp(prefix=f".{path.name}{TEMP_PREFIX}", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(name, path)
        except BaseException:
            Path(name).unlink(missing_ok=True)
            raise
        self._fsync_dir(path.parent)

    @staticmethod
    def _fsync_dir(path: Path) -> None:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _same_name(stored: object, ref: ImageReference) -> bool:
    """True when the stored reference text names ref's registry and repository."""
    if not isinstance(stored, str):
        return False
    try:
        parsed = parse(stored)
    except MalformedReference:
        return False
    return (parsed.registry, parsed.repository) == (ref.registry, ref.repository)


def _sha256(data: bytes) -> str:
    return f"sha256:{hashlib.sha256(data).hexdigest()}"


def _capture(fn: Any, desc: Descriptor, verify: bool) -> _Absent | None:
    try:
        fn(desc, verify)
    except _Absent as exc:
        return exc
    return None


__all__ = ["ImageRemoval", "ImageUsage", "Layer", "Presence", "ResolvedImage", "Store",
           "StoreUsage", "StoredReference", "check_digest"]
