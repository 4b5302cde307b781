"""`--from oci:PATH`: an OCI image layout directory, or a tar archive of one.

For air-gapped hosts: `pylint-sandbox image build --output DIR` writes such a layout, `skopeo copy` or
`docker buildx --output type=oci` make one elsewhere, and it is carried over on a disk.
The pin's digest is looked up directly as `blobs/sha256/<hex>` in the layout (it may be
any manifest or index there: the one `index.json` lists, or a platform manifest inside
it), and every blob copied is verified against its digest as it is written; the layout
is never trusted for more than holding bytes.

Nor for its file types: only a regular file is a blob. In a layout directory a blob
that is a link (which would read a host file) or a FIFO/device (whose open would block
the prefetch forever) is refused: each step below the layout's root is opened
O_NOFOLLOW, the blob O_NONBLOCK, and it must fstat as a regular file. In an archive a
symlink or FIFO member is refused naming the member (unchecked, the one raises a raw
KeyError, exit 4, and the other reads as "no blob"), and the archive's member count is
bounded before its headers are all held in memory.

Nor for its sizes: walking a compressed archive decompresses every member it skips, so a
1.3 MB bz2 archive declaring a 1 TiB member is hours of CPU. The members' declared
sizes together are capped (MAX_ARCHIVE_BYTES) as each header is read, before its data
is skipped; a sparse member (a few KB carrying a blob of any size) is refused.

Nor for what it says it holds: `layout_images` reads `index.json` (through the same
door as a blob: a regular file, no link, at most MAX_DOCUMENT bytes) only to offer the
digests it lists, each checked to be a sha256 digest of a manifest or an index; the one
chosen is then looked up and verified as any pin is. Its names (the ref-name
annotation) are shown only through guidance's sanitiser and become a reference only
after `reference.parse` accepts them.
"""

from __future__ import annotations

import errno
import json
import os
import stat
import tarfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from roteiro_py.store.manifest import (
    INDEX_TYPES,
    MANIFEST_TYPES,
    MAX_DOCUMENT,
    MAX_IMAGE_BYTES,
    Descriptor,
    check_digest,
    hex_of,
)
from roteiro_py.store.tarheaders import BoundedTarInfo, member_refusal
from roteiro_py.store.transfer import SourceError

#: Members read from an `oci:` archive before it is refused. An image's layout holds a
#: few dozen blobs; a layout of many images a few thousand.
MAX_ARCHIVE_MEMBERS = 10_000
#: Bytes the members of an `oci:` archive may declare together: two images of the most
#: one image may hold (manifest.MAX_IMAGE_BYTES).
MAX_ARCHIVE_BYTES = 2 * MAX_IMAGE_BYTES

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device node"
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


class LayoutDirSource:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.description = f"oci:{path}"
        if not (path / "oci-layout").is_file() or not (path / "blobs").is_dir():
            raise SourceError(f"{path} is not an OCI image layout (no oci-layout file or "
                              "blobs directory)")

    def _open(self, digest: str) -> IO[bytes]:
        try:
            return self._open_regular(digest)
        except OSError as exc:
            raise SourceError(f"reading the blob {digest} in {self.path} failed: "
                              f"{exc}") from None

    def fetch_index(self) -> bytes:
        """`index.json`, as a regular file at the layout's root (no link, never blocking)."""
        try:
            fd = os.open(self.path / "index.json",
                         os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except FileNotFoundError:
            raise SourceError(f"{self.path} has no index.json") from None
        except OSError as exc:
            why = "is a symbolic link" if exc.errno == errno.ELOOP else f"cannot be read: {exc}"
            raise SourceError(f"index.json in {self.path} {why}") from None
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            kind = _kind(os.fstat(fd).st_mode)
            os.close(fd)
            raise SourceError(f"index.json in {self.path} is {kind}; only a regular file is read")
        os.set_blocking(fd, True)
        with os.fdopen(fd, "rb") as f:
            return f.read(MAX_DOCUMENT + 1)

    def _open_regular(self, digest: str) -> IO[bytes]:
        """The blob as a regular file, reached without following a link, never blocking."""
        name = f"blobs/sha256/{hex_of(digest)}"
        fd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            for part in ("blobs", "sha256"):
                try:
                    nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
                except FileNotFoundError:
                    raise SourceError(f"the layout has no blob {digest}") from None
                except OSError as exc:
                    if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                        raise
                    raise SourceError(f"{part!r} in {self.path} is not a directory (a "
                                      "link or a file); blobs are read only from real "
                                      "directories in the layout") from None
                os.close(fd)
                fd = nxt
            leaf = hex_of(digest)
            try:
                st = os.stat(leaf, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                raise SourceError(f"the layout has no blob {digest}") from None
            if not stat.S_ISREG(st.st_mode):
                raise SourceError(f"the blob {name} in {self.path} is {_kind(st.st_mode)}; "
                                  "only a regular file is a blob")
            blob = os.open(leaf, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                           dir_fd=fd)
        finally:
            os.close(fd)
        if not stat.S_ISREG(os.fstat(blob).st_mode):  # swapped since the stat
            os.close(blob)
            raise SourceError(f"the blob {name} in {self.path} is not a regular file")
        os.set_blocking(blob, True)
        return os.fdopen(blob, "rb")

    def fetch_document(self, digest: str) -> tuple[bytes, str | None]:
        with self._open(digest) as f:
            return f.read(MAX_DOCUMENT + 1), None

    @contextmanager
    def open_blob(self, desc: Descriptor) -> Iterator[IO[bytes]]:
        with self._open(desc.digest) as f:
            yield f


class LayoutArchiveSource:
    """A tar (optionally gzip/xz/bz2-compressed) whose root is an OCI layout.

    Members are read by name with random access; a compressed archive is therefore
    decompressed once per blob read, which is acceptable for the few blobs of one image.
    """

    def __init__(self, path: Path, max_members: int = MAX_ARCHIVE_MEMBERS) -> None:
        self.path = path
        self.description = f"oci:{path}"
        try:
            self._tar = tarfile.open(path, "r:*",  # noqa: SIM115 - closed by close()
                                     tarinfo=BoundedTarInfo)
        except (OSError, tarfile.TarError) as exc:
            raise SourceError(f"{path} is not a readable tar archive: {exc}") from None
        self._members: dict[str, tarfile.TarInfo] = {}
        try:
            count = declared = 0
            while (member := self._tar.next()) is not None:
                count += 1
                declared += member.size
                if count > max_members:
                    raise SourceError(f"{path} has more than {max_members} members, the "
                                      "most an OCI layout archive may have "
                                      "(oci_source.MAX_ARCHIVE_MEMBERS)")
                why = member_refusal(member, declared, MAX_ARCHIVE_BYTES,
                                     "oci_source.MAX_ARCHIVE_BYTES")
                if why:
                    raise SourceError(f"the OCI layout archive {path}: its {why}")
                name = member.name[2:] if member.name.startswith("./") else member.name
                self._members[name.rstrip("/")] = member
        except (OSError, tarfile.TarError, EOFError, ValueError) as exc:  # ValueError: sparse maps
            self._tar.close()
            raise SourceError(f"{path} is not a readable tar archive: {exc}") from None
        except SourceError:
            self._tar.close()
            raise
        if "oci-layout" not in self._members:
            self._tar.close()
            raise SourceError(f"{path} is not an archive of an OCI image layout (no "
                              "oci-layout file at its root)")

    def close(self) -> None:
        self._tar.close()

    def fetch_index(self) -> bytes:
        """The `index.json` member, a regular file, at most MAX_DOCUMENT + 1 bytes read."""
        member = self._members.get("index.json")
        if member is None:
            raise SourceError(f"{self.path} has no index.json")
        if not member.isreg():
            raise SourceError(f"the member index.json of {self.path} is not a regular file")
        try:
            stream = self._tar.extractfile(member)
            assert stream is not None  # a regular member always has a stream
            with stream:
                return stream.read(MAX_DOCUMENT + 1)
        except (OSError, tarfile.TarError, ValueError) as exc:
            raise SourceError(f"the member index.json of {self.path} cannot be read: {exc}") from None

    def _open(self, digest: str) -> IO[bytes]:
        name = f"blobs/sha256/{hex_of(digest)}"
        member = self._members.get(name)
        if member is None:
            raise SourceError(f"the archive has no blob {digest}")
        if not member.isreg():
            kind = ("a symbolic link" if member.issym() else "a hard link" if member.islnk()
                    else "a FIFO" if member.isfifo() else "a device node"
                    if member.ischr() or member.isblk() else "not a regular file")
            raise SourceError(f"the member {name} of {self.path} is {kind}; only a "
                              "regular file is a blob")
        try:
            stream = self._tar.extractfile(member)
        except (OSError, tarfile.TarError, ValueError) as exc:
            raise SourceError(f"the member {name} of {self.path} cannot be read: "
                              f"{exc}") from None
        assert stream is not None  # a regular member always has a stream
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


#: The annotation naming an index entry: a full reference (`image build --output` writes
#: one) or only a tag (skopeo, buildx).
REF_NAME = "org.opencontainers.image.ref.name"
#: Characters of a ref name kept (a reference is at most 255 in the distribution spec).
MAX_REF_NAME = 512


@dataclass(frozen=True)
class LayoutImage:
    """One entry of a layout's `index.json`: its digest (checked: sha256) and media type
    (a manifest or an index), and its ref-name annotation as written (untrusted)."""

    digest: str
    media_type: str
    ref_name: str | None


def layout_images(layout: LayoutDirSource | LayoutArchiveSource) -> list[LayoutImage]:
    """What the layout's `index.json` lists, every entry checked; SourceError names the
    first that is not a descriptor of a manifest or an index with a sha256 digest."""
    raw = layout.fetch_index()
    if len(raw) > MAX_DOCUMENT:
        raise SourceError(f"index.json is larger than {MAX_DOCUMENT} bytes (manifest.MAX_DOCUMENT)")
    try:
        doc = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise SourceError(f"index.json is not JSON: {str(exc)[:200]}") from None
    entries = doc.get("manifests") if isinstance(doc, dict) else None
    if not isinstance(entries, list):
        raise SourceError("index.json has no list of manifests")
    images = []
    for number, entry in enumerate(entries, 1):
        if not isinstance(entry, dict):
            raise SourceError(f"entry {number} of index.json is not a descriptor")
        digest, media_type = entry.get("digest"), entry.get("mediaType")
        if media_type not in INDEX_TYPES | MANIFEST_TYPES:
            raise SourceError(f"entry {number} of index.json is not a manifest or an index "
                              f"(its mediaType is {str(media_type)[:100]!r})")
        try:
            check_digest(digest)
        except ValueError:
            raise SourceError(f"entry {number} of index.json has no sha256 digest "
                              f"({str(digest)[:100]!r})") from None
        annotations = entry.get("annotations")
        name = annotations.get(REF_NAME) if isinstance(annotations, dict) else None
        images.append(LayoutImage(str(digest), str(media_type),
                                  name[:MAX_REF_NAME] if isinstance(name, str) else None))
    return images
