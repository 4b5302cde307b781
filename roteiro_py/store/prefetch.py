"""`pylint-sandbox prefetch`: provision one image into the store from one source.

The CLI calls `prefetch(store, reference_text, parse_source(text), allow_download=...,
progress=...)` and prints `PrefetchResult.reference`, the pinned reference to put in
`[lint] image`. Errors are the user-facing ones from `errors.py`:

- `TagNotDigest` / `MalformedReference`: the reference is not pinned (registry and
  `oci:` sources) or not a reference at all. Only `--from docker` accepts a tag, because
  there the tag names the user's own local build and the result is the pin.
- `DownloadNotAllowed`: a registry pull without `--allow-download`, naming the image and
  the registry URL. Checked after the store: an image already present needs no download
  and is not refused.
- `PrefetchFailed`: the source could not supply a verified image. By then nothing was
  recorded: blobs already written are unreferenced and go with `Store.prune`.

`pin_from_layout` answers "which image?" for an `oci:` layout given no digest: the one
its index.json lists (its digest, checked, then verified as any pin by `_from_oci`), or
`LayoutImageNotChosen` listing them when there are several or none.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from roteiro_py.errors import (
    DownloadNotAllowed,
    LayoutImageNotChosen,
    MalformedReference,
    PrefetchFailed,
    UsageError,
)
from roteiro_py.reference import ImageReference, parse, parse_pinned
from roteiro_py.store.blobs import ProgressCallback
from roteiro_py.store.layout import Store
from roteiro_py.store.transfer import SourceError, transfer

if TYPE_CHECKING:
    from roteiro_py.store.oci_source import LayoutImage


@dataclass(frozen=True)
class RegistrySourceSpec:
    """`--from registry` (the default): the registry named in the reference."""


@dataclass(frozen=True)
class DockerSourceSpec:
    """`--from docker`: the local Docker engine."""


@dataclass(frozen=True)
class OciSourceSpec:
    """`--from oci:PATH`: an OCI layout directory or a tar archive of one."""

    path: Path


Source = RegistrySourceSpec | DockerSourceSpec | OciSourceSpec


def parse_source(text: str | None) -> Source:
    """`registry` (or None), `docker`, or `oci:PATH`; anything else is a UsageError."""
    if text is None or text == "registry":
        return RegistrySourceSpec()
    if text == "docker":
        return DockerSourceSpec()
    if text.startswith("oci:") and len(text) > 4:
        return OciSourceSpec(Path(text[4:]).expanduser())
    raise UsageError(f"Unknown image source {text!r}.",
                     hint="Use --from registry, --from docker, or --from oci:PATH.")


@dataclass(frozen=True)
class PrefetchResult:
    """reference: the pinned reference now present (print it; it goes in `[lint] image`).

    pinned_digest is the reference's digest (an index or a manifest); manifest_digest the
    image manifest used on this host. bytes_fetched counts blobs newly written.
    """

    reference: str
    pinned_digest: str
    manifest_digest: str
    source: str
    bytes_fetched: int
    blobs_fetched: int
    blobs_reused: int
    already_present: bool


def prefetch(
    store: Store,
    reference: str,
    source: Source,
    *,
    allow_download: bool = False,
    progress: ProgressCallback | None = None,
) -> PrefetchResult:
    if isinstance(source, DockerSourceSpec):
        return _from_docker(store, reference, progress)
    ref = parse_pinned(reference)
    if isinstance(source, OciSourceSpec):
        return _from_oci(store, ref, source.path, progress)
    return _from_registry(store, ref, allow_download, progress)


#: What an already-present image's source is called when the store recorded none.
UNRECORDED_SOURCE = "an unrecorded source"


def _present(store: Store, ref: ImageReference) -> PrefetchResult | None:
    """The result for an image already in the store, naming the source its bytes really
    came from: `prefetch --from oci:image.tar ghcr.io/...@sha256:...` records the name
    the user gave, and a later registry prefetch said "provisioned from https://ghcr.io"
    for bytes that never came from there."""
    if not store.is_present(ref):
        return None
    resolved = store.resolve(ref)
    return PrefetchResult(str(ref), resolved.pinned_digest, resolved.manifest_digest,
                          store.source_of(ref) or UNRECORDED_SOURCE, 0, 0, 0, True)


def _from_registry(store: Store, ref: ImageReference, allow_download: bool,
                   progress: ProgressCallback | None) -> PrefetchResult:
    # lazy, each source where it is used: every lint imports this package (store/__init__.py)
    # to read the store, and none of the sources (https, tar) it never uses
    from roteiro_py.store.registry import RegistrySource, base_url

    url = base_url(ref)
    done = _present(store, ref)
    if done:
        return done
    if not allow_download:
        raise DownloadNotAllowed(str(ref), f"{url}/v2/{ref.repository}/",
                                 f"the image {ref} (its manifest {ref.digest}, its config "
                                 "and its layers)")
    try:
        moved = transfer(store, ref, RegistrySource(ref), progress)
    except SourceError as exc:
        raise PrefetchFailed(str(ref), url, str(exc)) from None
    return PrefetchResult(str(ref), moved.pinned.digest, moved.manifest_digest, url,
                          moved.bytes_fetched, moved.blobs_fetched, moved.blobs_reused, False)


def _from_oci(store: Store, ref: ImageReference, path: Path,
              progress: ProgressCallback | None) -> PrefetchResult:
    from roteiro_py.store.oci_source import LayoutArchiveSource, open_layout  # lazy: as in _from_registry

    where = f"oci:{path}"
    done = _present(store, ref)
    if done:
        return done
    try:
        layout = open_layout(path)
        try:
            moved = transfer(store, ref, layout, progress)
        finally:
            if isinstance(layout, LayoutArchiveSource):
                layout.close()
    except SourceError as exc:
        raise PrefetchFailed(str(ref), where, str(exc)) from None
    return PrefetchResult(str(ref), moved.pinned.digest, moved.manifest_digest, where,
                          moved.bytes_fetched, moved.blobs_fetched, moved.blobs_reused, False)


def _from_docker(store: Store, reference: str,
                 progress: ProgressCallback | None) -> PrefetchResult:
    from roteiro_py.store.docker_engine import engine_name, import_from_engine, pinned_name  # lazy: as above

    name = engine_name(reference)
    base = pinned_name(name)
    wanted = parse_pinned(reference).digest if "@" in reference else None
    try:
        imported = import_from_engine(store, name, progress)
        digest = imported.manifest.digest
        if wanted is not None and wanted != digest:
            raise SourceError(f"the engine's image {name} converts to {digest}, not the "
                              f"pinned {wanted}: it was rebuilt or retagged since")
        ref = ImageReference(base.registry, base.repository, base.tag, digest)
        store.add_reference(ref, imported.manifest, "docker-engine")
    except SourceError as exc:
        raise PrefetchFailed(reference, "the local Docker engine", str(exc)) from None
    except ValueError as exc:  # ManifestError from add_reference: a concurrent prune
        raise PrefetchFailed(reference, "the local Docker engine", str(exc)) from None
    return PrefetchResult(str(ref), digest, digest, "docker-engine", imported.bytes_written,
                          1 + len(imported.layers), 0, False)


def pin_from_layout(path: Path, name: str | None) -> str:
    """The pinned reference of the one image the `oci:` layout at `path` lists.

    `name` (a reference without a digest, as `--image` gave it) names it in the store;
    without one, the entry's ref-name annotation does when it is a whole reference
    (registry/repository[:tag][@digest], as `image build --output` writes it; a digest in
    it must be the entry's). A ref name that is only a tag (skopeo, buildx) names no
    repository: the user is asked for a name. Several entries or none are refused,
    listing them (errors.LayoutImageNotChosen: usage, the choice is the user's)."""
    from roteiro_py.store.oci_source import LayoutArchiveSource, layout_images, open_layout  # lazy: as above

    where = f"oci:{path}"
    given = parse(name) if name is not None else None  # MalformedReference: usage, first
    try:
        layout = open_layout(path)
        try:
            images = layout_images(layout)
        finally:
            if isinstance(layout, LayoutArchiveSource):
                layout.close()
    except SourceError as exc:
        raise PrefetchFailed(name or "an image", where, str(exc)) from None
    if len(images) != 1:
        raise LayoutImageNotChosen(where, [(image.ref_name, image.digest) for image in images])
    image = images[0]
    named = given or _named_by(image)
    if named is None:
        raise UsageError(f"The one image in {where} ({image.digest}) has no name that is a whole "
                         "reference (registry/repository), only "
                         + (f"{image.ref_name!r}." if image.ref_name else "no ref name."),
                         hint="Name it for the store with --image NAME (e.g. localhost/clippy:local); "
                              "the digest comes from the layout.")
    if named.digest is not None and named.digest != image.digest:
        raise PrefetchFailed(str(named), where, f"the layout's index.json names its one image "
                             f"{named} but lists it with the digest {image.digest}")
    return str(ImageReference(named.registry, named.repository, named.tag, image.digest))


def _named_by(image: LayoutImage) -> ImageReference | None:
    """The entry's ref name as a reference, when it is a whole one (has a repository path
    with a registry host); a bare tag such as "latest" parses as docker.io/library/latest
    and is not taken for one."""
    if image.ref_name is None or "/" not in image.ref_name:
        return None
    try:
        return parse(image.ref_name)
    except MalformedReference:
        return None
