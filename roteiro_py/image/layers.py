"""Reproducible image layers and the OCI image layout that holds them.

Guarantees:
- A layer is an uncompressed PAX tar of a `Tree` written in sorted name order, every
  entry's mtime `EPOCH`, no user or group names, no extended headers but a name's, names
  encoded as UTF-8 whatever the host's locale: the same tree gives the same bytes, so the
  same digest (what makes a rebuild's reference the same pin).
- A `Tree` holds directories, regular files (their bytes in a file the caller owns) and
  symbolic links only: hard links are recorded as copies (in sorted order a link may come
  before its target), and device nodes and FIFOs are never added (the guest mounts its
  own /dev). Parents are added as 0755 directories owned by root.
- `write_layout` writes `oci-layout`, the blobs, the config, the manifest and an
  `index.json` naming the pinned reference; every JSON document is canonical (sorted
  keys, no spaces), so its digest depends on its content alone.
"""

from __future__ import annotations

import hashlib
import json
import os
import tarfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

#: Every entry's mtime, and the image config's `created`: 2024-01-01T00:00:00Z
#: (the epoch of the build script this command replaced).
EPOCH = 1704067200
#: The PATH the image's config gives a process (the guest sets its own; docker run reads it).
PATH_ENV = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_LAYER = "application/vnd.oci.image.layer.v1.tar"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
_CHUNK = 1 << 20


@dataclass(frozen=True)
class Entry:
    """One path of a layer: kind "dir", "file" or "symlink"; `source` holds a file's bytes."""

    kind: str
    mode: int
    uid: int = 0
    gid: int = 0
    linkname: str = ""
    source: Path | None = None
    size: int = 0


@dataclass
class Tree:
    """The paths of one layer, by name relative to the root (no leading /, no trailing /)."""

    entries: dict[str, Entry] = field(default_factory=dict)

    def add(self, name: str, entry: Entry) -> None:
        """`entry` at `name`, its missing parents added as root's 0755 directories; a later
        entry replaces an earlier one at the same name (a directory stays a directory)."""
        parts = name.split("/")
        for depth in range(1, len(parts)):
            parent = "/".join(parts[:depth])
            if parent not in self.entries:
                self.entries[parent] = Entry("dir", 0o755)
        old = self.entries.get(name)
        if old is not None and old.kind == "dir" and entry.kind == "dir":
            return
        self.entries[name] = entry


@dataclass(frozen=True)
class Blob:
    """A blob written into a layout: its digest ("sha256:<hex>") and size in bytes."""

    digest: str
    size: int
    media_type: str

    def descriptor(self) -> dict[str, object]:
        return {"mediaType": self.media_type, "digest": self.digest, "size": self.size}


class _Hashing:
    """A write-only file object that hashes and counts what tarfile writes to it."""

    def __init__(self, handle: BinaryIO) -> None:
        self.handle = handle
        self.sha = hashlib.sha256()
        self.size = 0

    def write(self, data: bytes) -> int:
        self.sha.update(data)
        self.handle.write(data)
        self.size += len(data)
        return len(data)

    def tell(self) -> int:
        return self.size


def _info(name: str, entry: Entry) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.mtime = EPOCH
    info.uid, info.gid = entry.uid, entry.gid
    info.uname = info.gname = ""
    info.mode = entry.mode
    if entry.kind == "dir":
        info.type = tarfile.DIRTYPE
    elif entry.kind == "symlink":
        info.type, info.linkname = tarfile.SYMTYPE, entry.linkname
    elif entry.kind == "file":
        info.type, info.size = tarfile.REGTYPE, entry.size
    else:
        raise ValueError(f"{name}: an entry of kind {entry.kind!r}")
    return info


def write_layer(tree: Tree, blobs: Path) -> Blob:
    """`tree` as a tar in `blobs` (a layout's blobs/sha256), named by its digest."""
    blobs.mkdir(parents=True, exist_ok=True)
    temp = blobs / f".layer-{os.getpid()}-{len(tree.entries)}.tmp"
    try:
        with temp.open("wb") as handle:
            sink = _Hashing(handle)
            with tarfile.open(fileobj=sink, mode="w", format=tarfile.PAX_FORMAT,  # type: ignore[call-overload]
                              encoding="utf-8", errors="surrogateescape") as tar:
                for name in sorted(tree.entries):
                    entry = tree.entries[name]
                    info = _info(name, entry)
                    if entry.kind == "file":
                        assert entry.source is not None  # a file entry always has its bytes
                        with entry.source.open("rb") as data:
                            tar.addfile(info, data)
                    else:
                        tar.addfile(info)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, blobs / sink.sha.hexdigest())
    finally:
        temp.unlink(missing_ok=True)
    return Blob(f"sha256:{sink.sha.hexdigest()}", sink.size, OCI_LAYER)


def _put(blobs: Path, document: object, media_type: str) -> Blob:
    data = json.dumps(document, sort_keys=True, separators=(",", ":")).encode()
    digest = hashlib.sha256(data).hexdigest()
    (blobs / digest).write_bytes(data)
    return Blob(f"sha256:{digest}", len(data), media_type)


@dataclass(frozen=True)
class LayerRecord:
    """A written layer and the line the config's history says made it."""

    blob: Blob
    created_by: str


def write_layout(root: Path, layers: list[LayerRecord], name: str, tag: str,
                 labels: dict[str, str]) -> str:
    """Config, manifest and index.json for `layers` (already in root/blobs/sha256); the
    pinned reference NAME:TAG@sha256:<manifest digest>."""
    blobs = root / "blobs" / "sha256"
    blobs.mkdir(parents=True, exist_ok=True)
    (root / "oci-layout").write_text('{"imageLayoutVersion":"1.0.0"}')
    created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(EPOCH))
    config = {
        "created": created, "architecture": "amd64", "os": "linux",
        "config": {"Env": [PATH_ENV], "Labels": labels},
        "rootfs": {"type": "layers", "diff_ids": [layer.blob.digest for layer in layers]},
        "history": [{"created": created, "created_by": layer.created_by} for layer in layers],
    }
    config_blob = _put(blobs, config, OCI_CONFIG)
    manifest = {"schemaVersion": 2, "mediaType": OCI_MANIFEST, "config": config_blob.descriptor(),
                "layers": [layer.blob.descriptor() for layer in layers]}
    manifest_blob = _put(blobs, manifest, OCI_MANIFEST)
    reference = f"{name}:{tag}@{manifest_blob.digest}"
    index = {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": [
        {**manifest_blob.descriptor(), "annotations": {"org.opencontainers.image.ref.name": reference}}]}
    (root / "index.json").write_text(json.dumps(index, indent=2, sort_keys=True) + "\n")
    return reference
