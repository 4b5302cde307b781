"""Tar headers from outside, read with a bound on what one member's headers may hold.

tarfile reads a pax extended header or a GNU long name whole into memory
(`fileobj.read(size)` with the size the header claims), and follows a chain of such
headers by recursion. So a gzip layer of a few MB can claim a 2 GB pax header (memory),
and a few thousand chained headers raise RecursionError (exit 4, not a refusal).
`BoundedTarInfo` refuses both as a `tarfile.HeaderError` before reading, which the
callers (flattening, `oci:` archives) already turn into their refusal.

A global pax header is worse: tarfile merges its keys into the archive's own
`pax_headers` and copies them into every later member. A 2 MB layer (a 1 MiB global
header, then 2,000 whiteouts) held 3.7 GB and took 95 s. Image writers do not emit one
(`git archive` writes a 52-byte comment); their total is capped at MAX_GLOBAL_HEADER_DATA,
so each copy is small. Readers that stream also drop `archive.members` as they go. Every tarfile
opened on hostile bytes passes `tarinfo=BoundedTarInfo`.
"""

from __future__ import annotations

import tarfile
from typing import Any

#: Bytes of one pax extended header or GNU long name/link. Real ones hold a path, a
#: link target, a few times and xattrs: well under 64 KiB.
MAX_HEADER_DATA = 1024 * 1024
#: Extension headers in a row before the member they describe (a pax header, a long
#: name and a long link make three; tar writers never chain more).
MAX_HEADER_CHAIN = 16
#: Bytes of all global pax headers in one archive, together: each later member gets a
#: copy of their keys.
MAX_GLOBAL_HEADER_DATA = 4096

_EXTENSIONS = (tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK, tarfile.XHDTYPE,
               tarfile.XGLTYPE, tarfile.SOLARIS_XHDTYPE)


class BoundedTarInfo(tarfile.TarInfo):
    def _proc_member(self, tarfile_: Any) -> Any:
        if self.type in _EXTENSIONS:
            chain = getattr(tarfile_, "_roteiro_header_chain", 0) + 1
            tarfile_._roteiro_header_chain = chain
            if self.size > MAX_HEADER_DATA:
                raise tarfile.HeaderError(
                    f"an extended header of {self.size} bytes, more than {MAX_HEADER_DATA} "
                    "(tarheaders.MAX_HEADER_DATA)")
            if self.type == tarfile.XGLTYPE:
                total = getattr(tarfile_, "_roteiro_global_bytes", 0) + self.size
                tarfile_._roteiro_global_bytes = total
                if total > MAX_GLOBAL_HEADER_DATA:
                    raise tarfile.HeaderError(
                        f"global pax headers of {total} bytes, more than "
                        f"{MAX_GLOBAL_HEADER_DATA} (tarheaders.MAX_GLOBAL_HEADER_DATA): "
                        "tar copies them into every member")
            if chain > MAX_HEADER_CHAIN:
                raise tarfile.HeaderError(
                    f"more than {MAX_HEADER_CHAIN} extended headers in a row "
                    "(tarheaders.MAX_HEADER_CHAIN)")
        else:
            tarfile_._roteiro_header_chain = 0
        return super()._proc_member(tarfile_)  # type: ignore[misc]


def member_refusal(member: tarfile.TarInfo, declared: int, limit: int, limit_name: str) -> str | None:
    """Why a streamed archive's `member` is refused before its data is read, or None.

    `declared` is what the members so far declare, this one included: a header is cheap
    and its data is decompressed to be skipped, so a 1.3 MB bz2 archive holding a 1 TiB
    member was hours of CPU; checked at each header, the sum stops it at once. A sparse
    member writes its logical size from a few bytes, and no image archive holds one.
    The caller says whose members these are, as `<whose> <reason>`.
    """
    if declared > limit:
        return f"members declare more than {limit} bytes, the most it may hold ({limit_name})"
    if member.issparse():
        return f"member {member.name!r} is a sparse file, which it never holds"
    return None
