"""Read named files out of a .deb in memory: no dpkg-deb, nothing extracted to disk.

Guarantees:
- A .deb is an `ar` archive; only its `data.tar.*` member is read (xz, gzip, bzip2 or
  uncompressed; zstd is refused by name: this Python has no zstd decompressor), as a
  stream, and only the members a caller's predicate selects are kept, each at most
  `MAX_MEMBER_BYTES`. Nothing is written anywhere, so a member named `../x` or a link
  cannot place a file: a selected member that is not a regular file, and any member whose
  name has a `..` component or is absolute, is refused (`DebError`), as is an archive of
  more than `MAX_MEMBERS` entries.
- `modinfo` reads a kernel module's `.modinfo` ELF section (what `depmod` reads to write
  modules.dep): the module's name and the modules it `depends=` on.

Written because `dpkg-deb` and `depmod` are Debian's tools: the hosts this must provision
on (a GitHub-hosted Ubuntu runner, a Fedora workstation) may not have them, or have
other versions.
"""

from __future__ import annotations

import gzip
import io
import lzma
import tarfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, BinaryIO

AR_MAGIC = b"!<arch>\n"
AR_HEADER = 60
#: At most this many ar members (a .deb has three) and tar entries (a kernel has ~4000).
MAX_AR_MEMBERS = 16
MAX_MEMBERS = 200_000
#: A kept file may be at most this large (the kernel's bzImage is ~8 MB, a module < 10 MB).
MAX_MEMBER_BYTES = 256 << 20
#: A compressed module decompresses to at most this much.
MAX_MODULE_BYTES = 64 << 20

_TAR_MODES = {"data.tar.xz": "r|xz", "data.tar.gz": "r|gz", "data.tar.bz2": "r|bz2", "data.tar": "r|"}


class DebError(ValueError):
    """The .deb is malformed or holds something this reader will not take."""


class _Window:
    """A read-only view of `size` bytes of `handle` from where it stands."""

    def __init__(self, handle: BinaryIO, size: int) -> None:
        self.handle, self.left = handle, size

    def read(self, n: int = -1) -> bytes:
        n = self.left if n < 0 else min(n, self.left)
        data = self.handle.read(n)
        self.left -= len(data)
        return data


def _data_member(handle: BinaryIO) -> tuple[str, int]:
    """Position `handle` at the data.tar member; its name and size."""
    if handle.read(len(AR_MAGIC)) != AR_MAGIC:
        raise DebError("not an ar archive (a .deb starts with !<arch>)")
    for _ in range(MAX_AR_MEMBERS):
        header = handle.read(AR_HEADER)
        if len(header) < AR_HEADER:
            break
        if header[58:60] != b"`\n":
            raise DebError("a malformed ar member header")
        name = header[:16].decode("ascii", "replace").strip().rstrip("/")
        digits = header[48:58].strip(b" ")
        if not digits.isdigit():  # int() would take "-1000" (a seek backwards), "+4", "0_4"
            raise DebError("an ar member with no size (decimal digits)")
        size = int(digits)
        if name.startswith("data.tar"):
            if name == "data.tar.zst":
                raise DebError("data.tar.zst: zstd-compressed, and this Python has no zstd "
                               "decompressor")
            if name not in _TAR_MODES:
                raise DebError(f"data member {name!r} in a compression this reader does not know")
            return name, size
        handle.seek(size + (size & 1), 1)
    raise DebError("no data.tar member")


def read_members(deb: Path, wanted: Callable[[str], bool]) -> Iterator[tuple[str, bytes]]:
    """(name without a leading ./, contents) for each member `wanted` accepts, which must
    be a regular file; bounded as `data_members`."""
    for member, path, stream in data_members(deb):
        if not wanted(path):
            continue
        if not member.isreg() or stream is None:
            raise DebError(f"member {path[:200]!r} is not a regular file (a link or a device)")
        try:
            yield path, stream.read(MAX_MEMBER_BYTES)
        except (tarfile.TarError, lzma.LZMAError, EOFError, OSError, gzip.BadGzipFile) as exc:
            raise DebError(f"{path[:200]}: {exc}") from exc


def data_members(deb: Path) -> Iterator[tuple[tarfile.TarInfo, str, IO[bytes] | None]]:
    """Every member of the data.tar, in the archive's order: (member, name without a leading
    ./ and trailing /, a stream of its bytes for a regular file else None). The stream is
    good until the next member is asked for. Bounded as `read_members` (MAX_MEMBERS, a
    regular file at most MAX_MEMBER_BYTES, no absolute or `..` name); links are given, not
    followed: the caller decides what a link means (image/debian_root.py records it)."""
    with deb.open("rb") as handle:
        name, size = _data_member(handle)
        try:
            # Names as UTF-8 whatever the host's locale (tarfile's default encoding is the
            # filesystem's: ASCII under LC_ALL=C without UTF-8 mode, which changed the names
            # an image layer is written with, so its digest).
            with tarfile.open(fileobj=_Window(handle, size), mode=_TAR_MODES[name],  # type: ignore[call-overload]
                              encoding="utf-8", errors="surrogateescape") as tar:
                for count, member in enumerate(tar, 1):
                    if count > MAX_MEMBERS:
                        raise DebError(f"more than {MAX_MEMBERS} entries")
                    path = member.name.removeprefix("./").rstrip("/")
                    if member.name.startswith("/") or ".." in path.split("/"):
                        raise DebError(f"member {member.name[:200]!r} names a path outside the package")
                    if member.isreg() and member.size > MAX_MEMBER_BYTES:
                        raise DebError(f"member {path[:200]!r} is larger than {MAX_MEMBER_BYTES} bytes")
                    yield member, path, tar.extractfile(member) if member.isreg() else None
        except (tarfile.TarError, lzma.LZMAError, EOFError, OSError, gzip.BadGzipFile) as exc:
            raise DebError(f"{name}: {exc}") from exc


def module_bytes(name: str, data: bytes) -> bytes:
    """A module file's ELF bytes: .ko as is, .ko.xz and .ko.gz decompressed (bounded)."""
    try:
        if name.endswith(".ko.xz"):
            decompressor = lzma.LZMADecompressor()
            out = decompressor.decompress(data, MAX_MODULE_BYTES + 1)
        elif name.endswith(".ko.gz"):
            with gzip.GzipFile(fileobj=io.BytesIO(data)) as handle:
                out = handle.read(MAX_MODULE_BYTES + 1)
        elif name.endswith(".ko"):
            out = data
        else:
            raise DebError(f"{name}: a module compression this reader does not know")
    except (lzma.LZMAError, OSError, EOFError) as exc:
        raise DebError(f"{name}: {exc}") from exc
    if len(out) > MAX_MODULE_BYTES:
        raise DebError(f"{name} is larger than {MAX_MODULE_BYTES} bytes decompressed")
    return out


def modinfo(elf: bytes) -> dict[str, str]:
    """The key=value pairs of a module's .modinfo section (the last value of a key wins;
    `depends` is one comma-separated value)."""
    if elf[:4] != b"\x7fELF" or elf[4:6] != b"\x02\x01":
        raise DebError("not a 64-bit little-endian ELF module")
    shoff = int.from_bytes(elf[0x28:0x30], "little")
    shentsize = int.from_bytes(elf[0x3A:0x3C], "little")
    shnum = int.from_bytes(elf[0x3C:0x3E], "little")
    shstrndx = int.from_bytes(elf[0x3E:0x40], "little")
    if shentsize < 0x40 or shoff + shnum * shentsize > len(elf) or shstrndx >= shnum:
        raise DebError("the module's section headers lie outside the file")

    def section(index: int) -> tuple[int, int, int]:
        at = shoff + index * shentsize
        name = int.from_bytes(elf[at:at + 4], "little")
        offset = int.from_bytes(elf[at + 0x18:at + 0x20], "little")
        size = int.from_bytes(elf[at + 0x20:at + 0x28], "little")
        if offset + size > len(elf):
            raise DebError("a section of the module lies outside the file")
        return name, offset, size

    _, strings_at, strings_size = section(shstrndx)
    strings = elf[strings_at:strings_at + strings_size]
    for index in range(shnum):
        name, offset, size = section(index)
        if strings[name:name + 9] == b".modinfo\0":
            out: dict[str, str] = {}
            for item in elf[offset:offset + size].split(b"\0"):
                key, sep, value = item.partition(b"=")
                if sep:
                    out[key.decode("ascii", "replace")] = value.decode("utf-8", "replace")
            return out
    raise DebError("the module has no .modinfo section")


def modules_dep(infos: dict[str, dict[str, str]]) -> str:
    """A modules.dep (`path: dep-path ...`, direct dependencies) built from each module's
    modinfo, keyed by path relative to lib/modules/RELEASE; `assets.module_load_order`
    reads it. A dependency no module in `infos` provides is refused."""
    by_name: dict[str, str] = {}
    for path, info in infos.items():
        name = info.get("name") or Path(path).name.split(".ko")[0]
        by_name[name.replace("-", "_")] = path
    lines = []
    for path, info in sorted(infos.items()):
        deps = []
        for dep in filter(None, info.get("depends", "").split(",")):
            found = by_name.get(dep.strip().replace("-", "_"))
            if found is None:
                raise DebError(f"{path} depends on {dep[:80]!r}, which the package does not ship")
            deps.append(found)
        lines.append(f"{path}: {' '.join(deps)}".rstrip())
    return "\n".join(lines) + "\n"
