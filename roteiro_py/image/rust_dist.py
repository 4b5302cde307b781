"""A Rust toolchain from Rust's own distribution, verified end to end, as a rustup-shaped directory.

`fetch_toolchain(spec, dest)` reads `<server>/dist/[<date>/]channel-rust-<channel>.toml`
and its `.asc`, and leaves at `dest` a directory laid out as rustup installs a toolchain
(`bin/cargo`, `bin/rustc`, `bin/cargo-clippy`, `bin/clippy-driver`, `lib/`,
`lib/rustlib/<triple>/lib/`), which the image builder's toolchain layer takes as it is.
It is two steps, which the image builder takes apart (`FromDist`): `read_manifest` (the
manifest and its signature only, verified and held to the date floor: a `Pinned`, whose
`key` says what the toolchain will hold) and `install` (the packages), so a build whose
image is cached for that key downloads no package (image/build.py).

Guarantees:
- The manifest's detached signature is checked BEFORE a byte of it is parsed, by
  `openpgp.verify_detached`, against the keys in `PINNED_KEYS` only: the Rust release key
  shipped in roteiro_py/data/rust-key.gpg.ascii (the file static.rust-lang.org publishes)
  and read by fingerprint. Then the manifest is read as TOML through the project's bounded
  parser (untrusted.parse_toml), its v2 shape checked; nothing in it is trusted but the
  hashes and URLs the signature covers.
- A signed manifest that is not the one asked for is refused (`replayed`): a release's
  must be of that rustc version, a dated channel's of that date, and a channel's (dated
  or not) of a rustc of that channel (`CHANNEL_RUSTC`: no manifest names its channel, so
  today's nightly served as stable's was taken, and its date became stable's floor). Its
  `date` must be a calendar date written YYYY-MM-DD (2026-02-30 is refused, not compared).
- An undated channel (`stable`, `beta`, `nightly`) names no date to compare with, so a
  mirror or the network could replay an older manifest, validly signed, and the image
  would silently be an old toolchain (a freeze attack). Its manifest is refused
  (`errors.ToolchainStale`, by `read_manifest`: before any package is fetched or a cached
  image looked for) if dated before the higher of two floors (`check_floor`): the newest
  date this host already accepted for the channel, dated or not, from any server
  (`FLOOR_RECORD` in the download cache, written once a toolchain is stored or an image
  build uses its cached image: `Pinned.accept`; a replay), and `MAX_AGE_DAYS[channel]`
  days before today by this host's clock (a first fetch, or a record that was lost, as on
  a CI job, whose cache keeps no cache/rust-dist). The clock is read once per manifest
  (`now`), as debian_archive.py reads it for an InRelease: a clock that is ahead
  refuses a current manifest, and the refusal says what the clock said; one that is
  behind lets an older manifest past the age (the record still holds it back), and past
  `openpgp.MAX_CLOCK_SKEW_S` refuses a current manifest's signature as made in the
  future. A release line (`1.95`, the newest 1.95.x: `RELEASE_LINE`) moves too, at a
  point release: it is held to the record alone, which names the release accepted. A
  dated spec or a release is taken as named, however old: the user chose it.
- Every package (rustc, cargo, rust-std for the host and each requested target, clippy by
  its `[renames]` name, plus requested components) is downloaded bounded
  (`MAX_PACKAGE_BYTES`, `NETWORK_TIMEOUT_S` + an average of `MIN_BYTES_PER_S`, a
  deadline that shuts the socket in any phase: socket_deadline.py) and its sha256 checked
  against the manifest before it is unpacked or cached. A component or target the
  manifest lacks, or marks unavailable, is `errors.ToolchainIncomplete`, naming it.
- https only, end to end (the manifest, each package, every redirect), with one exception
  stated here and tested: plain http to a loopback address (127.0.0.0/8, ::1, localhost),
  which is how the tests stand in for the server (and which is reached directly, never
  through the environment's proxy). Trust never rests on the transport:
  it rests on the signature and the hashes, so a mirror (`RUSTUP_DIST_SERVER`, as rustup
  spells it) is checked as the real server is; package URLs under the default server are
  rewritten to the mirror, as rustup does.
- The rust-installer tarballs (`<pkg>-<version>-<triple>/` holding `components`, and per
  component a directory with `manifest.in` listing `file:PATH` and `dir:PATH`) are
  unpacked bounded (`MAX_ENTRIES`, `MAX_UNPACKED_BYTES`, `MAX_PATH_CHARS`, `MAX_DEPTH`)
  and only regular files and directories are made: a link of any kind, a device, a FIFO,
  an absolute path, a `..` component, a member outside the tarball's one top directory or
  a path that appears twice is `errors.ToolchainRefused` (rustup's own unpacker takes
  files and directories only). Only what a component's `manifest.in` lists is installed.
- Nothing is stored unless everything verified: the toolchain is built in a temporary
  directory beside `dest` and renamed to `dest` at the end; every refusal removes it. The
  download cache ($ROTEIRO_HOME/cache/rust-dist/<sha256>) holds only files whose sha256 is
  their name (checked again when read, over the very handle that is unpacked), so a
  refused download is never in it.
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import http.client
import json
import lzma
import os
import re
import shutil
import stat
import sys
import tarfile
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path, PurePosixPath
from typing import IO, Any, BinaryIO, cast

from filelock import FileLock

from roteiro_py import errors
from roteiro_py.guidance import printable
from roteiro_py.image import toolchain
from roteiro_py.image.channel import MAX_REQUESTED as MAX_REQUESTED
from roteiro_py.image.channel import NAME as NAME
from roteiro_py.image.channel import VERSION as _VERSION
from roteiro_py.image.channel import ChannelSpec as ChannelSpec
from roteiro_py.image.channel import check_name as check_name
from roteiro_py.image.channel import parse_spec as parse_spec
from roteiro_py.paths import cache_root, replace_file
from roteiro_py.redirects import UnreadRedirectHandler
from roteiro_py.reference import is_loopback_host
from roteiro_py.socket_deadline import SocketDeadline, armed_opener
from roteiro_py.untrusted import FileRefused, parse_toml, read_bounded
from roteiro_py.vm.assets import openpgp

DEFAULT_SERVER = "https://static.rust-lang.org"
#: The variable rustup reads for a mirror of the distribution server; read here the same way.
SERVER_ENV = "RUSTUP_DIST_SERVER"
#: The guest is amd64 Linux: the toolchain runs there.
DEFAULT_HOST = "x86_64-unknown-linux-gnu"
#: What every toolchain holds; clippy is the point of the image.
REQUIRED = ("rustc", "cargo", "rust-std", "clippy")

#: The keys a channel manifest's signature is accepted from, by v4 fingerprint: the primary
#: key of "Rust Language (Tag and Release Signing Key) <rust-key@rust-lang.org>" (RSA-4096)
#: and its signing subkey (which signed releases up to at least 2017), each pinned in its
#: own right (openpgp.py checks no binding signature). The key material is the file named
#: here in roteiro_py/data/.
PINNED_KEYS: dict[str, str] = {
    "108F66205EAEB0AAA8DD5E1C85AB96E6FA1BE5FE": "rust-key.gpg.ascii",
    "C13466B7E169A085188632165CB4A9347B3B09DC": "rust-key.gpg.ascii",
}

#: channel-rust-stable.toml is ~1 MB (every target's URLs and hashes).
MAX_MANIFEST_BYTES = 16 << 20
MAX_SIGNATURE_BYTES = 64 << 10
#: How many days before today (this host's clock) an undated channel's manifest may be
#: dated when nothing newer was accepted. Rust publishes stable every six weeks (42 days;
#: a point release re-dates it in between), and beta only when its version changes
#: (rust-lang/promote-release skips a beta whose version is the live one), so the one date
#: either is sure to move by is the six-weekly promotion: 56 days leaves two weeks for a
#: late release or a mirror syncing behind, and a replay holds a host back one release at
#: most, for two weeks at most. Nightly is published daily: 7 days rides out an outage of
#: several days (and a mirror synced weekly, as Debian's security index is valid a week),
#: and past it the way forward is a dated nightly, as rustup users pin one anyway.
MAX_AGE_DAYS: dict[str, int] = {"stable": 56, "beta": 56, "nightly": 7}
#: A release line (`1.95`): channel-rust-1.95.toml is the newest 1.95.x, so it moves when
#: a point release comes out, as stable does, and 1.95.0's replayed after 1.95.1's is a
#: downgrade. It has no maximum age (it stops moving once 1.96 is out): only the record
#: holds it, with the release accepted, which a refusal names (a line is never dated).
RELEASE_LINE = re.compile(r"\d{1,3}\.\d{1,4}")
#: In the download cache: per channel, the newest manifest date accepted and the server
#: that served it (`check_floor`). Losing it (the cache removed) leaves MAX_AGE_DAYS.
FLOOR_RECORD = "channels.json"
MAX_FLOOR_RECORD_BYTES = 64 << 10
#: rustc's .tar.xz is ~80 MB; a package larger than this is refused whatever the manifest says.
MAX_PACKAGE_BYTES = 1 << 30
#: Bounds over one toolchain's unpacking (rustc unpacks to ~600 MB in ~100 files).
MAX_UNPACKED_BYTES = 8 << 30
MAX_ENTRIES = 100_000
MAX_PATH_CHARS = 1024
MAX_DEPTH = 32
#: Seconds one network read may stall, and the average a download must keep after it.
NETWORK_TIMEOUT_S = 60
MIN_BYTES_PER_S = 32 << 10
_CHUNK = 1 << 20

_SHA256 = re.compile(r"[0-9a-f]{64}")

Progress = Callable[[str, int, int], None]


# -- where from -----------------------------------------------------------------------------


def resolve_server(server: str | None, environ: Mapping[str, str] | None = None) -> str:
    """The server to fetch from: `server`, else $RUSTUP_DIST_SERVER, else static.rust-lang.org."""
    env = os.environ if environ is None else environ
    chosen = (server or env.get(SERVER_ENV) or DEFAULT_SERVER).rstrip("/")
    why = not_fetchable(chosen)
    if why:
        raise errors.ToolchainSpecInvalid(chosen[:200], f"the server {why}", "server" if server else SERVER_ENV)
    return chosen


def not_fetchable(url: str) -> str | None:
    """Why `url` is never requested, or None: https, or plain http to a loopback address."""
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018 (raises ValueError for a port that does not parse)
    except ValueError:
        return "does not parse"
    if any(ch.isspace() or not ch.isprintable() for ch in url) or len(url) > 2048:
        return "holds spaces or control characters, or is too long"
    if "@" in parts.netloc:
        return "names a user"
    if not parts.hostname:
        return "has no host"
    if parts.scheme == "https" or (parts.scheme == "http" and is_loopback_host(parts.hostname)):
        return None
    return "is not https (plain http is spoken to a loopback address only)"


def _shown(url: str) -> str:
    return url if len(url) <= 200 else url[:200] + "..."


class _Fail(Exception):
    """A download failed: `refused` (what the server sent is wrong) or unreachable."""

    def __init__(self, why: str, *, refused: bool) -> None:
        super().__init__(why)
        self.why = why
        self.refused = refused


class _Redirects(UnreadRedirectHandler):
    """A redirect is followed only to a URL `not_fetchable` accepts; its body is closed
    unread first (redirects.py)."""

    def redirect_request(self, req: urllib.request.Request, fp: IO[bytes], code: int, msg: str,
                         headers: http.client.HTTPMessage, newurl: str) -> urllib.request.Request | None:
        why = not_fetchable(newurl)
        if why:
            raise _Fail(f"{_shown(req.full_url)} redirected to {_shown(newurl)!r}, which {why}", refused=True)
        return super().redirect_request(req, fp, code, msg, headers, newurl)


def _opener(watch: SocketDeadline, *, direct: bool) -> urllib.request.OpenerDirector:
    """HTTP and HTTPS only, each connection's socket armed with `watch` the moment it
    exists; the environment's proxies kept, except for a loopback server (`direct`),
    which no proxy can reach (urllib would send http://127.0.0.1/ to `http_proxy` unless
    `no_proxy` named it)."""
    return armed_opener(watch.arm, _Redirects(), proxies={} if direct else None)


def _content_length(value: str | None) -> int | None:
    """A Content-Length of ASCII digits as a number, else None (the body's own length is
    bounded as it comes). Not str.isdigit: it says yes to `²` (latin-1 0xB2, as
    http.client decodes a header), which int() refuses with a ValueError."""
    text = (value or "").strip()
    return int(text) if re.fullmatch(r"[0-9]{1,20}", text) else None


def download(url: str, limit: int, sink: Callable[[bytes], object], what: str,
             progress: Progress | None = None) -> int:
    """GET `url`, its body (at most `limit` bytes) given to `sink`; the bytes that came.
    _Fail(refused=True) for a URL or redirect that is not fetchable or a body too large,
    _Fail(refused=False) for the rest (no connection, an HTTP error, the deadline)."""
    why = not_fetchable(url)
    if why:
        raise _Fail(f"{what}'s URL {_shown(url)!r} {why}", refused=True)
    seconds = NETWORK_TIMEOUT_S + limit / MIN_BYTES_PER_S
    watch = SocketDeadline(seconds, duplicate=True)

    def late() -> _Fail:
        return _Fail(f"{what} did not arrive within {seconds:.0f} s (at least {MIN_BYTES_PER_S} "
                     f"bytes a second after {NETWORK_TIMEOUT_S} s)", refused=False)

    try:
        request = urllib.request.Request(url, headers={"User-Agent": "pylint-sandbox",
                                                       "Accept-Encoding": "identity"})
        try:
            opener = _opener(watch, direct=is_loopback_host(urllib.parse.urlsplit(url).hostname or ""))
            response = cast(http.client.HTTPResponse, opener.open(request, timeout=NETWORK_TIMEOUT_S))
        except urllib.error.HTTPError as error:
            error.close()
            raise _Fail(f"{what}: HTTP {error.code} from {_shown(url)}", refused=False) from None
        except (urllib.error.URLError, OSError, http.client.HTTPException, ValueError) as error:
            if watch.fired:
                raise late() from None
            reason = getattr(error, "reason", None) or error
            raise _Fail(f"{what} could not be fetched from {_shown(url)} ({str(reason)[:200]})",
                        refused=False) from None
        with response:
            length = _content_length(response.headers.get("Content-Length"))
            if length is not None and length > limit:
                raise _Fail(f"{what} is larger than {limit} bytes (Content-Length: {length})", refused=True)
            started, done = time.monotonic(), 0
            while True:
                try:
                    chunk = response.read1(min(_CHUNK, limit + 1 - done))
                except (OSError, http.client.HTTPException, ValueError) as error:
                    if watch.fired:
                        raise late() from None
                    raise _Fail(f"{what} broke off after {done} bytes ({str(error)[:200]})",
                                refused=False) from None
                if watch.fired:
                    raise late()
                if not chunk:
                    return done
                done += len(chunk)
                if done > limit:
                    raise _Fail(f"{what} is larger than {limit} bytes", refused=True)
                sink(chunk)
                if progress is not None:
                    progress(what, done, limit if length is None else length)
                elapsed = time.monotonic() - started
                if elapsed > NETWORK_TIMEOUT_S and done < (elapsed - NETWORK_TIMEOUT_S) * MIN_BYTES_PER_S:
                    raise _Fail(f"{what} came at less than {MIN_BYTES_PER_S} bytes a second", refused=False)
    finally:
        watch.close()


# -- the signed manifest --------------------------------------------------------------------


def pinned_keys() -> list[openpgp.PublicKey]:
    data = resources.files("roteiro_py") / "data"
    keys: list[openpgp.PublicKey] = []
    for name in sorted(set(PINNED_KEYS.values())):
        keys += openpgp.load_keyring((data / name).read_bytes(), PINNED_KEYS)
    return keys


@dataclass(frozen=True)
class Package:
    """One package of the manifest for one target: where it is and its sha256."""

    name: str  # as the manifest names it (`clippy-preview`)
    target: str
    url: str
    sha256: str


@dataclass(frozen=True)
class Manifest:
    date: str
    #: name -> target -> the package, or None where the manifest says it is not available
    packages: dict[str, dict[str, Package | None]]
    #: the manifest's `[renames]`: an old name -> the name it is published under
    renames: dict[str, str]
    #: name -> `[pkg.<name>] version`, as "1.95.0 (abcdef012 2026-11-01)"
    versions: dict[str, str]

    def find(self, name: str, target: str) -> Package | None:
        targets = self.packages.get(self.renames.get(name, name), {})
        return targets.get(target) or targets.get("*")


class _Malformed(ValueError):
    pass


def _table(value: object, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _Malformed(f"{what} is not a table")
    return value


def parse_manifest(data: bytes) -> Manifest:
    """A v2 channel manifest's packages and renames (only what is read is checked)."""
    try:
        document = parse_toml(data)
    except FileRefused as refused:
        raise _Malformed(f"the manifest is not TOML: {refused.reason}") from None
    if document.get("manifest-version") != "2":
        raise _Malformed(f"manifest-version is {str(document.get('manifest-version'))[:20]!r}, not '2'")
    date = document.get("date")
    if not isinstance(date, str) or _day(date) is None:
        raise _Malformed(f"its date is not a date as YYYY-MM-DD ({str(date)[:20]!r})")
    packages: dict[str, dict[str, Package | None]] = {}
    versions: dict[str, str] = {}
    for name, pkg in _table(document.get("pkg", {}), "[pkg]").items():
        version = _table(pkg, f"[pkg.{name}]").get("version")
        if isinstance(version, str):
            versions[name] = version[:200]
        targets: dict[str, Package | None] = {}
        for target, entry in _table(_table(pkg, f"[pkg.{name}]").get("target", {}), f"[pkg.{name}.target]").items():
            entry = _table(entry, f"[pkg.{name}.target.{target}]")
            if entry.get("available") is not True:
                targets[target] = None
                continue
            url, digest = entry.get("xz_url"), entry.get("xz_hash")
            if url is None:
                url, digest = entry.get("url"), entry.get("hash")
            if not isinstance(url, str) or not isinstance(digest, str) or not _SHA256.fullmatch(digest):
                raise _Malformed(f"[pkg.{name}.target.{target}] has no url and sha256 hash")
            targets[target] = Package(name, target, url, digest)
        packages[name] = targets
    renames: dict[str, str] = {}
    for old, entry in _table(document.get("renames", {}), "[renames]").items():
        to = _table(entry, f"[renames.{old}]").get("to")
        if not isinstance(to, str):
            raise _Malformed(f"[renames.{old}] has no `to`")
        renames[old] = to
    return Manifest(date, packages, renames, versions)


def _day(text: str) -> datetime.date | None:
    """`text` as a calendar date if it is one written YYYY-MM-DD, else None: the pattern
    alone let 2026-02-30 through, and fromisoformat alone takes 20261101 (Python 3.11)."""
    if not re.fullmatch(r"[0-9]{4}-[0-9]{2}-[0-9]{2}", text):
        return None
    try:
        return datetime.date.fromisoformat(text)
    except ValueError:
        return None


#: The rustc version (`[pkg.rustc] version`, before the space) of each channel's manifest,
#: as Rust writes it: `1.95.0`, `1.96.0-beta.3` (`1.2.0-beta` before betas were numbered),
#: `1.97.0-nightly`. A manifest names no channel; this is how its own is told.
CHANNEL_RUSTC: dict[str, re.Pattern[str]] = {
    "stable": re.compile(r"\d{1,3}\.\d{1,4}\.\d{1,4}"),
    "beta": re.compile(r"\d{1,3}\.\d{1,4}\.\d{1,4}-beta(\.\d{1,3})?"),
    "nightly": re.compile(r"\d{1,3}\.\d{1,4}\.\d{1,4}-nightly"),
}


def replayed(spec: ChannelSpec, manifest: Manifest) -> str | None:
    """Why `manifest` is not the one `spec` asked for, or None. A signature says Rust made
    the manifest, not which one it is: a mirror could serve 1.38.0's, validly signed, as
    channel-rust-1.95.0.toml, an older nightly's under a newer date, or today's nightly
    as channel-rust-stable.toml (no manifest names its channel; the nightly's date would
    have become stable's floor, refusing the real stable as stale). A release must be the
    rustc version asked for (`1.95` any 1.95.x release), a dated channel the date asked
    for, and a channel's manifest, dated or not, a rustc of that channel (CHANNEL_RUSTC)."""
    if spec.date is not None and manifest.date != spec.date:
        return f"it is the manifest of {manifest.date}, not of {spec.date} (an older one, replayed?)"
    rustc = manifest.versions.get("rustc", "").split(" ")[0]
    if _VERSION.fullmatch(spec.channel):
        wanted = (spec.channel.count(".") == 1 and rustc.startswith(spec.channel + ".")
                  and CHANNEL_RUSTC["stable"].fullmatch(rustc) is not None)
        if rustc != spec.channel and not wanted:
            return f"it is the manifest of rustc {rustc or '(no version)'}, not {spec.channel} (replayed?)"
    elif spec.channel in CHANNEL_RUSTC and not CHANNEL_RUSTC[spec.channel].fullmatch(rustc):
        return (f"it is the manifest of rustc {rustc or '(no version)'}, not of a {spec.channel} rustc "
                f"(another channel's manifest, served as {spec.channel}'s?)")
    return None


# -- the date floor of an undated channel -----------------------------------------------------


def _floored(channel: str) -> bool:
    """Whether `channel` moves, so has a date floor: stable, beta, nightly or a release line."""
    return channel in MAX_AGE_DAYS or RELEASE_LINE.fullmatch(channel) is not None


def recorded_floors(store: Path) -> dict[str, dict[str, str]]:
    """FLOOR_RECORD in `store`: channel -> {"date", "server"} (and a release line's
    "release"), only entries that are what `record_floor` writes. A record that cannot be
    read (absent, a link, larger than MAX_FLOOR_RECORD_BYTES, not JSON) is no record, as
    an unreadable manifest is for the VM assets (vm/assets/assets.py): MAX_AGE_DAYS still
    holds, and the next accepted manifest writes it whole again. json.loads raises RecursionError on arrays nested a
    few thousand deep, which fit in the bound (store/manifest.py load_json)."""
    try:
        document = json.loads(read_bounded(store / FLOOR_RECORD, MAX_FLOOR_RECORD_BYTES))
    except (FileNotFoundError, FileRefused, ValueError, RecursionError):
        return {}
    channels = document.get("channels") if isinstance(document, dict) else None
    found: dict[str, dict[str, str]] = {}
    for name, entry in (channels.items() if isinstance(channels, dict) else ()):
        date = entry.get("date") if isinstance(entry, dict) else None
        server = entry.get("server") if isinstance(entry, dict) else None
        release = entry.get("release") if isinstance(entry, dict) else None
        if _floored(name) and isinstance(date, str) and _day(date) is not None \
                and isinstance(server, str) and len(server) <= 2048:
            found[name] = {"date": date, "server": server}
            if isinstance(release, str) and CHANNEL_RUSTC["stable"].fullmatch(release):
                found[name]["release"] = release
    return found


def check_floor(spec: ChannelSpec, manifest: Manifest, server: str, store: Path, now: float) -> None:
    """errors.ToolchainStale if `spec` is an undated channel and `manifest` is dated before
    the newest date recorded for it in `store`, or before MAX_AGE_DAYS[channel] days before
    `now` (UTC), whichever floor is higher; the refusal names that floor and where it came
    from. A dated spec or a release returns: `replayed` holds it to exactly what it names."""
    if spec.date is not None or not _floored(spec.channel):
        return
    most = MAX_AGE_DAYS.get(spec.channel, 0)
    today = datetime.datetime.fromtimestamp(now, datetime.UTC).date()
    floor, recorded_from = "0000-00-00", None  # a release line: the record alone
    if spec.channel in MAX_AGE_DAYS:
        floor = (today - datetime.timedelta(days=most)).isoformat()
    recorded = recorded_floors(store).get(spec.channel)
    if recorded is not None and recorded["date"] >= floor:  # ISO dates sort as they are written
        floor, recorded_from = recorded["date"], recorded["server"]
    if manifest.date >= floor:
        return
    raise errors.ToolchainStale(spec.channel, server, manifest.date, floor, today=today.isoformat(),
                                max_age_days=most, recorded_from=recorded_from,
                                record=store / FLOOR_RECORD if recorded_from is not None else None,
                                release=recorded.get("release") if recorded is not None else None)


def record_floor(store: Path, channel: str, date: str, server: str, release: str | None = None) -> None:
    """Raise the floor of `channel` (stable, beta, nightly, a release line with the
    `release` it was; anything else is not recorded) to `date`, served by `server`, if it
    is newer than the one recorded. Under a lock: two
    builds at once must not write back each other's older record. `store` is made if it
    is absent: a build whose image was cached downloaded nothing into it.

    A record that cannot be written (FLOOR_RECORD a directory, `store` read-only) is a
    warning on stderr, not a refusal: the manifest was verified and held to the floor
    read before this, so the build is as safe as with the record written; what is lost
    is the higher floor for later builds, which the warning names with the way to get it
    back. It escaped as an OSError (exit 4, "a bug") after the image was built."""
    if not _floored(channel):
        return
    try:
        store.mkdir(parents=True, exist_ok=True)
        with FileLock(str(store / (FLOOR_RECORD + ".lock"))):
            floors = recorded_floors(store)
            if channel in floors and floors[channel]["date"] >= date:
                return
            floors[channel] = {"date": date, "server": server}
            if release is not None and RELEASE_LINE.fullmatch(channel):
                floors[channel]["release"] = release
            text = json.dumps({"channels": floors}, indent=2, sort_keys=True) + "\n"
            replace_file(store / FLOOR_RECORD, text.encode(), 0o644)
    except OSError as error:
        record = store / FLOOR_RECORD
        sys.stderr.write(printable(
            f"pylint-sandbox: warning: the date floor of {channel} ({date}) was not recorded in "
            f"{record} ({error.strerror or error}), so a later build could take a manifest older "
            f"than it; remove {record} if it is not a file, or make {store} writable") + "\n")


# -- the toolchain ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Request:
    """What to fetch: a spec, the host it runs on, more targets and components."""

    spec: ChannelSpec
    host: str = DEFAULT_HOST
    targets: tuple[str, ...] = ()
    components: tuple[str, ...] = ()

    def wanted(self) -> list[tuple[str, str]]:
        """(component, target) pairs: the required ones for the host, rust-std for each
        target, each extra component for the host (or `*`, as rust-src is published)."""
        pairs = [(name, self.host) for name in REQUIRED]
        pairs += [("rust-std", target) for target in self.targets if target != self.host]
        pairs += [(name, self.host) for name in self.components if name not in REQUIRED]
        return list(dict.fromkeys(pairs))


@dataclass(frozen=True)
class Pinned:
    """A toolchain as its verified channel manifest pins it, before any package is fetched:
    the manifest's bytes (what the signature covered), the packages chosen from it for the
    request, in the order they are unpacked, and the server they come from; and what
    `accept` records once the toolchain is used: the channel asked for, the manifest's
    date, and the directory whose FLOOR_RECORD the date floor was checked against."""

    label: str
    server: str
    manifest: bytes
    packages: tuple[Package, ...]
    channel: str
    date: str
    floors: Path

    def key(self) -> list[str]:
        """What the toolchain `install` makes of this holds, known without it: its files
        are the chosen packages' (each named by its sha256, and the URL that says how it
        is compressed) unpacked by this code, and the manifest's bytes. The server is not
        in it: a package from a mirror is the same bytes, or refused."""
        lines = [f"rust-dist manifest\0{hashlib.sha256(self.manifest).hexdigest()}"]
        lines += [f"rust-dist package\0{p.name}\0{p.target}\0{p.url}\0{p.sha256}" for p in self.packages]
        return lines

    def accept(self) -> None:
        """Raise the channel's date floor to this manifest's date (`record_floor`, in the
        directory it was checked against). Called once the toolchain is used: `install`
        stored it, or an image build found the image of this key cached (FromDist.used).
        Were it recorded by `install` alone, a host building from its cached images
        would never learn a date it used, and an older manifest replayed to it within
        the channel's maximum age would pass."""
        record_floor(self.floors, self.channel, self.date, self.server,
                     toolchain.manifest_version(self.manifest, self.channel))


def read_manifest(spec: str | ChannelSpec, *, server: str | None = None, host: str = DEFAULT_HOST,
                  targets: Sequence[str] = (), components: Sequence[str] = (), progress: Progress | None = None,
                  now: float | None = None, cache: Path | None = None) -> Pinned:
    """The toolchain `spec` as the channel manifest, fetched and verified, pins it:
    errors.ToolchainRefused (ToolchainStale: an undated channel's manifest older than its
    floor) / ToolchainIncomplete / ToolchainUnreachable otherwise. Only the manifest and
    its signature are downloaded (a build whose image is cached needs no more:
    image/build.py), and every check, the date floor included, is done here: a refused
    manifest provisions nothing, even with an image of its key cached. `cache`: the
    directory whose FLOOR_RECORD holds the floor (default $ROTEIRO_HOME/cache/rust-dist,
    the download cache); `now`: this host's clock, read once for the signature's time and
    the channel's maximum age."""
    parsed = spec if isinstance(spec, ChannelSpec) else parse_spec(spec)
    for value in (host, *targets):
        check_name(value, "target", "--target")
    for value in components:
        check_name(value, "component", "--component")
    if len(targets) + len(components) > MAX_REQUESTED:
        raise errors.ToolchainSpecInvalid(str(parsed), f"more than {MAX_REQUESTED} targets and components")
    base = resolve_server(server)
    request = Request(parsed, host, tuple(targets), tuple(components))
    floors = cache if cache is not None else cache_root() / "rust-dist"
    return _pinned(request, base, floors, progress, time.time() if now is None else now)


def install(pinned: Pinned, dest: Path, *, progress: Progress | None = None, cache: Path | None = None) -> Path:
    """The toolchain `pinned` names, its packages downloaded (or taken from `cache`) and
    checked against the manifest's sha256s, at `dest` (which must not exist); with nothing
    at `dest` on a refusal. `cache`: where downloads are kept by sha256 (default
    $ROTEIRO_HOME/cache/rust-dist). Once stored, the manifest's date raises its channel's
    floor (`Pinned.accept`)."""
    if os.path.lexists(dest):
        raise FileExistsError(dest)  # the caller chooses a new directory; never merged into
    store = cache if cache is not None else cache_root() / "rust-dist"
    store.mkdir(parents=True, exist_ok=True)
    dest.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent))
    try:
        _install_all(pinned, work / "root", work / "staging", store, progress)
        os.rename(work / "root", dest)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    pinned.accept()
    return dest


def fetch_toolchain(spec: str | ChannelSpec, dest: Path, *, server: str | None = None,
                    host: str = DEFAULT_HOST, targets: Sequence[str] = (), components: Sequence[str] = (),
                    progress: Progress | None = None, now: float | None = None,
                    cache: Path | None = None) -> Path:
    """`read_manifest` then `install`: the toolchain `spec` from Rust's distribution,
    verified, at `dest` (which must not exist); errors.ToolchainRefused (ToolchainStale:
    an undated channel's manifest older than its floor) / ToolchainIncomplete /
    ToolchainUnreachable otherwise, with nothing at `dest`. `cache`: where downloads are
    kept by sha256, and FLOOR_RECORD (default $ROTEIRO_HOME/cache/rust-dist). `now`: this
    host's clock, read once for the signature's time and the channel's maximum age."""
    if os.path.lexists(dest):
        raise FileExistsError(dest)  # before the network: a caller's mistake is not worth a download
    pinned = read_manifest(spec, server=server, host=host, targets=targets, components=components,
                           progress=progress, now=now, cache=cache)
    return install(pinned, dest, progress=progress, cache=cache)


@dataclass(frozen=True)
class FromDist:
    """A toolchain from Rust's distribution as image/build.py takes one: its version and
    cache key from the verified manifest, its directory made (downloaded, checked,
    unpacked, under `work_root`) only when the build needs its files, and removed after.
    Either way the build uses it, so its date raises the channel's floor (`used`)."""

    pinned: Pinned
    work_root: Path
    progress: Progress | None = None

    def version(self) -> str:
        return toolchain.manifest_version(self.pinned.manifest, self.pinned.label)

    def key(self, with_clippy: bool) -> list[str]:  # clippy is fetched either way; the build's options say
        return self.pinned.key()  # whether its binaries are in the layer

    @contextlib.contextmanager
    def directory(self) -> Iterator[Path]:
        self.work_root.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="toolchain-", dir=self.work_root) as work:
            yield install(self.pinned, Path(work) / "toolchain", progress=self.progress)

    def used(self) -> None:
        self.pinned.accept()


def _pinned(request: Request, base: str, floors: Path, progress: Progress | None, now: float) -> Pinned:
    label = str(request.spec)

    def fetch(url: str, limit: int, what: str) -> bytes:
        body = bytearray()
        try:
            download(url, limit, body.extend, what, progress)
        except _Fail as fail:
            raise (errors.ToolchainRefused(label, base, fail.why) if fail.refused
                   else errors.ToolchainUnreachable(label, base, fail.why)) from None
        return bytes(body)

    url = f"{base}/{request.spec.manifest_path}"
    manifest_bytes = fetch(url, MAX_MANIFEST_BYTES, request.spec.manifest_path)
    signature = fetch(url + ".asc", MAX_SIGNATURE_BYTES, request.spec.manifest_path + ".asc")
    try:
        openpgp.verify_detached(manifest_bytes, signature, pinned_keys(), now)
    except openpgp.Unverified as exc:
        raise errors.ToolchainRefused(label, base, f"the signature of {request.spec.manifest_path} "
                                      f"does not verify with the Rust release key ({exc})") from None
    try:
        manifest = parse_manifest(manifest_bytes)
    except _Malformed as exc:
        raise errors.ToolchainRefused(label, base, f"{request.spec.manifest_path}: {exc}") from None
    why = replayed(request.spec, manifest)
    if why:
        raise errors.ToolchainRefused(label, base, f"{request.spec.manifest_path} is signed, but {why}")
    check_floor(request.spec, manifest, base, floors, now)
    chosen: list[Package] = []
    for name, target in request.wanted():
        package = manifest.find(name, target)
        if package is None:
            raise errors.ToolchainIncomplete(f"{label} ({manifest.date})", name, target)
        if package not in chosen:  # `clippy-preview` asked for beside REQUIRED's `clippy`: one package
            chosen.append(package)
    return Pinned(label, base, manifest_bytes, tuple(chosen), request.spec.channel, manifest.date, floors)


def _install_all(pinned: Pinned, root: Path, staging: Path, store: Path, progress: Progress | None) -> None:
    root.mkdir()
    budget = _Budget()
    for package in pinned.packages:
        try:
            with _verified(package, pinned.server, store, pinned.label, progress) as handle:
                _install(handle, package, staging, root, budget)
        except _Unsafe as exc:
            raise errors.ToolchainRefused(pinned.label, pinned.server,
                                          f"{package.name} ({package.target}): {exc}") from None
    # Where rustup keeps the channel manifest a toolchain came from (image/toolchain.py
    # toolchain_version reads the rustc version there): the verified bytes, not a copy
    # of anything a package carried.
    record = root / "lib" / "rustlib" / "multirust-channel-manifest.toml"
    record.parent.mkdir(parents=True, exist_ok=True)
    record.write_bytes(pinned.manifest)


def _package_url(url: str, base: str) -> str:
    """The package's URL, moved to the mirror when it is under the default server (rustup)."""
    if base != DEFAULT_SERVER and url.startswith(DEFAULT_SERVER + "/"):
        return base + url[len(DEFAULT_SERVER):]
    return url


def _verified(package: Package, base: str, store: Path, label: str, progress: Progress | None) -> BinaryIO:
    """The package's bytes, open for reading, from the cache or downloaded into it. The
    sha256 is computed over the very handle returned (never checked on one open and read
    on another, which a swap of the file between the two would defeat), and only a file
    that matched is renamed into the cache."""
    kept = store / package.sha256
    try:
        cached = open(kept, "rb")  # noqa: SIM115 (returned open, closed by the caller)
    except FileNotFoundError:
        pass
    else:
        if _sha256_of(cached) == package.sha256:
            cached.seek(0)
            return cached
        cached.close()
        kept.unlink(missing_ok=True)  # corrupted on disk: fetched again
    url = _package_url(package.url, base)
    what = f"{package.name} for {package.target}"
    digest = hashlib.sha256()
    fd, temporary = tempfile.mkstemp(prefix=".download.", dir=store)
    out = os.fdopen(fd, "w+b")

    def sink(chunk: bytes) -> None:
        digest.update(chunk)
        out.write(chunk)

    try:
        try:
            download(url, MAX_PACKAGE_BYTES, sink, what, progress)
        except _Fail as fail:
            raise (errors.ToolchainRefused(label, base, fail.why) if fail.refused
                   else errors.ToolchainUnreachable(label, base, fail.why)) from None
        if digest.hexdigest() != package.sha256:
            raise errors.ToolchainRefused(label, base, f"{what} has sha256 {digest.hexdigest()}, not "
                                          f"{package.sha256} as the signed manifest lists")
        out.flush()
        os.replace(temporary, kept)
        out.seek(0)
        return out
    except BaseException:
        out.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise


def _sha256_of(handle: BinaryIO) -> str:
    digest = hashlib.sha256()
    while chunk := handle.read(_CHUNK):
        digest.update(chunk)
    return digest.hexdigest()


# -- unpacking ---------------------------------------------------------------------------------


class _Unsafe(ValueError):
    pass


class _Budget:
    """What one toolchain's unpacking may still write (MAX_ENTRIES, MAX_UNPACKED_BYTES)."""

    def __init__(self) -> None:
        self.entries = 0
        self.bytes = 0

    def take(self, size: int) -> None:
        self.entries += 1
        self.bytes += size
        if self.entries > MAX_ENTRIES:
            raise _Unsafe(f"more than {MAX_ENTRIES} archive members (MAX_ENTRIES)")
        if self.bytes > MAX_UNPACKED_BYTES:
            raise _Unsafe(f"more than {MAX_UNPACKED_BYTES} bytes unpacked (MAX_UNPACKED_BYTES)")


def _relative(name: str, what: str) -> PurePosixPath:
    """`name` as a relative path with no `..`, empty or `.` parts, bounded; _Unsafe if not."""
    if len(name) > MAX_PATH_CHARS or "\0" in name:
        raise _Unsafe(f"{what} {name[:100]!r} is longer than {MAX_PATH_CHARS} characters or holds NUL")
    if name.startswith("/"):
        raise _Unsafe(f"{what} {name[:100]!r} is an absolute path")
    parts = [part for part in name.split("/") if part not in ("", ".")]
    if ".." in parts:
        raise _Unsafe(f"{what} {name[:100]!r} has a '..' component")
    if not parts or len(parts) > MAX_DEPTH:
        raise _Unsafe(f"{what} {name[:100]!r} is empty or deeper than {MAX_DEPTH} (MAX_DEPTH)")
    return PurePosixPath(*parts)


def _install(handle: BinaryIO, package: Package, staging: Path, root: Path, budget: _Budget) -> None:
    """Unpack one rust-installer tarball into `staging`, then move what each of its
    components' manifest.in lists into `root`."""
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    top: str | None = None
    try:
        with _stream(handle, xz=package.url.endswith(".xz")) as archive:
            for member in archive:
                path = _relative(member.name, "the member")
                if top is None:
                    top = path.parts[0]
                if path.parts[0] != top:
                    raise _Unsafe(f"the member {member.name[:100]!r} is outside the top directory {top!r}")
                budget.take(member.size if member.isreg() else 0)
                _extract(archive, member, staging / path)
    except (tarfile.TarError, EOFError, OSError, lzma.LZMAError, zlib.error) as exc:
        raise _Unsafe(f"the archive does not unpack ({str(exc)[:200]})") from None
    if top is None:
        raise _Unsafe("the archive is empty")
    try:
        _place(staging / top, root)
    except OSError as exc:  # a top, a component or a parent that is a file, not a directory
        raise _Unsafe(f"its layout cannot be installed ({exc.strerror or exc}: "
                      f"{Path(str(exc.filename)).name[:100]!r})") from None
    shutil.rmtree(staging, ignore_errors=True)


def _stream(handle: BinaryIO, *, xz: bool) -> tarfile.TarFile:
    """The tarball as a stream (`r|`): read once, front to back, never seeked."""
    if xz:
        return tarfile.open(fileobj=handle, mode="r|xz")
    return tarfile.open(fileobj=handle, mode="r|gz")


def _extract(archive: tarfile.TarFile, member: tarfile.TarInfo, target: Path) -> None:
    if member.isdir():
        target.mkdir(mode=0o755, parents=True, exist_ok=True)
        return
    if not member.isreg() or member.issparse():
        kind = "a link" if member.issym() or member.islnk() else "a device, FIFO or special member"
        raise _Unsafe(f"the member {member.name[:100]!r} is {kind}; only files and directories are unpacked")
    target.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
    source = archive.extractfile(member)
    assert source is not None  # a regular member always has a file object
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    mode = 0o755 if member.mode & 0o111 else 0o644
    try:
        fd = os.open(target, flags, mode)
    except FileExistsError:
        raise _Unsafe(f"the member {member.name[:100]!r} appears twice") from None
    with os.fdopen(fd, "wb") as out:
        # not left to the umask: one that takes the owner's x bit (0o177) made rustc 0600,
        # and the layer 0644 (toolchain._file_mode), under the key of the good one (Pinned.key)
        os.fchmod(out.fileno(), mode)
        left = member.size
        while left > 0:
            chunk = source.read(min(_CHUNK, left))
            if not chunk:
                raise _Unsafe(f"the member {member.name[:100]!r} is truncated")
            out.write(chunk)
            left -= len(chunk)


def _small_file(path: Path, what: str) -> str:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        raise _Unsafe(f"it has no {what}") from None
    if not stat.S_ISREG(st.st_mode) or st.st_size > 1 << 20:
        raise _Unsafe(f"its {what} is not a regular file of at most 1 MiB")
    try:
        return path.read_text("utf-8")
    except UnicodeDecodeError:
        raise _Unsafe(f"its {what} is not UTF-8") from None


def _place(top: Path, root: Path) -> None:
    """rust-installer's install: for each name in `components`, each `file:`/`dir:` line of
    `<component>/manifest.in` moves `<component>/<path>` to `root/<path>`."""
    names = [line.strip() for line in _small_file(top / "components", "components file").splitlines() if line.strip()]
    if not names:
        raise _Unsafe("its components file names no component")
    for name in names:
        if not NAME.fullmatch(name):
            raise _Unsafe(f"its components file names {name[:64]!r}, not a component name")
        lines = _small_file(top / name / "manifest.in", f"{name}/manifest.in").splitlines()
        for line in lines:
            if not line.strip():
                continue
            kind, _, rest = line.partition(":")
            if kind not in ("file", "dir"):
                raise _Unsafe(f"{name}/manifest.in has a line {line[:100]!r}, neither file: nor dir:")
            path = _relative(rest, f"{name}/manifest.in's path")
            source = top / name / path
            st = os.lstat(source) if os.path.lexists(source) else None
            if st is None or not (stat.S_ISREG(st.st_mode) if kind == "file" else stat.S_ISDIR(st.st_mode)):
                raise _Unsafe(f"{name}/manifest.in lists {line[:100]!r}, which the archive does not hold")
            target = root / path
            target.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
            if os.path.lexists(target):
                raise _Unsafe(f"{path} is installed by two components")
            os.rename(source, target)


def files_of(root: Path) -> Iterator[str]:
    """Every file below `root`, as a sorted relative POSIX path (for tests and the report)."""
    for path in sorted(root.rglob("*")):
        if path.is_file():
            yield path.relative_to(root).as_posix()
