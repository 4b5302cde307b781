"""`--from oci:PATH`: an OCI image layout directory, or a tar archive of one.

For air-gapped hosts: `scripts/build-image` writes such a layout, `skopeo copy` or
`docker buildx --output type=oci` make one elsewhere, and it is carried over on a disk.
The pin's digest is looked up directly as `blobs/sha256/<hex>` in the layout (it may be
any manifest or index there: the one `index.json` lists, or a platform manifest inside
it), and every blob copied is verified against its digest as it is written; the layout
is never trusted for more than holding bytes.
"""

from __future__ import annotations

import tarfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from roteiro_py.store.manifest import MAX_DOCUMENT, Descriptor, hex_of
from roteiro_py.store.transfer import SourceError


class LayoutDirSource:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.description = f"oci:{path}"
        if not (path / "oci-layout").is_file() or not (path / "blobs").is_dir():
            raise SourceError(f"{path} is not an OCI image layout (no oci-layout file or "
                              "blobs directory)")

    def _blob(self, digest: str) -> Path:
        return self.path / "blobs" / "sha256" / hex_of(digest)

    def fetch_document(self, digest: str) -> tuple[bytes, str | None]:
        try:
            with self._blob(digest).open("rb") as f:
                return f.read(MAX_DOCUMENT + 1), None
        except FileNotFoundError:
            raise SourceError(f"the layout has no blob {digest}") from None

    @contextmanager
    def open_blob(self, desc: Descriptor) -> Iterator[IO[bytes]]:
        try:
            f = self._blob(desc.digest).open("rb")
        except FileNotFoundError:
            raise SourceError(f"the layout has no blob {desc.digest}") from None
        with f:
            yield f


class LayoutArchiveSource:
    """A tar (optionally gzip/xz/bz2-compressed) whose root is an OCI layout.

    Members are read by name with random access; a compressed archive is therefore
    decompressed once per blob read, which is acceptable for the few blobs of one image.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.description = f"oci:{path}"
        try:
            self._tar = tarfile.open(path, "r:*")  # noqa: SIM115 - closed by close()
        except (OSError, tarfile.TarError) as exc:
            raise SourceError(f"{path} is not a readable tar archive: {exc}") from None
        self._members = {}
        for member in self._tar.getmembers():
            name = member.name[2:] if member.name.startswith("./") else member.name
            self._members[name.rstrip("/")] = member
        if "oci-layout" not in self._members:
            self._tar.close()
            raise SourceError(f"{path} is not an archive of an OCI image layout (no "
                              "oci-layout file at its root)")

    def close(self) -> None:
        self._tar.close()

    def _open(self, digest: str) -> IO[bytes]:
        member = self._members.get(f"blobs/sha256/{hex_of(digest)}")
        stream = self._tar.extractfile(member) if member is not None else None
        if stream is None:
            raise SourceError(f"the archive has no blob {digest}")
        return stream

    def fetch_document(self, digest: str) -> tuple[bytes, str | None]:
        with self._open(digest) as f:
            return f.read(MAX_DOCUMENT + 1), None

    @contextmanager
    def open_blob(self, desc: Descriptor) -> Iterator[IO[bytes]]:
        with self._open(desc.digest) as f:
            yield f


def open_layout(path: Path) -> LayoutDirSource | LayoutArchiveSource:
    if path.is_dir():
        return LayoutDirSource(path)
    if path.is_file():
        return LayoutArchiveSource(path)
    raise SourceError(f"{path} does not exist")
