"""The image store (an OCI image layout) and the sources that fill it.

What other packages use, and nothing else:

- the VM backend: `Store.default().resolve(reference) -> ResolvedImage`, whose `layers`
  (present at their size; their bytes hashed as they are unpacked, vm/disks/rootfs.py) it
  unpacks in order into the guest's root filesystem;
- the CLI: `prefetch(...)` with `parse_source(...)`, and `Store.is_present`/`prune`.

Modules: `layout` (the store), `blobs` (verified writes), `manifest` (documents and
platform choice), `transfer` (the verified copy of one image), and the sources
`registry` (+ `auth`), `oci_source`, `docker_engine`; `prefetch` dispatches among them.
"""

from roteiro_py.store.blobs import ProgressCallback
from roteiro_py.store.layout import Layer, Presence, ResolvedImage, Store, StoredReference
from roteiro_py.store.prefetch import (
    DockerSourceSpec,
    OciSourceSpec,
    PrefetchResult,
    RegistrySourceSpec,
    Source,
    parse_source,
    pin_from_layout,
    prefetch,
)

__all__ = [
    "DockerSourceSpec",
    "Layer",
    "OciSourceSpec",
    "PrefetchResult",
    "Presence",
    "ProgressCallback",
    "RegistrySourceSpec",
    "ResolvedImage",
    "Source",
    "Store",
    "StoredReference",
    "parse_source",
    "pin_from_layout",
    "prefetch",
]
