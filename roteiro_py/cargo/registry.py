"""One registry pin's `.crate` into the package store, with no host cargo (issue 20).

`fetch_crate` looks, in order, and stops at the first that gives the lockfile's bytes:
1. the store (cargo/store.py), by the pin's checksum;
2. the host's `$CARGO_HOME/registry/cache/<any registry>/<name>-<version>.crate`, read
   through no link (each directory below `$CARGO_HOME` is opened O_NOFOLLOW, the file
   too), bounded by store.MAX_CRATE_BYTES, copied in only when its sha256 is the pin's;
3. a download over https: the registry's `config.json` (once per registry per run,
   MAX_CONFIG_BYTES, validated), its `dl` template filled in by cargo's rules, the
   `.crate` bounded by store.MAX_CRATE_BYTES, kept only when its sha256 is the pin's.

What is guaranteed of a download:
- https only, end to end: the index, the `dl` URL, every redirect (plain http, ftp, file:
  and data: are never spoken: the opener, socket_deadline.armed_opener, has no ftp:,
  file: or data: handler, and refuses a plain-http request before it connects). A
  host `[source]` mirror (`replace-with`, cargo/sources.py) is followed, https only.
- Bounded in time: each request ends by the caller's `until` and by NETWORK_TIMEOUT_S +
  its size limit / MIN_BYTES_PER_S (a watchdog shuts its socket down, the TLS handshake
  and the headers included: a socket timeout alone bounds one read, and a server sending
  a byte a minute would hold a fetch for ever, store/registry.py); after NETWORK_TIMEOUT_S of
  grace a body must average MIN_BYTES_PER_S.
- A token (a registry with `auth-required`, or one answering 401/403 for `config.json`)
  comes from `CARGO_REGISTRIES_<NAME>_TOKEN` or `$CARGO_HOME/credentials.toml`, NAME being
  the host's `[registries.<name>]` whose index is the registry's URL. It is sent as cargo
  sends it, to the index's `config.json` and to the `dl` URL the registry declares, and
  never across a redirect to another origin. It is never in a message, a log or a repr.
  A credential provider (a program cargo would run) is refused by name, not run.
- TLS verifies as cargo's does, with the CA the host names the documented ways:
  `CARGO_HTTP_CAINFO`, `[http] cainfo` in `$CARGO_HOME/config.toml`, else OpenSSL's own
  defaults (which honour `SSL_CERT_FILE`); a proxy from cargo's `[http] proxy` /
  `CARGO_HTTP_PROXY`, else `HTTPS_PROXY`/`https_proxy` (and `no_proxy`).
- Every failure is a refusal naming the registry and the package, never exit 4:
  errors.PackageRefused for what the registry sent (a checksum that differs, too large,
  a `dl` or redirect that is not https: nothing kept), errors.PackageSourceUnreachable for
  what could not be had (no connection, TLS, an HTTP error, bad JSON, credentials).

Nothing here reads the tree: the host's cargo configuration is read once, into HostCargo,
from `$CARGO_HOME` and the environment only.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import http.client
import json
import os
import re
import ssl
import stat
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Literal, cast

from roteiro_py import errors, paths
from roteiro_py.cargo import store
from roteiro_py.cargo.lockfile import Pin
from roteiro_py.cargo.sources import HostSources, host_sources
from roteiro_py.guidance import printable
from roteiro_py.redirects import UnreadRedirectHandler
from roteiro_py.socket_deadline import SocketDeadline, armed_opener
from roteiro_py.untrusted import FileRefused, parse_toml, read_bounded

#: Where a pin's `.crate` came from; "missing": not in the store or the cargo cache, and
#: downloading was not allowed (the caller names every missing pin at once).
Origin = Literal["store", "cargo-cache", "download", "missing"]

#: The largest `config.json` read (crates.io's is 80 bytes).
MAX_CONFIG_BYTES = 64 * 1024
#: The longest `dl` template taken from a `config.json`.
MAX_TEMPLATE_CHARS = 2048
#: Seconds one network read may stall, and the grace before MIN_BYTES_PER_S applies.
NETWORK_TIMEOUT_S = 60.0
#: The slowest average a body may arrive at after the grace (debian_archive.py's rule):
#: crates.io's largest `.crate`s (10 MiB) then take at most ~6 minutes.
MIN_BYTES_PER_S = 32 << 10
#: The most `$CARGO_HOME/registry/cache/*` directories looked in (one a registry).
MAX_CACHE_DIRS = 256
#: The largest host cargo configuration file read (`config.toml`, `credentials.toml`).
HOST_CONFIG_MAX_BYTES = 1024 * 1024
#: The credential provider that is only "the token from the environment or
#: credentials.toml", which is what is read here; any other is a program cargo would run.
TOKEN_PROVIDER = "cargo:token"
USER_AGENT = "pylint-sandbox (cargo/registry.py)"

_CHUNK = 1 << 20
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
#: An https URL safe to request: printable ASCII, no space, quote, backslash or `#`.
_URL = re.compile(r"https://[!$-\[\]-~]+")
_MARKERS = ("{crate}", "{version}", "{prefix}", "{lowerprefix}", "{sha256-checksum}")
_ENV_REGISTRY = re.compile(r"CARGO_REGISTRIES_([A-Z0-9_]+)_(INDEX|TOKEN|CREDENTIAL_PROVIDER)")


class _Refused(Exception):
    """What the registry sent is refused (errors.PackageRefused): nothing of it is kept."""

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


class _Unreachable(Exception):
    """What was wanted could not be had (errors.PackageSourceUnreachable)."""

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


class _HttpStatus(Exception):
    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


class Token:
    """A registry token and where it was read; its repr never shows it."""

    __slots__ = ("origin", "value")

    def __init__(self, value: str, origin: str) -> None:
        self.value = value
        self.origin = origin

    def __repr__(self) -> str:
        return f"<token from {self.origin}>"


@dataclass(frozen=True)
class RegistryConfig:
    """A registry's `config.json`, checked, and the token its downloads carry (if any)."""

    index: str
    dl: str
    token: Token | None


def env_name(name: str) -> str:
    """A registry name as cargo's environment spells it: upper case, `-` as `_`."""
    return name.upper().replace("-", "_")


def _key(url: str) -> str:
    """An index URL compared as cargo compares it: without `sparse+`, ending in `/`."""
    return url.removeprefix("sparse+").rstrip("/") + "/"


@dataclass
class HostCargo:
    """The host's cargo configuration a fetch uses, read once (`read`) from `$CARGO_HOME`
    and the environment, never from the tree; and what one run learns of each registry."""

    cargo_home: Path
    #: The CA file TLS verifies with, and the setting that named it (None: OpenSSL's
    #: defaults, SSL_CERT_FILE included).
    cainfo: tuple[Path, str] | None = None
    #: cargo's `http.proxy` (None: the environment's https proxy, if any).
    proxy: str | None = None
    #: index URL (`_key`) -> the host's name for that registry.
    registries: dict[str, str] = field(default_factory=dict)
    #: env_name(registry) -> its token.
    tokens: dict[str, Token] = field(default_factory=dict, repr=False)
    #: env_name(registry), or "" for `registry.global-credential-providers` -> (the
    #: providers, the setting that names them).
    providers: dict[str, tuple[tuple[str, ...], str]] = field(default_factory=dict)
    #: Why the host's configuration could not be read; raised only when it is needed.
    problem: str | None = None
    _configs: dict[str, RegistryConfig] = field(default_factory=dict, repr=False)
    _context: ssl.SSLContext | None = field(default=None, repr=False)
    _sources: HostSources | None = field(default=None, repr=False)
    _cache_dirs: list[str] | None = field(default=None, repr=False)

    @classmethod
    def read(cls, cargo_home: Path | None = None, environ: Mapping[str, str] | None = None) -> HostCargo:
        """The configuration of `cargo_home` ($CARGO_HOME) and `environ` (os.environ)."""
        env = os.environ if environ is None else environ
        host = cls(paths.cargo_home() if cargo_home is None else cargo_home)
        config = host._toml(("config", "config.toml"))  # cargo prefers the old name
        credentials = host._toml(("credentials", "credentials.toml"))
        host._read_http(config, env)
        host._read_registries(config, credentials, env)
        return host

    def _toml(self, names: tuple[str, ...]) -> tuple[Path, dict[str, Any]]:
        for name in names:
            file = self.cargo_home / name
            try:
                return file, parse_toml(read_bounded(file, HOST_CONFIG_MAX_BYTES, follow_links=True))
            except FileNotFoundError:
                continue
            except FileRefused as refused:
                self.problem = self.problem or f"{file} cannot be read: {refused.reason}"
                return file, {}
        return self.cargo_home / names[-1], {}

    def _read_http(self, config: tuple[Path, dict[str, Any]], env: Mapping[str, str]) -> None:
        file, data = config
        table = data.get("http") if isinstance(data.get("http"), dict) else {}
        assert isinstance(table, dict)
        cainfo, proxy = env.get("CARGO_HTTP_CAINFO"), env.get("CARGO_HTTP_PROXY")
        if cainfo:  # relative to the working directory, as cargo reads an environment path
            self.cainfo = (Path(cainfo).absolute(), "CARGO_HTTP_CAINFO")
        elif isinstance(table.get("cainfo"), str) and table["cainfo"]:
            # a path in a config file is relative to the directory above the one holding it
            self.cainfo = (file.parent.parent / table["cainfo"], f"http.cainfo in {file}")
        elif "cainfo" in table:
            self.problem = self.problem or f"http.cainfo in {file} is not a path"
        chosen = proxy if proxy else table.get("proxy")
        if isinstance(chosen, str) and chosen:
            self.proxy = chosen if "://" in chosen else f"http://{chosen}"
        elif chosen not in (None, ""):
            self.problem = self.problem or f"http.proxy in {file} is not a string"

    def _read_registries(self, config: tuple[Path, dict[str, Any]],
                         credentials: tuple[Path, dict[str, Any]], env: Mapping[str, str]) -> None:
        file, data = config
        for name, table in _tables(data.get("registries")):
            index = table.get("index")
            if isinstance(index, str):
                self.registries.setdefault(_key(index), name)
            provider = table.get("credential-provider")
            if provider is not None:
                self.providers[env_name(name)] = (_providers(provider),
                                                  f"registries.{name}.credential-provider in {file}")
        registry = data.get("registry") if isinstance(data.get("registry"), dict) else {}
        assert isinstance(registry, dict)
        if "global-credential-providers" in registry:
            self.providers[""] = (_providers(registry["global-credential-providers"]),
                                  f"registry.global-credential-providers in {file}")
        cred_file, cred = credentials
        for name, table in _tables(cred.get("registries")):
            token = table.get("token")
            if isinstance(token, str) and token:
                self.tokens[env_name(name)] = Token(token, str(cred_file))
        if env.get("CARGO_REGISTRY_GLOBAL_CREDENTIAL_PROVIDERS"):
            self.providers[""] = (tuple(env["CARGO_REGISTRY_GLOBAL_CREDENTIAL_PROVIDERS"].split()),
                                  "CARGO_REGISTRY_GLOBAL_CREDENTIAL_PROVIDERS")
        for variable, value in sorted(env.items()):
            match = _ENV_REGISTRY.fullmatch(variable)
            if match is None or not value:
                continue
            name, what = match.groups()
            if what == "INDEX":
                self.registries[_key(value)] = name  # the environment outranks the file
            elif what == "TOKEN":
                self.tokens[name] = Token(value, variable)
            else:
                self.providers[name] = (tuple(value.split()), variable)

    # -- what a fetch asks of the host ---------------------------------------------------

    def index_for(self, pin: Pin) -> str:
        """The https index URL `pin` is downloaded through: its own, or the host's mirror
        of it (cargo/sources.py follows the `replace-with` chain and refuses what it
        cannot follow: errors.SourceReplacementRefused)."""
        if self._sources is None:
            self._sources = host_sources(cargo_home=self.cargo_home)
        chosen = self._sources.cache_source(pin.source)
        if chosen == pin.source:
            return _key(pin.url)
        if not chosen.startswith("sparse+https://"):
            raise _Unreachable(f"the host's cargo configuration replaces its registry with "
                               f"{_short(chosen)}, which is not https (only https is fetched: "
                               "name the mirror by its sparse+https:// URL)")
        return _key(chosen)

    def name_of(self, index: str) -> str | None:
        return self.registries.get(_key(index))

    def token_for(self, index: str) -> Token:
        """The token for the registry at `index`, or _Unreachable saying how to give one."""
        name = self.name_of(index)
        if name is None:
            raise _Unreachable("the registry asks for credentials, and no [registries.<name>] "
                               f"in {self.cargo_home / 'config.toml'} has its index "
                               f"(index = \"sparse+{index}\"): add one, then set "
                               "CARGO_REGISTRIES_<NAME>_TOKEN")
        key = env_name(name)
        token = self.tokens.get(key)
        if token is not None and token.origin == f"CARGO_REGISTRIES_{key}_TOKEN":
            return token
        providers, where = self.providers.get(key) or self.providers.get("") or ((TOKEN_PROVIDER,), "")
        if providers != (TOKEN_PROVIDER,):
            raise _Unreachable(f"its credentials come from the credential provider "
                               f"{' '.join(providers)!r} ({where}), which is not run here (a "
                               "provider is a program this host would run); give the token in "
                               f"CARGO_REGISTRIES_{key}_TOKEN instead")
        if token is None:
            raise _Unreachable(f"the registry {name!r} asks for credentials, and there is no "
                               f"token for it: set CARGO_REGISTRIES_{key}_TOKEN (or add "
                               f"[registries.{name}] token to {self.cargo_home / 'credentials.toml'})")
        return token

    def ssl_context(self) -> ssl.SSLContext:
        if self._context is None:
            try:
                self._context = ssl.create_default_context(
                    cafile=str(self.cainfo[0]) if self.cainfo else None)
            except (OSError, ssl.SSLError) as error:
                assert self.cainfo is not None
                raise _Unreachable(f"the CA file {self.cainfo[0]} named by {self.cainfo[1]} "
                                   f"cannot be loaded ({error})") from None
        return self._context

    def cache_dirs(self) -> list[str]:
        """The directories of `$CARGO_HOME/registry/cache` (at most MAX_CACHE_DIRS)."""
        if self._cache_dirs is None:
            self._cache_dirs = []
            with contextlib.suppress(OSError), _opened_dir(self.cargo_home / "registry", None) as registry, \
                    _opened_dir("cache", registry) as cache, os.scandir(cache) as entries:
                for entry in entries:
                    if entry.is_dir(follow_symlinks=False):
                        self._cache_dirs.append(entry.name)
                    if len(self._cache_dirs) >= MAX_CACHE_DIRS:
                        break
                self._cache_dirs.sort()
        return self._cache_dirs


def _tables(value: object) -> Iterator[tuple[str, dict[str, Any]]]:
    if isinstance(value, dict):
        for name, table in value.items():
            if isinstance(table, dict):
                yield str(name), table


def _providers(value: object) -> tuple[str, ...]:
    if isinstance(value, str):
        return tuple(value.split()) or ("",)
    if isinstance(value, list):
        return tuple(str(v) for v in value) or ("",)
    return (repr(value)[:80],)


def _short(text: str) -> str:
    return text if len(text) <= 120 else text[:117] + "..."


# -- the one pin ---------------------------------------------------------------------------


def fetch_crate(pin: Pin, *, tree: Path, lockfile: Path, allow_download: bool, host: HostCargo,
                until: float) -> Origin:
    """Put `pin`'s `.crate` in the store and say where it came from ("missing" when it is
    in neither the store nor the cargo cache and `allow_download` is False).

    `until`: the time.monotonic() by which every request of this pin has ended.
    Raises errors.PackageRefused (what came is not the lockfile's: nothing kept),
    errors.PackageSourceUnreachable (the registry could not be read), or
    errors.SourceReplacementRefused (a host mirror that cannot be followed)."""
    if pin.kind != "registry" or pin.checksum is None:
        raise ValueError(f"not a registry pin with a checksum: {pin.described()}")
    if store.has_crate(pin.checksum):
        return "store"
    if from_cargo_cache(pin, host):
        return "cargo-cache"
    if not allow_download:
        return "missing"
    index = pin.url
    try:
        if host.problem:  # before the mirror is looked up: it reads the same file
            raise _Unreachable(f"the host's cargo configuration: {host.problem}")
        index = host.index_for(pin)
        download(pin, index, host, until)
    except _Refused as refused:
        raise errors.PackageRefused(lockfile, pin.label(), f"{refused.why} (from {index})",
                                    tree) from None
    except _Unreachable as failed:
        raise errors.PackageSourceUnreachable(index, pin.label(), failed.why, tree) from None
    return "download"


def from_cargo_cache(pin: Pin, host: HostCargo) -> bool:
    """Whether `pin`'s `.crate` was copied into the store from the host's cargo cache (a
    file there that is a link, not regular, too large or of other bytes is passed over)."""
    assert pin.checksum is not None
    name = f"{pin.name}-{pin.version}.crate"
    for directory in host.cache_dirs():
        try:
            with _opened_dir(host.cargo_home / "registry", None) as registry, \
                    _opened_dir("cache", registry) as cache, _opened_dir(directory, cache) as fd:
                if copy_verified(fd, name, pin.checksum) is None:
                    return True
        except OSError:
            continue
    return False


def crates_from_dir(directory: Path, pins: Iterable[Pin], *, lockfile: Path,
                    tree: Path) -> tuple[list[Pin], list[Pin]]:
    """`fetch-deps --from DIR`: each registry pin's `<name>-<version>.crate` in `directory`
    (through no link, bounded) kept when its sha256 is the pin's. Returns (the pins now in
    the store, the pins neither there nor in `directory`); git pins are neither. A file
    that is there but not the pin's (other bytes, a link, too large) is errors.PackageRefused
    naming it, once every other file was looked at; nothing of it is kept."""
    kept: list[Pin] = []
    missing: list[Pin] = []
    refused: list[tuple[Pin, str]] = []
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as error:
        raise errors.UsageError(f"{printable(str(directory))} is not a directory this user can "
                                f"read ({error.strerror}).",
                                hint="Give --from the directory holding the `.crate` files.") from None
    try:
        for pin in pins:
            if pin.kind != "registry" or pin.checksum is None:
                continue
            if store.has_crate(pin.checksum):
                kept.append(pin)
                continue
            name = f"{pin.name}-{pin.version}.crate"
            try:
                why = copy_verified(fd, name, pin.checksum)
            except FileNotFoundError:
                missing.append(pin)
                continue
            if why is None:
                kept.append(pin)
            else:
                refused.append((pin, f"{directory / name}: {why}"))
    finally:
        os.close(fd)
    if refused:
        pin, why = refused[0]
        more = f" ({len(refused) - 1} more files were refused too)" if len(refused) > 1 else ""
        raise errors.PackageRefused(lockfile, pin.label(), why + more, tree)
    return kept, missing


@contextlib.contextmanager
def _opened_dir(name: str | Path, dir_fd: int | None) -> Iterator[int]:
    """The directory `name` (in `dir_fd`) opened without following a link as its last part."""
    fd = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    try:
        yield fd
    finally:
        os.close(fd)


def copy_verified(dir_fd: int, name: str, checksum: str) -> str | None:
    """Copy the regular file `name` in `dir_fd` into the store when its bytes hash to
    `checksum`: None when kept, else why not. FileNotFoundError when there is none."""
    try:
        fd = os.open(name, _FILE_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        raise
    except OSError as error:
        if error.errno == errno.ELOOP:  # the name is a link
            return "it is a symbolic link (only regular files are read)"
        return f"it cannot be opened ({error.strerror})"
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return "it is not a regular file"
        with store.incoming() as (handle, temporary):
            digest = hashlib.sha256()
            size = 0
            while chunk := os.read(fd, _CHUNK):
                size += len(chunk)
                if size > store.MAX_CRATE_BYTES:
                    return f"it is larger than {store.MAX_CRATE_BYTES} bytes (store.MAX_CRATE_BYTES)"
                digest.update(chunk)
                handle.write(chunk)
            handle.flush()
            if digest.hexdigest() != checksum:
                return f"its sha256 is {digest.hexdigest()}, the lockfile says {checksum}; nothing was kept"
            if store.keep_crate(temporary, checksum) is None:
                return "it changed while it was read; nothing was kept"
            return None
    except OSError as error:
        return f"reading it failed ({error.strerror})"
    finally:
        os.close(fd)


# -- the download --------------------------------------------------------------------------


def download(pin: Pin, index: str, host: HostCargo, until: float) -> None:
    """`pin`'s `.crate` from the registry at `index` into the store, or _Refused/_Unreachable."""
    assert pin.checksum is not None
    config = registry_config(index, host, until)
    url = dl_url(config.dl, pin)
    digest = hashlib.sha256()
    with store.incoming() as (handle, temporary):
        def sink(chunk: bytes) -> None:
            digest.update(chunk)
            handle.write(chunk)

        try:
            get(url, host, config.token, until, store.MAX_CRATE_BYTES, sink, "its .crate")
        except _HttpStatus as status:
            raise _Unreachable(_status_why(status.code, f"{pin.label()}'s .crate", config.token)) from None
        handle.flush()
        if digest.hexdigest() != pin.checksum:
            raise _Refused(f"its sha256 is {digest.hexdigest()}, the lockfile says "
                           f"{pin.checksum}; nothing was kept")
        if store.keep_crate(temporary, pin.checksum) is None:
            raise _Refused("the downloaded file changed before it was kept; nothing was kept")


def registry_config(index: str, host: HostCargo, until: float) -> RegistryConfig:
    """The registry's `config.json`, read once per run (cached in `host`), with the token
    its downloads carry: on `auth-required`, or when `config.json` itself needed one."""
    cached = host._configs.get(index)
    if cached is not None:
        return cached
    token: Token | None = None
    body = bytearray()
    for attempt in range(2):
        body.clear()
        try:
            get(index + "config.json", host, token, until, MAX_CONFIG_BYTES, body.extend,
                "its config.json")
            break
        except _HttpStatus as status:
            if status.code in (401, 403) and attempt == 0:
                token = host.token_for(index)  # cargo: a 401 means "authentication required"
                continue
            raise _Unreachable(_status_why(status.code, "its config.json", token)) from None
    dl, auth_required = parse_config(bytes(body))
    if auth_required and token is None:
        token = host.token_for(index)
    config = RegistryConfig(index, dl, token)
    host._configs[index] = config
    return config


def _status_why(code: int, what: str, token: Token | None) -> str:
    if code in (401, 403):
        return (f"the registry refused {what} with the token from {token.origin} (HTTP {code})"
                if token else f"the registry refused {what} without credentials (HTTP {code})")
    if code in (404, 410) and what == "its config.json":
        return (f"the registry has no config.json (HTTP {code}): only sparse registries are "
                "fetched (sparse+https://), and this URL is not one")
    if code in (404, 410):
        return f"the registry has no {what} (HTTP {code})"
    return f"the registry answered HTTP {code} for {what}"


def parse_config(data: bytes) -> tuple[str, bool]:
    """A `config.json`'s `dl` template and `auth-required`, checked, or _Unreachable."""
    try:
        value = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise _Unreachable("its config.json is not JSON") from None
    if not isinstance(value, dict):
        raise _Unreachable("its config.json is not a JSON object")
    dl = value.get("dl")
    if not isinstance(dl, str) or not dl or len(dl) > MAX_TEMPLATE_CHARS:
        raise _Unreachable("its config.json has no `dl` string of at most "
                           f"{MAX_TEMPLATE_CHARS} characters")
    auth = value.get("auth-required", False)
    if not isinstance(auth, bool):
        raise _Unreachable("its config.json's `auth-required` is not true or false")
    return dl, auth


def dl_prefix(name: str) -> str:
    """cargo's `{prefix}` of a package name: 1, 2, 3/a, ab/cd (as the name is cased)."""
    if len(name) <= 2:
        return str(len(name))
    if len(name) == 3:
        return f"3/{name[0]}"
    return f"{name[:2]}/{name[2:4]}"


def dl_url(template: str, pin: Pin) -> str:
    """The `.crate`'s URL by cargo's rules: a template with none of the markers gets
    `/{crate}/{version}/download` appended; it must be https (else _Refused)."""
    assert pin.checksum is not None
    if not any(marker in template for marker in _MARKERS):
        url = f"{template}/{pin.name}/{pin.version}/download"
    else:
        prefix = dl_prefix(pin.name)
        url = (template.replace("{crate}", pin.name).replace("{version}", pin.version)
               .replace("{prefix}", prefix).replace("{lowerprefix}", prefix.lower())
               .replace("{sha256-checksum}", pin.checksum))
    why = _not_https(url)
    if why:
        raise _Refused(f"its download URL {_short(url)!r} (the registry's dl) {why}")
    return url


def _not_https(url: str) -> str | None:
    """Why `url` is not requested (not https, does not parse, names a user), or None."""
    if not _URL.fullmatch(url):
        return "is not https (only https is fetched)" if not url.startswith("https://") \
            else "holds characters a URL does not (space, quote, backslash, control)"
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018  (a port that is not a number raises here)
    except ValueError:
        return "does not parse"
    if "@" in parts.netloc:
        return "names a user (credentials are never taken from a registry)"
    if not parts.hostname:
        return "has no host"
    return None


# -- https ---------------------------------------------------------------------------------


class _Watch(SocketDeadline):
    """The deadline of one request (socket_deadline.py). Each connection's socket is
    registered as soon as it exists (before the proxy tunnel and the TLS handshake) by a
    duplicate of it: shutdown acts on the connection, so the duplicate wakes a recv()
    blocked on the original in any phase."""

    def __init__(self, seconds: float) -> None:
        super().__init__(seconds, duplicate=True)

    def check(self) -> None:
        if self.fired:
            raise _Unreachable(f"it did not arrive within {self.seconds:.0f} s (the fetch's "
                               f"deadline, and at least {MIN_BYTES_PER_S} bytes a second after "
                               f"{NETWORK_TIMEOUT_S:.0f} s)")


def _origin(url: str) -> tuple[str, str, int]:
    parts = urllib.parse.urlsplit(url)
    return parts.scheme, (parts.hostname or "").lower(), parts.port or 443


class _Redirects(UnreadRedirectHandler):
    """Redirects to https only; a token follows one only to the same origin. The
    redirect's body is closed unread before this runs (redirects.py)."""

    def redirect_request(self, req: urllib.request.Request, fp: IO[bytes], code: int, msg: str,
                         headers: http.client.HTTPMessage, newurl: str) -> urllib.request.Request | None:
        why = _not_https(newurl)
        if why:
            try:
                where = urllib.parse.urlsplit(newurl)
                shown = f"{where.scheme}://{where.netloc}"
            except ValueError:
                shown = newurl
            raise _Refused(f"the registry redirected a download to {_short(shown)!r}, which {why}")
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        token = req.unredirected_hdrs.get("Authorization")
        if new is not None and token is not None and _origin(req.full_url) == _origin(new.full_url):
            new.add_unredirected_header("Authorization", token)
        return new


def _opener(host: HostCargo, watch: _Watch) -> urllib.request.OpenerDirector:
    """An opener through cargo's proxy or the environment's, verifying with the CA the
    host's cargo is told of, every connection registered with `watch` the moment it exists
    (socket_deadline.armed_opener: the TLS handshake under the deadline). It speaks https
    and nothing else: armed_opener has no ftp:, file: or data: handler, and its plain-http
    handler refuses every request before it connects (get() and _Redirects refuse one
    before it gets there)."""
    return armed_opener(watch.arm, _Redirects(),
                        proxies={"https": host.proxy} if host.proxy else None,
                        check_plain=_require_https, context=host.ssl_context())


def _require_https(url: str) -> None:
    """_Refused, naming `url`, unless it is one get() requests (_not_https)."""
    why = _not_https(url)
    if why:
        raise _Refused(f"{_short(url)!r} {why}")


def get(url: str, host: HostCargo, token: Token | None, until: float, limit: int,
        sink: Callable[[bytes], object], what: str) -> int:
    """GET `url` over https, its body (at most `limit` bytes) given to `sink`; how many
    bytes came. _HttpStatus for an HTTP error, _Refused for a body too large or a redirect
    that is not https, _Unreachable for the rest (the deadline included)."""
    _require_https(url)
    left = min(until - time.monotonic(), NETWORK_TIMEOUT_S + limit / MIN_BYTES_PER_S)
    if left <= 0:
        raise _Unreachable(f"the fetch's deadline passed before {what} was asked for")
    watch = _Watch(left)
    try:
        request = urllib.request.Request(url, headers={"User-Agent": USER_AGENT,
                                                       "Accept-Encoding": "identity"})
        if token is not None:
            request.add_unredirected_header("Authorization", token.value)
        try:
            response = cast(http.client.HTTPResponse,
                            _opener(host, watch).open(request, timeout=min(NETWORK_TIMEOUT_S, left)))
        except urllib.error.HTTPError as error:
            error.close()
            raise _HttpStatus(error.code) from None
        except (urllib.error.URLError, OSError, http.client.HTTPException, ValueError) as error:
            watch.check()
            reason = getattr(error, "reason", None) or error
            raise _Unreachable(f"{what} could not be fetched "
                               f"({_short(str(reason)) or type(error).__name__})") from None
        with response:
            return _body(response, watch, limit, sink, what)
    finally:
        watch.close()


def _body(response: http.client.HTTPResponse, watch: _Watch, limit: int,
          sink: Callable[[bytes], object], what: str) -> int:
    length = response.headers.get("Content-Length")
    if length is not None and length.strip().isdigit() and int(length) > limit:
        raise _Refused(f"{what} is larger than {limit} bytes (Content-Length: {int(length)})")
    started = time.monotonic()
    done = 0
    while True:
        try:
            chunk = response.read1(min(_CHUNK, limit + 1 - done))
        except (OSError, http.client.HTTPException, ValueError) as error:
            watch.check()
            raise _Unreachable(f"{what} broke off after {done} bytes "
                               f"({_short(str(error)) or type(error).__name__})") from None
        watch.check()
        if not chunk:
            return done
        done += len(chunk)
        if done > limit:
            raise _Refused(f"{what} is larger than {limit} bytes")
        sink(chunk)
        elapsed = time.monotonic() - started
        if elapsed > NETWORK_TIMEOUT_S and done < (elapsed - NETWORK_TIMEOUT_S) * MIN_BYTES_PER_S:
            raise _Unreachable(f"{what} came at less than {MIN_BYTES_PER_S} bytes a second "
                               f"({done} bytes in {elapsed:.0f} s)")
