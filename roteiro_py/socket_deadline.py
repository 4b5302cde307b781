"""A deadline over one network request: when it passes, every socket of the request is
shut down, so a read blocked in any phase (connect, proxy tunnel, TLS handshake, headers,
body) returns at once instead of waiting on a server that trickles or says nothing.

Shutting a socket down wakes a recv() blocked in another thread (close() does not). The
caller registers each connection's socket as soon as it exists (`arm`) and, when a read
fails or ends short, asks `fired` whether the deadline is why, naming its own refusal.
Shared by the image registry client (store/registry.py), the crate fetcher
(cargo/registry.py), Rust's distribution (image/rust_dist.py), the Debian archive
(vm/assets/debian_archive.py) and the GitHub API
(commands/github_api.py); `armed_connection` is the one connection class that arms its
socket as it is made, and `armed_opener` the one opener the five build on. Imports
nothing of ours.
"""

from __future__ import annotations

import contextlib
import http.client
import socket
import ssl
import threading
import urllib.request
from collections.abc import Callable
from typing import Any, cast


class SocketDeadline:
    """Shuts down every socket `arm`ed for one request once `seconds` have passed.

    `duplicate`: register a duplicate of each socket (closed by `close`), for a caller
    whose connection object may close and replace the original (a proxy tunnel)."""

    def __init__(self, seconds: float, *, duplicate: bool = False) -> None:
        self.seconds = seconds
        self.fired = False
        self._duplicate = duplicate
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._timer = threading.Timer(max(seconds, 0.0), self._fire)
        self._timer.daemon = True
        self._timer.start()

    def arm(self, sock: socket.socket) -> None:
        with self._lock:
            held = sock.dup() if self._duplicate else sock
            self._sockets.append(held)
            if self.fired:
                shutdown(held)

    def _fire(self) -> None:
        with self._lock:
            self.fired = True
            for sock in self._sockets:
                shutdown(sock)

    def close(self) -> None:
        """Stop the timer; close the duplicates this made (never a caller's own socket)."""
        self._timer.cancel()
        with self._lock:
            if self._duplicate:
                for sock in self._sockets:
                    sock.close()
            self._sockets.clear()


def shutdown(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):  # already closed by its connection
        sock.shutdown(socket.SHUT_RDWR)


def armed_connection(base: type[http.client.HTTPConnection],
                     arm: Callable[[socket.socket], None]) -> type[http.client.HTTPConnection]:
    """`base` whose socket is given to `arm` (a SocketDeadline's, or a caller's own watch)
    the moment it exists, before any byte of the TLS handshake: the handshake and every
    read after it end at the deadline, not only the reads urllib times out."""

    class Armed(base):  # type: ignore[valid-type,misc]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            create: Callable[..., socket.socket] = self._create_connection  # type: ignore[has-type]

            def armed(*a: Any, **k: Any) -> socket.socket:
                sock = create(*a, **k)
                arm(sock)
                return sock

            self._create_connection = armed

    return cast(type[http.client.HTTPConnection], Armed)


def armed_opener(arm: Callable[[socket.socket], None], redirects: urllib.request.BaseHandler, *,
                 proxies: dict[str, str] | None = None,
                 check_plain: Callable[[str], object] | None = None,
                 context: ssl.SSLContext | None = None) -> urllib.request.OpenerDirector:
    """An opener that speaks HTTP and HTTPS only (build_opener would add ftp:, file: and
    data: handlers), each connection's socket given to `arm` the moment it exists
    (armed_connection: the TLS handshake and every read under the deadline), redirects
    handled by the caller's `redirects` (each new connection armed too). `proxies` as
    urllib.request.ProxyHandler takes them: None, the environment's; {}, none.
    `check_plain` is called with the URL of every plain-http request, redirects
    included, before it is opened (it raises to refuse). `context`: the TLS context of
    every HTTPS connection (the crate fetcher's verifies with the CA the host's cargo is
    told of); None, Python's default."""
    plain = armed_connection(http.client.HTTPConnection, arm)
    tls = armed_connection(http.client.HTTPSConnection, arm)

    class Http(urllib.request.HTTPHandler):
        def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
            if check_plain is not None:
                check_plain(req.full_url)
            return self.do_open(plain, req)

    class Https(urllib.request.HTTPSHandler):
        def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
            return self.do_open(tls, req, context=context)

    opener = urllib.request.OpenerDirector()
    for handler in (urllib.request.ProxyHandler(proxies), urllib.request.UnknownHandler(),
                    Http(), Https(), urllib.request.HTTPDefaultErrorHandler(), redirects,
                    urllib.request.HTTPErrorProcessor()):
        opener.add_handler(handler)
    return opener
