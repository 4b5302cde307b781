"""A pure-Python writer for the kernel's initramfs format (cpio "newc"), and the base image.

Guarantees: the archive is built from bytes this process chose (no host cpio tool, no
walking of a host directory that another process could change under us), entries are
written in the order given (the kernel unpacks sequentially, so a directory must come
before its contents), and every entry is owned by uid/gid 0.

Why its own writer: the per-run job travels as a second archive appended to the base
one (the kernel unpacks concatenated archives in turn; VM_NOTES "A per-run job can travel
as a second cpio"), and building a few kilobytes in memory is faster and more exact than
staging files for `cpio -o`. Archives are left uncompressed: the guest kernel would
otherwise decompress them under TCG, where every CPU cycle is emulated (the xz-compressed
bzImage cost ~2.5 s per boot for the same reason).
"""

from __future__ import annotations

import stat
from collections.abc import Iterable
from dataclasses import dataclass

_MAGIC = b"070701"
_TRAILER = "TRAILER!!!"


@dataclass(frozen=True)
class Entry:
    """One member: a directory, a regular file (data) or a symlink (target)."""

    name: str
    mode: int
    data: bytes = b""
    target: str | None = None

    @staticmethod
    def directory(name: str, perm: int = 0o755) -> Entry:
        return Entry(name, stat.S_IFDIR | perm)

    @staticmethod
    def file(name: str, data: bytes, perm: int = 0o644) -> Entry:
        return Entry(name, stat.S_IFREG | perm, data)

    @staticmethod
    def symlink(name: str, target: str) -> Entry:
        return Entry(name, stat.S_IFLNK | 0o777, target=target)


def _pad(length: int) -> bytes:
    return b"\0" * (-length % 4)


def _header(ino: int, mode: int, nlink: int, size: int, namesize: int) -> bytes:
    fields = (ino, mode, 0, 0, nlink, 0, size, 0, 0, 0, 0, namesize, 0)
    return _MAGIC + b"".join(b"%08X" % value for value in fields)


def write_newc(entries: Iterable[Entry]) -> bytes:
    """The archive for `entries`, ending in the trailer the kernel expects."""
    out = bytearray()
    ino = 1
    for entry in (*entries, Entry(_TRAILER, 0)):
        name = entry.name.lstrip("/").encode() + b"\0"
        if entry.name != _TRAILER and (not entry.name.strip("/") or b"\0" in name[:-1]):
            raise ValueError(f"invalid cpio member name {entry.name!r}")
        body = entry.target.encode() if entry.target is not None else entry.data
        nlink = 2 if stat.S_ISDIR(entry.mode) else 1
        header = _header(ino if entry.name != _TRAILER else 0, entry.mode, nlink, len(body),
                         len(name))
        out += header + name
        out += _pad(len(header) + len(name))
        out += body + _pad(len(body))
        ino += 1
    return bytes(out)


def parents(path: str) -> list[str]:
    """The directories leading to `path` ("a/b/c" -> ["a", "a/b"]), outermost first."""
    parts = path.strip("/").split("/")[:-1]
    return ["/".join(parts[: i + 1]) for i in range(len(parts))]
