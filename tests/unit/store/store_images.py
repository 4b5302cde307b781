"""Hand-made images for the store tests (unit and integration): a few KiB each.

A module with its own name, not conftest.py: test modules import from it, and a
`conftest` module name is shared by every conftest in the suite.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from dataclasses import dataclass

from roteiro_py.reference import ImageReference
from roteiro_py.store import Store
from roteiro_py.store.manifest import (
    OCI_CONFIG,
    OCI_INDEX,
    OCI_LAYER_TAR,
    OCI_MANIFEST,
    Descriptor,
)


def sha(data: bytes) -> str:
    return f"sha256:{hashlib.sha256(data).hexdigest()}"


def layer_tar(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in sorted(files.items()):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


@dataclass
class Image:
    """The documents and blobs of one image, not yet in any store."""

    manifest: bytes
    config: bytes
    layers: list[bytes]

    @property
    def digest(self) -> str:
        return sha(self.manifest)

    def blobs(self) -> dict[str, bytes]:
        return {sha(b): b for b in (self.manifest, self.config, *self.layers)}


def make_image(*layer_files: dict[str, bytes], arch: str = "amd64") -> Image:
    layers = [layer_tar(files) for files in layer_files]
    config = json.dumps({"architecture": arch, "os": "linux",
                         "rootfs": {"type": "layers", "diff_ids": [sha(x) for x in layers]}},
                        sort_keys=True).encode()
    manifest = json.dumps({
        "schemaVersion": 2, "mediaType": OCI_MANIFEST,
        "config": {"mediaType": OCI_CONFIG, "digest": sha(config), "size": len(config)},
        "layers": [{"mediaType": OCI_LAYER_TAR, "digest": sha(x), "size": len(x)}
                   for x in layers],
    }).encode()
    return Image(manifest, config, layers)


def make_index(*images: tuple[Image, str]) -> bytes:
    return json.dumps({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": [
        {"mediaType": OCI_MANIFEST, "digest": img.digest, "size": len(img.manifest),
         "platform": {"os": "linux", "architecture": arch}} for img, arch in images
    ]}).encode()


def provision(store: Store, image: Image, name: str = "localhost/test/img") -> ImageReference:
    for data in image.blobs().values():
        store.put_bytes(data, sha(data))
    ref = ImageReference(name.split("/", 1)[0], name.split("/", 1)[1], None, image.digest)
    store.add_reference(ref, Descriptor(OCI_MANIFEST, image.digest, len(image.manifest)))
    return ref
