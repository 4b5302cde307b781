"""The GitHub REST API as `review` speaks it: a token that goes nowhere else, bounded.

What it guarantees:
- https only, to the one API origin the runner names (GITHUB_API_URL). Plain http is
  spoken only to a loopback address (127.0.0.0/8, ::1, as a literal): the tests' stand-in
  for the API (tests/unit/commands/test_review.py) runs there, and nothing on loopback
  is a network path a token could leak over. Any other URL is refused before a byte is
  sent.
- The token is sent only as the Authorization of a request to that origin: it is an
  unredirected header, put back on a redirect only when the redirect stays on the same
  origin; a redirect anywhere else is refused (not followed without it: nothing the
  review needs lives elsewhere). Only a GET is redirected: a POST's redirect is an error,
  never followed as a GET without its body (urllib's way) and called posted. It is never
  in a message, a log or a repr (`Token`).
- Every request ends by its deadline (REQUEST_TIMEOUT_S, every phase: a watchdog shuts
  its socket down, socket_deadline.py), and at most MAX_RESPONSE_BYTES of an answer is
  read; a redirect's body is closed unread (redirects.py).
- An answer is JSON or nothing: `ApiError` carries the status and at most a short,
  sanitised phrase of GitHub's `message`, never the body.
"""

from __future__ import annotations

import http.client
import ipaddress
import json
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import IO, Any

from roteiro_py.redirects import UnreadRedirectHandler
from roteiro_py.socket_deadline import SocketDeadline, armed_opener
from roteiro_py.untrusted import sanitise

#: Seconds one request may take, connection to last byte.
REQUEST_TIMEOUT_S = 60.0
#: The largest answer read (a page of 100 review comments with long bodies is ~1 MiB).
MAX_RESPONSE_BYTES = 16 * 1024 * 1024
#: Characters of GitHub's `message` quoted in an error.
_MESSAGE_CHARS = 200
USER_AGENT = "pylint-sandbox (commands/github_api.py)"


class Token:
    """The API token; its repr never shows it."""

    __slots__ = ("value",)

    def __init__(self, value: str) -> None:
        self.value = value

    def __repr__(self) -> str:
        return "<token>"


class ApiError(Exception):
    """A request that did not succeed: `status` is the HTTP status (0: no answer)."""

    def __init__(self, status: int, why: str) -> None:
        super().__init__(why)
        self.status = status
        self.why = why


def _loopback(host: str) -> bool:
    """An IP literal on loopback; never a name (`localhost` is whatever /etc/hosts says)."""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def origin(url: str) -> tuple[str, str, int]:
    """(scheme, host, port) of `url`, or ValueError when it is not one we speak to."""
    parts = urllib.parse.urlsplit(url)
    host = (parts.hostname or "").lower()
    if parts.scheme == "https" and host:
        return "https", host, parts.port or 443
    if parts.scheme == "http" and _loopback(host):  # the tests' stand-in only: see above
        return "http", host, parts.port or 80
    raise ValueError("not https (plain http only to a loopback address)")


class _Redirects(UnreadRedirectHandler):
    """A redirect is followed only on the API's origin, the token with it."""

    def redirect_request(self, req: urllib.request.Request, fp: IO[bytes], code: int, msg: str,
                         headers: http.client.HTTPMessage, newurl: str) -> urllib.request.Request | None:
        try:
            same = origin(newurl) == origin(req.full_url)
        except ValueError:
            same = False
        if not same:
            raise ApiError(code, f"the API redirected to another origin (HTTP {code}); not followed")
        if req.get_method() not in ("GET", "HEAD"):
            # urllib would follow a 301/302/303 of a POST with a GET, its body dropped: the
            # review never sent, and that GET's answer read as GitHub's acceptance of it
            raise ApiError(code, f"the API redirected a {req.get_method()} (HTTP {code}); not followed")
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        token = req.unredirected_hdrs.get("Authorization")
        if new is not None and token is not None:
            new.add_unredirected_header("Authorization", token)
        return new


class Api:
    """Requests to one API origin (`base`, e.g. https://api.github.com) with `token`."""

    def __init__(self, base: str, token: Token) -> None:
        origin(base)  # ValueError: the caller names the setting
        self.base = base.rstrip("/")
        self.token = token

    def __repr__(self) -> str:
        return f"Api({self.base!r})"

    def request(self, method: str, path: str, body: Any = None) -> Any:
        """`method` `path` (below `base`) with `body` as JSON; the answer's JSON (None
        when empty), or ApiError."""
        watch = SocketDeadline(REQUEST_TIMEOUT_S, duplicate=True)
        try:
            return self._request(method, path, body, watch)
        finally:
            watch.close()

    def _opener(self, watch: SocketDeadline) -> urllib.request.OpenerDirector:
        # each socket armed the moment it exists; plain http to loopback only, redirects
        # included; no proxy: the token goes to the API's origin and to no proxy in between
        return armed_opener(watch.arm, _Redirects(), proxies={}, check_plain=origin)

    def _request(self, method: str, path: str, body: Any, watch: SocketDeadline) -> Any:
        url = self.base + path
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(url, data=data, method=method, headers={
            "Accept": "application/vnd.github+json", "X-GitHub-Api-Version": "2022-11-28",
            "User-Agent": USER_AGENT, "Accept-Encoding": "identity",
            **({"Content-Type": "application/json"} if data is not None else {})})
        request.add_unredirected_header("Authorization", f"Bearer {self.token.value}")
        started = time.monotonic()
        try:
            response = self._opener(watch).open(request, timeout=REQUEST_TIMEOUT_S)
        except urllib.error.HTTPError as error:
            with error:
                raise ApiError(error.code, _explained(error.code, _read(error, watch))) from None
        except ApiError:
            raise
        except (urllib.error.URLError, OSError, http.client.HTTPException, ValueError) as error:
            reason = "its deadline passed" if watch.fired else type(error).__name__
            raise ApiError(0, f"{method} {path} got no answer ({reason}, after "
                              f"{time.monotonic() - started:.0f} s)") from None
        with response:
            raw = _read(response, watch)
        try:
            return json.loads(raw) if raw.strip() else None
        except (ValueError, RecursionError):  # nested past the parser's depth: not an answer
            raise ApiError(response.status, f"{method} {path} answered with something that is not JSON") from None


def _read(response: IO[bytes], watch: SocketDeadline) -> bytes:
    """At most MAX_RESPONSE_BYTES of the body, or ApiError."""
    try:
        data = response.read(MAX_RESPONSE_BYTES + 1)
    except (OSError, http.client.HTTPException, ValueError):
        raise ApiError(0, "the answer broke off" + (" at its deadline" if watch.fired else "")) from None
    if len(data) > MAX_RESPONSE_BYTES:
        raise ApiError(0, f"the answer is larger than {MAX_RESPONSE_BYTES} bytes")
    return data


def _explained(status: int, raw: bytes) -> str:
    """HTTP `status` and GitHub's `message`, short and sanitised (never the body)."""
    message = ""
    try:
        decoded = json.loads(raw)
        if isinstance(decoded, dict) and isinstance(decoded.get("message"), str):
            message = sanitise(decoded["message"], limit=_MESSAGE_CHARS)
    except (ValueError, RecursionError):  # nested past the parser's depth: no message
        pass
    return f"HTTP {status}" + (f": {message}" if message else "")
