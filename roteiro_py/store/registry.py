"""Pulling a pinned image over the OCI distribution API, with urllib only.

Guarantees:
- HTTPS, except for loopback registries (localhost, 127.0.0.0/8, ::1), which are spoken
  to over plain HTTP: that is the only way a test or a local mirror without a
  certificate can be used, and loopback traffic does not leave the machine. A token
  realm may be plain HTTP only under the same rule.
- Anonymous access first; on `401` with `WWW-Authenticate: Bearer realm,service,scope`
  a token is fetched from the realm (with Basic credentials from the Docker config when
  there are any) and the request retried once; a `Basic` challenge gets the credentials
  directly. The Authorization header is attached with `add_unredirected_header`, so a
  blob redirect to a CDN or object store never receives it.
- Nothing is trusted that is not verified: the manifest must hash to the pin, a platform
  manifest to its descriptor, each blob to its digest (see `transfer.py`). Headers such
  as Docker-Content-Digest are ignored.
- Messages name the registry URL and the digest; they never contain credentials or
  tokens.
- Redirects go to HTTPS only (plain HTTP only from a loopback URL to a loopback URL),
  and no other scheme is spoken at all: urllib's default opener follows a blob redirect
  to ftp://, whose socket the watchdog never sees (a trickling FTP greeting held a
  prefetch past DEADLINE), and to file: or data: URLs, or points the host at internal
  addresses over plain HTTP.
- Whatever the registry answers ends in a SourceError naming it (prefetch: PrefetchFailed,
  exit 3), never another exception: a token realm or a redirect `Location` that is no URL
  (`http://[::1`), a URL http.client cannot put on the wire, a token that cannot go into
  a header, a body cut short. urllib and http.client raise ValueError for the first
  three, which would reach the CLI as an internal error (exit 4); `_answer_unusable` turns
  each into a refusal, and tests/unit/store/test_registry_fuzz.py fuzzes the
  headers, token JSON and redirects against a real loopback server.
- Every request (manifest, blob, token; headers and body, redirects included) ends
  within DEADLINE seconds: a watchdog shuts the connection's socket down when it
  passes. The 60 s socket timeout alone bounds only the gap between two bytes, so a
  server trickling a byte every few seconds would hold a prefetch forever.
"""

from __future__ import annotations

import http.client
import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.client import HTTPResponse
from typing import IO, cast

from roteiro_py.redirects import UnreadRedirectHandler
from roteiro_py.reference import ImageReference, is_loopback_host
from roteiro_py.socket_deadline import SocketDeadline, armed_opener
from roteiro_py.store.auth import Credentials, credentials_for, parse_www_authenticate
from roteiro_py.store.manifest import ACCEPT, MAX_DOCUMENT, Descriptor, ManifestError, load_json
from roteiro_py.store.transfer import SourceError

#: What RFC 6750 allows in a bearer token (b64token); anything else (a newline, a
#: non-Latin-1 character) cannot go into the Authorization header of the retry.
_B64TOKEN = re.compile(r"[A-Za-z0-9._~+/-]+=*")
#: What a parser of the registry's answer raises besides the errors urllib documents:
#: ValueError (a URL urlsplit or http.client refuses, UnicodeError among them).
_UNUSABLE = (ValueError,)

#: Seconds without progress on a connection before a pull is abandoned.
TIMEOUT = 60.0
#: Seconds one request may take in full, its body included: the 754 MB toolchain layer
#: at 2 MB/s, with room to spare. A blob that needs longer is refused, naming this.
DEADLINE = 3600.0


class _Watch(SocketDeadline):
    """The deadline of one request (socket_deadline.py): a request it cut ends with an
    error or a short read, which `check` turns into the deadline's refusal."""

    def __init__(self, seconds: float, what: str, base: str) -> None:
        super().__init__(seconds)
        self.what = what
        self.base = base

    def check(self) -> None:
        if self.fired:
            raise SourceError(f"the {self.what} did not arrive from {self.base} within "
                              f"{self.seconds:g} s, the deadline of one request "
                              "(registry.DEADLINE)")

    def cancel(self) -> None:
        self.close()


def _split_url(url: str, named: Callable[[str], str]) -> urllib.parse.SplitResult:
    """`url` split, its port checked too, or SourceError saying who named it
    (`named(shown url)`: "the token realm '…' that https://r.example named").

    urlsplit raises ValueError for `http://[::1` and `.port` for `:99999`; both are the
    registry's text, and were an internal error (exit 4) where they reached urllib."""
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port that is not one
    except ValueError as exc:
        raise SourceError(f"{named(_shown(url))} is not a usable URL ({exc})") from None
    return parts


def _shown(text: str) -> str:
    """A URL or header value from the registry, bounded, for a message (PrefetchFailed
    makes it printable)."""
    return repr(text[:200] + ("..." if len(text) > 200 else ""))


def _redirect_allowed(source: str, target: str) -> bool:
    """HTTPS anywhere; plain HTTP only from a loopback URL to a loopback URL."""
    to = urllib.parse.urlsplit(target)
    if to.scheme == "https":
        return True
    origin = urllib.parse.urlsplit(source)
    return (to.scheme == "http" and origin.scheme == "http"
            and is_loopback_host(origin.hostname or "")
            and is_loopback_host(to.hostname or ""))


class _RedirectHandler(UnreadRedirectHandler):
    """urllib's redirect handling, refusing a target `_redirect_allowed` does not allow,
    and a Location that is no URL (urllib parses it before `redirect_request` sees it).
    The redirect's body is closed unread (redirects.py), or with the refusal of its Location."""

    def http_error_302(self, req: urllib.request.Request, fp: IO[bytes], code: int,
                       msg: str, headers: http.client.HTTPMessage) -> IO[bytes] | None:
        location = headers.get("location") or headers.get("uri")
        if location is not None:
            origin = urllib.parse.urlsplit(req.full_url).netloc
            try:
                _split_url(location, lambda url: f"the Location {url} that {origin} redirected to")
            except SourceError:
                fp.close()
                raise
        return super().http_error_302(req, fp, code, msg, headers)

    http_error_301 = http_error_303 = http_error_307 = http_error_308 = http_error_302

    def redirect_request(self, req: urllib.request.Request, fp: IO[bytes], code: int,
                         msg: str, headers: http.client.HTTPMessage, newurl: str,
                         ) -> urllib.request.Request | None:
        origin = urllib.parse.urlsplit(req.full_url).netloc
        where = _split_url(newurl, lambda url: f"the Location {url} that {origin} redirected to")
        if not _redirect_allowed(req.full_url, newurl):
            raise SourceError(
                f"{origin} redirected to {where.scheme}://{where.netloc}, which is not an "
                "HTTPS URL (plain HTTP is followed only from a loopback registry to loopback)")
        return super().redirect_request(req, fp, code, msg, headers, newurl)


def _opener(watch: _Watch) -> urllib.request.OpenerDirector:
    """An opener that speaks HTTP(S) only, each connection's socket registered with
    `watch` the moment it exists (socket_deadline.armed_opener: the TLS handshake under
    the deadline too; it was armed only once connected).

    Built by hand rather than with build_opener, which adds FTP, file: and data: handlers
    (see the module docstring). No proxies from the environment: an HTTP(S)_PROXY would
    see every request, and for loopback registries would break them. Redirects are
    followed (blobs) through `_RedirectHandler`; each new connection is watched too.
    """

    return armed_opener(watch.arm, _RedirectHandler(), proxies={})


class _Watched:
    """A response body read under its request's watch."""

    def __init__(self, response: HTTPResponse, watch: _Watch) -> None:
        self.response = response
        self.watch = watch

    def read(self, size: int = -1) -> bytes:
        """`size` bytes (1 MiB when unsized) or fewer at the end of the body.

        Read in read1() steps, each one recv at most, so the deadline is checked
        between steps even when the server sends a byte at a time.
        """
        want = size if size > 0 else 1 << 20
        parts: list[bytes] = []
        got = 0
        while got < want:
            try:
                chunk = self.response.read1(want - got)
            except (OSError, http.client.HTTPException, *_UNUSABLE) as exc:
                self.watch.check()
                raise SourceError(f"the {self.watch.what} from {self.watch.base} was cut "
                                  f"short: {exc or type(exc).__name__}") from None
            self.watch.check()
            if not chunk:
                break
            parts.append(chunk)
            got += len(chunk)
        return b"".join(parts)


def base_url(ref: ImageReference) -> str:
    scheme = "http" if ref.is_loopback else "https"
    return f"{scheme}://{ref.registry}"


class RegistrySource:
    """One repository on one registry, with at most one bearer token (pull scope)."""

    def __init__(self, ref: ImageReference, credentials: Credentials | None = None,
                 *, use_docker_config: bool = True, deadline: float | None = None) -> None:
        self.ref = ref
        self.base = base_url(ref)
        self.description = self.base
        self.credentials = credentials if credentials is not None else (
            credentials_for(ref.registry) if use_docker_config else None)
        self._authorization: str | None = None
        self.deadline = DEADLINE if deadline is None else deadline

    # -- BlobSource --------------------------------------------------------------------

    def fetch_document(self, digest: str) -> tuple[bytes, str | None]:
        url = f"{self.base}/v2/{self.ref.repository}/manifests/{digest}"
        with self._request(url, accept=ACCEPT, what=f"manifest {digest}") as body:
            data = body.read(MAX_DOCUMENT + 1)
            media_type = body.response.headers.get("Content-Type")
        return data, media_type.split(";")[0].strip() if media_type else None

    @contextmanager
    def open_blob(self, desc: Descriptor) -> Iterator[IO[bytes]]:
        url = f"{self.base}/v2/{self.ref.repository}/blobs/{desc.digest}"
        with self._request(url, accept="*/*", what=f"blob {desc.digest}") as body:
            yield cast(IO[bytes], body)

    # -- HTTP --------------------------------------------------------------------------

    @contextmanager
    def _request(self, url: str, *, accept: str, what: str) -> Iterator[_Watched]:
        """One GET (and its auth retry) under one deadline, its body read through `_Watched`."""
        watch = _Watch(self.deadline, what, self.base)
        try:
            with self._get(url, accept=accept, what=what, watch=watch) as response:
                yield _Watched(response, watch)
        finally:
            watch.cancel()

    def _get(self, url: str, *, accept: str, what: str, watch: _Watch) -> HTTPResponse:
        opener = _opener(watch)
        for attempt in range(2):
            request = urllib.request.Request(url, headers={"Accept": accept})
            if self._authorization:
                request.add_unredirected_header("Authorization", self._authorization)
            try:
                return cast(HTTPResponse, opener.open(request, timeout=min(TIMEOUT,
                                                                           self.deadline)))
            except urllib.error.HTTPError as exc:
                exc.close()
                if exc.code == 401 and attempt == 0:
                    self._authenticate(exc.headers.get("WWW-Authenticate", ""), watch)
                    continue
                raise SourceError(self._http_failure(exc.code, what)) from None
            except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
                watch.check()
                reason = getattr(exc, "reason", exc)
                raise SourceError(f"could not reach {self.base} for the {what}: "
                                  f"{reason}") from None
            except _UNUSABLE as exc:
                watch.check()
                raise SourceError(_answer_unusable(self.base, f"the {what}", exc)) from None
        raise SourceError(self._http_failure(401, what))

    def _http_failure(self, code: int, what: str) -> str:
        if code == 404:
            return (f"the registry has no {what} in {self.ref.repository} (HTTP 404); "
                    "check the digest in the reference")
        if code in (401, 403):
            who = (f"with the credentials for {self.ref.registry} from the Docker config"
                   if self.credentials else "anonymously (no credentials for "
                   f"{self.ref.registry} in the Docker config; credential helpers are "
                   "not used)")
            return f"the registry refused the {what} {who} (HTTP {code})"
        return f"the registry answered HTTP {code} for the {what}"

    def _authenticate(self, header: str, watch: _Watch) -> None:
        challenges = {c.scheme: c for c in parse_www_authenticate(header)}
        if "bearer" in challenges:
            self._authorization = "Bearer " + self._token(challenges["bearer"].params, watch)
        elif "basic" in challenges and self.credentials:
            self._authorization = self.credentials.basic_header()
        else:
            raise SourceError(f"the registry {self.base} asks for authentication this "
                              "client cannot give" + ("" if self.credentials else
                              f" (no credentials for {self.ref.registry} in the Docker "
                              "config)"))

    def _token(self, params: dict[str, str], watch: _Watch) -> str:
        realm = params.get("realm", "")
        parsed = _split_url(realm, lambda url: f"the token realm {url} that {self.base} named")
        if parsed.scheme != "https" and not (
            parsed.scheme == "http" and is_loopback_host(parsed.hostname or "")
        ):
            raise SourceError(f"the registry's token realm {_shown(realm)} is not an HTTPS URL")
        query = {"scope": params.get("scope") or f"repository:{self.ref.repository}:pull"}
        if "service" in params:
            query["service"] = params["service"]
        url = realm + ("&" if parsed.query else "?") + urllib.parse.urlencode(query)
        request = urllib.request.Request(url, headers={"Accept": "application/json"})
        if self.credentials:
            request.add_unredirected_header("Authorization", self.credentials.basic_header())
        try:
            with _opener(watch).open(request, timeout=min(TIMEOUT, self.deadline)) as response:
                body = load_json(_Watched(response, watch).read(1 << 20))
        except urllib.error.HTTPError as exc:
            exc.close()
            raise SourceError(f"the token server {parsed.scheme}://{parsed.netloc} refused "
                              f"a pull token (HTTP {exc.code})") from None
        except (urllib.error.URLError, OSError, ManifestError,
                http.client.HTTPException) as exc:
            watch.check()
            raise SourceError(f"could not get a pull token from {parsed.scheme}://"
                              f"{parsed.netloc}: {getattr(exc, 'reason', exc)}") from None
        except _UNUSABLE as exc:
            watch.check()
            raise SourceError(_answer_unusable(f"{parsed.scheme}://{parsed.netloc}",
                                               "a pull token", exc)) from None
        token = body.get("token") or body.get("access_token") if isinstance(body, dict) else None
        if not isinstance(token, str) or not token:
            raise SourceError(f"the token server {parsed.scheme}://{parsed.netloc} "
                              "returned no token")
        if not _B64TOKEN.fullmatch(token):
            raise SourceError(f"the token server {parsed.scheme}://{parsed.netloc} returned "
                              "a token that is not a bearer token (RFC 6750: letters, digits "
                              "and -._~+/ only)")
        return token


def _answer_unusable(server: str, what: str, exc: ValueError) -> str:
    """Why a ValueError from urllib or http.client means the server's answer, not us: a
    redirect or realm URL it cannot parse, a URL it cannot send (a control character, a
    non-ASCII byte)."""
    return (f"{server} answered the request for {what} with a URL or header this client "
            f"cannot use: {str(exc)[:200] or type(exc).__name__}")
