"""Packages from a Debian archive, without apt: signed index, then digests down to each .deb.

Guarantees:
- `read_release` fetches `dists/SUITE/InRelease` (at most `MAX_INRELEASE_BYTES`) and
  returns its fields only if a signature by a key shipped in `roteiro_py/data/` and pinned
  by fingerprint in `PINNED_KEYS` verifies (`openpgp.verify_cleartext`), the file names
  the suite that was asked for (a validly signed InRelease of another suite is refused),
  its `Date` is not in the future, not before `DATE_FLOOR` for its kind of archive, and
  its `Valid-Until`, when there is one, has not passed (`Stale`). `Date` is returned so
  the caller can refuse an index older than one it already used (a replayed old InRelease
  is a downgrade: assets.py records it in its manifest); the floor refuses one on a host
  that never provisioned before, which has nothing recorded to compare with.
- `read_packages` fetches `COMPONENT/binary-ARCH/Packages.xz` (or `.gz`, or uncompressed,
  whichever of them is there first) and accepts it
  only if its size and SHA-256 are the ones the verified InRelease lists; it is parsed as
  RFC 822 stanzas with every size bounded (`MAX_PACKAGES_BYTES` decompressed,
  `MAX_STANZA_BYTES` per stanza), keeping only the stanzas asked for.
- `download` fetches a package's `Filename` (validated: under `pool/`, no `..`) reading at
  most its `Size` bytes, and keeps the file only if its SHA-256 is the one in Packages.
- Every fetch reads at most its bound, at an average of at least `MIN_BYTES_PER_S` (a
  deadline shuts its sockets in any phase, headers included: socket_deadline.py), and
  follows redirects to http(s) only; a reply that is not HTTP is a failure to reach the
  archive (`ArchiveError`, not `refused`), never an exception of http.client's.
- The archive is a URL (http, https, file) or a local directory with the same
  `dists/` and `pool/` layout (an air-gapped host's copy of a mirror): it needs
  `dists/SUITE/InRelease`, one of `dists/SUITE/main/binary-amd64/Packages.xz`, `.gz` or
  `Packages`, and the .debs at their `Filename` under `pool/`. A local file is opened only
  if it is a regular file (a symlink to one is fine: its bytes are checked by digest); a
  FIFO would block the open for ever, a device would read for ever.

Two archives are read, each against the same pinned keys (`KINDS`): the main archive's
suite (`bookworm` by default), which changes only at a point release (every two months or
so), and the security archive's `SUITE-security` (security.debian.org), where kernel
security updates land between them; assets.py takes the highest version of each package
found in either. The security archive's InRelease says `Components: updates/main`, but it
lists and serves its index under `main/binary-amd64/` like the main archive
(`dists/bookworm-security/updates/main/...` is 404, measured 2026-11-30), and its
`Filename`s lie under `pool/updates/main/`. Its InRelease carries a `Valid-Until` a week
after its `Date`, so a local copy of it goes stale weekly; the main archive's has none,
which is why `DATE_FLOOR` exists. A mirror that merged the security archive into the main
suite would have to sign its InRelease with its own key, which is not pinned, and is
refused.
"""

from __future__ import annotations

import calendar
import email.utils
import gzip
import hashlib
import http.client
import io
import lzma
import os
import re
import stat
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import IO, TYPE_CHECKING, BinaryIO

from roteiro_py.redirects import UnreadRedirectHandler
from roteiro_py.socket_deadline import SocketDeadline, armed_opener
from roteiro_py.vocabulary import DEFAULT_DEBIAN_ARCHIVE, DEFAULT_DEBIAN_SECURITY_ARCHIVE, DEFAULT_DEBIAN_SUITE

if TYPE_CHECKING:
    from roteiro_py.vm.assets import openpgp

DEFAULT_ARCHIVE = DEFAULT_DEBIAN_ARCHIVE
DEFAULT_SECURITY_ARCHIVE = DEFAULT_DEBIAN_SECURITY_ARCHIVE
DEFAULT_SUITE = DEFAULT_DEBIAN_SUITE
#: The kinds of archive read: the main archive's suite, and the security archive's.
MAIN = "main"
SECURITY = "security"
KINDS = (MAIN, SECURITY)

#: The oldest InRelease `Date` accepted from each kind of archive, even by a host with no
#: earlier provisioning to compare with: a replayed old index still verifies (a 2023
#: bookworm InRelease is as validly signed today, and the main archive's carries no
#: Valid-Until), and would pin the guest to a kernel years old. Set shortly before the
#: indexes this version was checked against (bookworm's of 2026-07-11, bookworm-security's
#: of 2026-11-29; trixie's was newer than both); raise them with each release.
DATE_FLOOR: dict[str, str] = {MAIN: "2026-07-01", SECURITY: "2026-11-01"}
COMPONENT = "main"
ARCH = "amd64"

#: The keys whose signatures an InRelease is accepted with, by v4 fingerprint; the key
#: material is the keyring files of the same name in roteiro_py/data/ (exported from
#: Debian's debian-archive-keyring). Subkeys sign; each is pinned in its own right.
PINNED_KEYS: dict[str, str] = {
    "B8B80B5B623EAB6AD8775C45B7C5D7D6350947F8": "debian-archive-bookworm-automatic",
    "4CB50190207B4758A3F73A796ED0E7B82643E131": "debian-archive-bookworm-automatic",
    "05AB90340C0C5E797F44A8C8254CF3B5AEC0A8F0": "debian-archive-bookworm-security-automatic",
    "B0CAB9266E8C3929798B3EEEBDE6D2B9216EC7A8": "debian-archive-bookworm-security-automatic",
    "4D64FEC119C2029067D6E791F8D2585B8783D481": "debian-archive-bookworm-stable",
    "04B54C3CDCA79751B16BC6B5225629DF75B188BD": "debian-archive-trixie-automatic",
    "B8E5F13176D2A7A75220028078DBA3BC47EF2265": "debian-archive-trixie-automatic",
    "5E04A1E3223A19A20706E20F9904613D4CCE68C6": "debian-archive-trixie-security-automatic",
    "89C87ACEA5DD6B8E6A7068808E9F831205B4BA95": "debian-archive-trixie-security-automatic",
    "41587F7DB8C774BCCF131416762F67A0B2C39DE4": "debian-archive-trixie-stable",
}

#: bookworm's InRelease is ~150 KB.
MAX_INRELEASE_BYTES = 4 << 20
#: bookworm's main/binary-amd64/Packages.xz is ~9 MB, ~45 MB decompressed.
MAX_PACKAGES_COMPRESSED_BYTES = 64 << 20
MAX_PACKAGES_BYTES = 512 << 20
MAX_STANZA_BYTES = 256 << 10
#: A .deb larger than this is refused whatever Packages says (the kernel is ~70 MB).
MAX_DEB_BYTES = 1 << 30
#: Seconds one network read may stall.
NETWORK_TIMEOUT_S = 60
#: A download must average at least this rate (after NETWORK_TIMEOUT_S of grace): the
#: timeout alone bounds one read, and a mirror sending a byte a minute would hold
#: prefetch for ever. At this rate the ~70 MB kernel .deb may take ~35 minutes.
MIN_BYTES_PER_S = 32 << 10
_CHUNK = 1 << 20

_FILENAME = re.compile(r"pool/[A-Za-z0-9+._~%-]+(/[A-Za-z0-9+._~%-]+)*\.deb")
_SHA256 = re.compile(r"[0-9a-f]{64}")

Progress = Callable[[str, int, int], None]


class ArchiveError(Exception):
    """What went wrong, and whether it is a refusal of the archive's content (`refused`)
    or a failure to reach it; `missing`: the archive answered that the file is not there."""

    def __init__(self, message: str, *, refused: bool, missing: bool = False) -> None:
        super().__init__(message)
        self.refused = refused
        self.missing = missing


class Stale(ArchiveError):
    """The InRelease's Valid-Until has passed (`date`, `valid_until`: seconds since the epoch)."""

    def __init__(self, message: str, date: int, valid_until: int) -> None:
        super().__init__(message, refused=True)
        self.date = date
        self.valid_until = valid_until


def security_suite(suite: str) -> str:
    """The security archive's suite for the main archive's `suite` (bookworm-security)."""
    return f"{suite}-security"


def floor_epoch(kind: str) -> int:
    """DATE_FLOOR[kind], midnight UTC, in seconds since the epoch."""
    return calendar.timegm(time.strptime(DATE_FLOOR[kind], "%Y-%m-%d"))


@dataclass(frozen=True)
class Release:
    archive: str
    suite: str
    kind: str  # MAIN or SECURITY
    date: int  # seconds since the epoch, from the signed Date field
    fingerprint: str  # of the key whose signature verified
    sha256: dict[str, tuple[str, int]]  # path under dists/SUITE -> (digest, size)


@dataclass(frozen=True)
class Package:
    name: str
    version: str
    filename: str
    sha256: str
    size: int
    depends: str
    #: Pre-Depends and Provides, as the index states them ("" when absent): the linter
    #: image's root (image/debian_root.py) resolves a dependency closure from them.
    pre_depends: str = ""
    provides: str = ""


# -- reading from the archive ----------------------------------------------------------------


def local_root(archive: str) -> Path | None:
    """The directory a file:// URL or a plain path names; None for http(s)."""
    parsed = urllib.parse.urlparse(archive)
    if parsed.scheme == "file":
        return Path(urllib.parse.unquote(parsed.path))
    if parsed.scheme in ("http", "https"):
        return None
    if parsed.scheme:
        raise ArchiveError(f"the archive {archive} is neither an http(s) or file URL nor a "
                           "directory", refused=False)
    return Path(archive).expanduser()


class _HttpRedirectsOnly(UnreadRedirectHandler):
    """Redirects to http(s) only: urllib's own handler follows one to ftp://, whose login
    no read of `fetch` sees, so MIN_BYTES_PER_S would not bound it (a trickling FTP greeting
    held a registry pull: store/registry.py). Plain HTTP is fine here: content is signed.
    The redirect's body is closed unread before this runs (redirects.py)."""

    def redirect_request(self, req: urllib.request.Request, fp: IO[bytes], code: int, msg: str,
                         headers: http.client.HTTPMessage, newurl: str) -> urllib.request.Request | None:
        scheme = urllib.parse.urlsplit(newurl).scheme
        if scheme not in ("http", "https"):
            raise ArchiveError(f"{urllib.parse.urlsplit(req.full_url).path}: redirected to "
                               f"{scheme[:20]}://, neither http nor https", refused=False)
        return super().redirect_request(req, fp, code, msg, headers, newurl)


def _opener(watch: SocketDeadline) -> urllib.request.OpenerDirector:
    """HTTP and HTTPS only, the proxies of the environment kept (a host behind one reaches
    no mirror otherwise), each connection's socket armed with `watch` the moment it
    exists: the deadline ends the request in any phase (a status line and headers
    trickled a byte at a time held it for ever)."""
    return armed_opener(watch.arm, _HttpRedirectsOnly())


def _open_local(file: Path, path: str) -> BinaryIO:
    """`file` if it is a regular file (or a symlink to one). A FIFO would block `open` until
    a writer came, and a device would read for ever or have effects: refused before the open
    (stat), and again after it (fstat, on what was opened: the path may have been swapped
    between the two), which O_NONBLOCK keeps from blocking."""
    def refuse(mode: int) -> ArchiveError:
        return ArchiveError(f"{path} in the local archive is not a regular file (mode "
                            f"{stat.filemode(mode)}): refused, not read", refused=True)

    mode = os.stat(file).st_mode
    if not stat.S_ISREG(mode):
        raise refuse(mode)
    fd = os.open(file, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise refuse(mode)
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _open(archive: str, path: str, watch: SocketDeadline) -> BinaryIO:
    root = local_root(archive)
    try:
        if root is not None:
            return _open_local(root / path, path)
        url = archive.rstrip("/") + "/" + urllib.parse.quote(path)
        request = urllib.request.Request(url, headers={"User-Agent": "pylint-sandbox"})
        response: BinaryIO = _opener(watch).open(request, timeout=NETWORK_TIMEOUT_S)
        return response
    except urllib.error.HTTPError as exc:
        raise ArchiveError(f"{path}: HTTP {exc.code}", refused=False,
                           missing=exc.code in (404, 410)) from exc
    except FileNotFoundError as exc:
        raise ArchiveError(f"{path}: {exc}", refused=False, missing=True) from exc
    # http.client.HTTPException: what urllib lets through of a reply that is not HTTP (a
    # garbled status line, too many headers); a hostile mirror is a failure, not a crash.
    except (OSError, urllib.error.URLError, ValueError, http.client.HTTPException) as exc:
        raise ArchiveError(f"{path}: {str(exc) or repr(exc)}", refused=False) from exc


def fetch(archive: str, path: str, limit: int, sink: Callable[[bytes], object] | None = None,
          progress: Progress | None = None) -> bytes:
    """At most `limit` bytes of `path` (more is refused); written to `sink` if given, else
    returned. Slower than MIN_BYTES_PER_S on average is given up (`read1`: one read returns
    what one receive brought, so the rate is checked however the mirror trickles)."""
    kept = bytearray()
    done = 0
    started = time.monotonic()
    allowed = NETWORK_TIMEOUT_S + limit / MIN_BYTES_PER_S

    def read(handle: BinaryIO, size: int) -> bytes:
        try:
            chunk: bytes = getattr(handle, "read1", handle.read)(size)
        except (OSError, http.client.HTTPException) as exc:
            raise ArchiveError(f"{path}: {str(exc) or repr(exc)}", refused=False) from exc
        if time.monotonic() - started > allowed:
            raise ArchiveError(f"{path}: {done + len(chunk)} bytes in {allowed:.0f} s, less than "
                               f"{MIN_BYTES_PER_S} bytes a second", refused=False)
        return chunk

    watch = SocketDeadline(allowed, duplicate=True)  # every phase of the request, headers too

    def late() -> ArchiveError:
        return ArchiveError(f"{path}: not fetched within {allowed:.0f} s, less than {MIN_BYTES_PER_S} "
                            f"bytes a second (after {NETWORK_TIMEOUT_S} s of grace)", refused=False)

    try:
        with _open(archive, path, watch) as handle:
            while True:
                chunk = read(handle, min(_CHUNK, limit + 1 - done))
                if watch.fired:  # a socket shut down ends a read short: never a body
                    raise late()
                if not chunk:
                    break
                done += len(chunk)
                if done > limit:
                    raise ArchiveError(f"{path} is larger than {limit} bytes", refused=True)
                if sink is None:
                    kept += chunk
                else:
                    sink(chunk)
                if progress is not None:
                    progress(path, done, limit)
                if done == limit:
                    if read(handle, 1):
                        raise ArchiveError(f"{path} is larger than {limit} bytes", refused=True)
                    break
    except ArchiveError as exc:
        if watch.fired and not exc.refused:
            raise late() from None
        raise
    finally:
        watch.close()
    if watch.fired:
        raise late()
    return bytes(kept)


# -- the signed index ------------------------------------------------------------------------


def pinned_keys() -> list[openpgp.PublicKey]:
    # lazy, as in read_release: openpgp.py loads cryptography, which only provisioning
    # needs; every lint imports this module (vm/assets/assets.py) and verifies nothing
    from roteiro_py.vm.assets import openpgp

    keys: list[openpgp.PublicKey] = []
    data = resources.files("roteiro_py") / "data"
    for name in sorted(set(PINNED_KEYS.values())):
        keys += openpgp.load_keyring((data / f"{name}.gpg").read_bytes(), PINNED_KEYS)
    return keys


def _fields(stanza: str) -> dict[str, str]:
    """One RFC 822 stanza: field -> value, continuation lines joined with "\n"."""
    out: dict[str, str] = {}
    last = None
    for line in stanza.split("\n"):
        if line[:1] in (" ", "\t"):
            if last is not None:
                out[last] += "\n" + line.strip()
            continue
        name, sep, value = line.partition(":")
        if not sep or not name or " " in name:
            raise ArchiveError(f"a line that is not a field: {line[:80]!r}", refused=True)
        if name in out:  # which one counts is a parser's choice: refuse rather than guess
            raise ArchiveError(f"a stanza names the field {name[:80]!r} twice", refused=True)
        last = name
        out[name] = value.strip()
    return out


def stanza_fields(stanza: str) -> dict[str, str]:
    """`_fields` for a caller outside this module (image/debian_root.py)."""
    return _fields(stanza)


def _date(value: str, what: str) -> int:
    try:
        return int(email.utils.parsedate_to_datetime(value).timestamp())
    except (TypeError, ValueError) as exc:
        raise ArchiveError(f"InRelease has no readable {what} ({value[:60]!r})", refused=True) from exc


def when(epoch: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(epoch))


def parse_release(archive: str, suite: str, verified: openpgp.Verified, now: float, *,
                  kind: str) -> Release:
    """The fields of a verified InRelease of `kind` (MAIN or SECURITY), its dates checked."""
    from roteiro_py.vm.assets import openpgp  # lazy, as in read_release

    fields = _fields(verified.text.split("\n\n", 1)[0].strip("\n"))
    if suite not in (fields.get("Codename"), fields.get("Suite")):
        raise ArchiveError(f"InRelease is signed but for suite {fields.get('Codename')!r}, "
                           f"not {suite!r}", refused=True)
    date = _date(fields.get("Date", ""), "Date")
    if date > now + openpgp.MAX_CLOCK_SKEW_S:
        raise ArchiveError(f"InRelease is dated in the future ({fields['Date']})", refused=True)
    if date < floor_epoch(kind):
        raise ArchiveError(f"InRelease is dated {when(date)}, before {DATE_FLOOR[kind]}, the "
                           f"oldest {kind} archive index this version of pylint-sandbox "
                           "accepts: an old index replayed, or a copy older than the tool",
                           refused=True)
    if "Valid-Until" in fields:
        valid_until = _date(fields["Valid-Until"], "Valid-Until")
        if valid_until < now:
            raise Stale(f"InRelease expired at {when(valid_until)} (Valid-Until): the mirror "
                        "or copy is stale, or replays an old index", date, valid_until)
    sums: dict[str, tuple[str, int]] = {}
    for line in fields.get("SHA256", "").split("\n"):
        parts = line.split()
        if len(parts) == 3 and _SHA256.fullmatch(parts[0]) and parts[1].isdigit():
            sums[parts[2]] = (parts[0], int(parts[1]))
    return Release(archive, suite, kind, date, verified.fingerprint, sums)


def read_release(archive: str, suite: str, now: float, *, kind: str) -> Release:
    # lazy: openpgp.py loads cryptography (~20 ms), which only provisioning needs; every
    # lint imports this module through vm/assets/assets.py (bench/cli_startup.py)
    from roteiro_py.vm.assets import openpgp

    data = fetch(archive, f"dists/{suite}/InRelease", MAX_INRELEASE_BYTES)
    try:
        verified = openpgp.verify_cleartext(data, pinned_keys(), now)
    except openpgp.Unverified as exc:
        raise ArchiveError(f"dists/{suite}/InRelease: {exc}", refused=True) from exc
    return parse_release(archive, suite, verified, now, kind=kind)


# -- the package index -----------------------------------------------------------------------


def _decompress(data: bytes, kind: str) -> bytes:
    """At most MAX_PACKAGES_BYTES of the decompressed index (a bomb is refused)."""
    try:
        if kind == "xz":
            decompressor = lzma.LZMADecompressor(format=lzma.FORMAT_XZ)
            out = decompressor.decompress(data, MAX_PACKAGES_BYTES + 1)
            whole = decompressor.eof
        else:
            with gzip.GzipFile(fileobj=io.BytesIO(data)) as handle:
                out = handle.read(MAX_PACKAGES_BYTES + 1)
                whole = not handle.read(1)
    except (lzma.LZMAError, OSError, EOFError) as exc:
        raise ArchiveError(f"the package index does not decompress: {exc}", refused=True) from exc
    if len(out) > MAX_PACKAGES_BYTES:
        raise ArchiveError(f"the package index is larger than {MAX_PACKAGES_BYTES} bytes "
                           "decompressed", refused=True)
    if not whole:
        raise ArchiveError("the package index is truncated", refused=True)
    return out


def parse_packages(text: bytes, wanted: Callable[[str], bool]) -> dict[str, Package]:
    """The stanzas of a Packages file whose Package field `wanted` accepts, by name.

    Every stanza is bounded by MAX_STANZA_BYTES. A name listed more than once is its highest
    version (`compare_versions`), as apt takes it: Debian's indexes do list some packages
    at several versions (bookworm's Architecture: all linux-doc, twice); the same version
    twice is refused, as is a stanza that names a field twice.
    """
    out: dict[str, Package] = {}
    for raw in re.split(rb"\n\n+", text):
        if not raw.strip():
            continue
        if len(raw) > MAX_STANZA_BYTES:
            raise ArchiveError(f"a stanza of the package index is larger than {MAX_STANZA_BYTES} "
                               "bytes", refused=True)
        head = re.match(rb"Package: *([^\n]*)", raw.lstrip(b"\n"))
        if head is None:
            raise ArchiveError("a stanza of the package index has no Package field first", refused=True)
        name = head.group(1).decode("utf-8", "replace").strip()
        if not wanted(name):
            continue
        fields = _fields(raw.decode("utf-8", "replace").strip("\n"))
        version = fields.get("Version", "")
        if name in out:
            order = compare_versions(version, out[name].version)
            if order == 0:
                raise ArchiveError(f"the package index lists {name} twice at version "
                                   f"{version[:80]}", refused=True)
            if order < 0:
                continue
        filename, digest, size = fields.get("Filename", ""), fields.get("SHA256", ""), fields.get("Size", "")
        if not _FILENAME.fullmatch(filename) or "/../" in f"/{filename}/" or "/./" in f"/{filename}/":
            raise ArchiveError(f"{name} has an unusable Filename {filename[:120]!r}", refused=True)
        if not _SHA256.fullmatch(digest) or not size.isdigit() or not 0 < int(size) <= MAX_DEB_BYTES:
            raise ArchiveError(f"{name} has no usable SHA256 or Size", refused=True)
        out[name] = Package(name, version, filename, digest, int(size), fields.get("Depends", ""),
                            fields.get("Pre-Depends", ""), fields.get("Provides", ""))
    return out


def read_packages(release: Release, wanted: Callable[[str], bool]) -> dict[str, Package]:
    """The stanzas `wanted` accepts of the index `read_index` gives."""
    return parse_packages(read_index(release), wanted)


def read_index(release: Release) -> bytes:
    """The first of Packages.xz, .gz and the uncompressed Packages that the InRelease lists
    and the archive holds (a local copy may hold only one: apt keeps the uncompressed one in
    /var/lib/apt/lists), decompressed; one that is there but does not match is refused, not
    passed over."""
    base = f"{COMPONENT}/binary-{ARCH}/Packages"
    first_missing: ArchiveError | None = None
    for suffix, kind, bound in ((".xz", "xz", MAX_PACKAGES_COMPRESSED_BYTES),
                                (".gz", "gz", MAX_PACKAGES_COMPRESSED_BYTES), ("", "", MAX_PACKAGES_BYTES)):
        listed = release.sha256.get(base + suffix)
        if listed is None:
            continue
        digest, size = listed
        if size > bound:
            raise ArchiveError(f"{base + suffix} is listed at {size} bytes, more than {bound}",
                               refused=True)
        path = f"dists/{release.suite}/{base}{suffix}"
        try:
            data = fetch(release.archive, path, size)
        except ArchiveError as exc:
            if not exc.missing:
                raise
            first_missing = first_missing or exc
            continue
        if len(data) != size or hashlib.sha256(data).hexdigest() != digest:
            raise ArchiveError(f"{path} does not match the SHA256 and size the signed InRelease "
                               "lists (the mirror is corrupt or was tampered with)", refused=True)
        return _decompress(data, kind) if kind else data
    if first_missing is not None:
        raise first_missing
    raise ArchiveError(f"the signed InRelease lists no {base}.xz, .gz or uncompressed", refused=True)


_VERSION = re.compile(r"(?:([0-9]+):)?([0-9][A-Za-z0-9.+~-]*?)(?:-([A-Za-z0-9.+~]+))?")


def _order(char: str) -> int:
    if char == "~":
        return -1
    if not char or char.isdigit():
        return 0
    return ord(char) if char.isalpha() else ord(char) + 256


def _compare_part(a: str, b: str) -> int:
    """dpkg's verrevcmp: runs of non-digits by `_order` (~ before the end before letters
    before the rest), runs of digits as numbers."""
    i = j = 0
    while i < len(a) or j < len(b):
        while (i < len(a) and not a[i].isdigit()) or (j < len(b) and not b[j].isdigit()):
            ac, bc = _order(a[i:i + 1]), _order(b[j:j + 1])
            if ac != bc:
                return ac - bc
            i, j = i + 1, j + 1
        start_i, start_j = i, j
        while i < len(a) and a[i].isdigit():
            i += 1
        while j < len(b) and b[j].isdigit():
            j += 1
        x, y = int(a[start_i:i] or "0"), int(b[start_j:j] or "0")
        if x != y:
            return -1 if x < y else 1
    return 0


def compare_versions(a: str, b: str) -> int:
    """<0, 0 or >0 as Debian version `a` sorts before, with or after `b` (dpkg
    --compare-versions; a string comparison would put 6.1.90 after 6.1.176)."""
    parsed = []
    for version in (a, b):
        match = _VERSION.fullmatch(version) if version.isascii() else None
        if match is None:
            raise ArchiveError(f"{version[:80]!r} is not a Debian version", refused=True)
        parsed.append((int(match.group(1) or 0), match.group(2), match.group(3) or ""))
    (epoch_a, upstream_a, revision_a), (epoch_b, upstream_b, revision_b) = parsed
    if epoch_a != epoch_b:
        return -1 if epoch_a < epoch_b else 1
    return _compare_part(upstream_a, upstream_b) or _compare_part(revision_a, revision_b)


def versioned_dependency(package: Package, pattern: str) -> str:
    """The first name in `package`'s Depends that matches `pattern` (the meta-package's
    linux-image-<version>-amd64)."""
    for alternative in re.split(r"[,|]", package.depends):
        name = alternative.split("(")[0].strip()
        if re.fullmatch(pattern, name):
            return name
    raise ArchiveError(f"{package.name} depends on nothing that matches {pattern}", refused=True)


def download(archive: str, package: Package, dest: Path, progress: Progress | None = None) -> None:
    """`package`'s .deb into `dest`, at most its listed Size, kept only if its SHA256 matches."""
    digest = hashlib.sha256()
    try:
        with dest.open("wb") as handle:

            def sink(chunk: bytes) -> None:
                digest.update(chunk)
                handle.write(chunk)

            fetch(archive, package.filename, package.size, sink, progress)
            written = handle.tell()
    except BaseException:
        dest.unlink(missing_ok=True)
        raise
    if written != package.size or digest.hexdigest() != package.sha256:
        dest.unlink()
        raise ArchiveError(f"{package.filename} does not match the SHA256 and size in the "
                           "package index (the mirror is corrupt or was tampered with)", refused=True)


def names(packages: Iterable[Package]) -> str:
    return ", ".join(f"{p.name} {p.version}" for p in packages)
