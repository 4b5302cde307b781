"""A loopback HTTPS server for tests: a real TLS stack, a CA passed the documented way.

The API, kept small on purpose (the registry and git tests share it):

- `make_tls(directory) -> Tls`: a self-signed CA (`tls.ca_pem`, what a client is given:
  `CARGO_HTTP_CAINFO`, `GIT_SSL_CAINFO`, `SSL_CERT_FILE`) and a server certificate it
  signed for `127.0.0.1`, `::1` and `localhost`. EC P-256: made in milliseconds.
- `serve(root, tls, routes=None) -> HttpsServer` (a context manager): serves the files
  under `root` (GET/HEAD) on `https://127.0.0.1:<port>`. `routes` maps a path prefix to
  a `Route`, called with the live `BaseHTTPRequestHandler` (read `.command`, `.path`,
  `.headers`, `.rfile`; answer on `.wfile` or with `send_response`...) before any file is
  looked up, for every method; it returns False to fall through to the files. The
  longest matching prefix wins; `server.route(prefix, handler)` adds one later.
- `server.url` (`https://127.0.0.1:<port>`), `server.url_for(host)` (the same server
  by another name: `localhost` is another host to a client, which is how a test makes a
  cross-host redirect), `server.log` (every request, `Logged`), `server.requests(path)`,
  `server.stopping` (an Event a slow route polls so the server can close).

Nothing here reaches beyond loopback. A handshake the client refuses (an unknown CA) is
recorded in `server.failures`, never printed: pytest turns a thread's stray exception
into an error.
"""

from __future__ import annotations

import datetime
import ipaddress
import socket
import ssl
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

#: A route: given the request's handler, answer it and return True, or return False.
Route = Callable[[BaseHTTPRequestHandler], bool]


@dataclass(frozen=True)
class Tls:
    """A CA and the server certificate it signed (PEM files in one directory)."""

    ca_pem: Path
    cert_pem: Path
    key_pem: Path

    def server_context(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.cert_pem, self.key_pem)
        return context


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def make_tls(directory: Path) -> Tls:
    """A new CA and a server certificate for 127.0.0.1, ::1 and localhost, in `directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    start, end = now - datetime.timedelta(days=1), now + datetime.timedelta(days=30)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (x509.CertificateBuilder().subject_name(_name("roteiro test CA")).issuer_name(_name("roteiro test CA"))
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(start).not_valid_after(end)
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False,
                                       data_encipherment=False, key_agreement=False,
                                       encipher_only=False, decipher_only=False), critical=True)
          .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    names = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
             x509.IPAddress(ipaddress.ip_address("::1"))]
    cert = (x509.CertificateBuilder().subject_name(_name("localhost")).issuer_name(ca.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(start).not_valid_after(end)
            .add_extension(x509.SubjectAlternativeName(names), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                           critical=False)
            .sign(ca_key, hashes.SHA256()))
    tls = Tls(directory / "ca.pem", directory / "server.pem", directory / "server.key")
    tls.ca_pem.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    tls.cert_pem.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    tls.key_pem.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                              serialization.PrivateFormat.PKCS8,
                                              serialization.NoEncryption()))
    return tls


@dataclass(frozen=True)
class Logged:
    """One request as the server saw it (headers with lower-case names)."""

    method: str
    path: str
    headers: dict[str, str]

    @property
    def host(self) -> str:
        return self.headers.get("host", "")


@dataclass
class HttpsServer:
    port: int
    routes: dict[str, Route]
    log: list[Logged] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    stopping: threading.Event = field(default_factory=threading.Event)

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def url_for(self, host: str) -> str:
        return f"https://{host}:{self.port}"

    def route(self, prefix: str, handler: Route) -> None:
        self.routes[prefix] = handler

    def requests(self, path: str | None = None) -> list[Logged]:
        """The requests logged so far, only those for `path` (without the query) if given."""
        return [r for r in list(self.log) if path is None or r.path.split("?")[0] == path]


def _handler(root: Path, state: HttpsServer) -> type[SimpleHTTPRequestHandler]:
    class Handler(SimpleHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, directory=str(root), **kwargs)

        def parse_request(self) -> bool:
            if not super().parse_request():
                return False
            state.log.append(Logged(self.command, self.path,
                                    {k.lower(): v for k, v in self.headers.items()}))
            return True

        def _routed(self) -> bool:
            path = self.path.split("?")[0]
            for prefix in sorted(state.routes, key=len, reverse=True):
                if path.startswith(prefix):
                    return state.routes[prefix](self)
            return False

        def do_GET(self) -> None:
            if not self._routed():
                super().do_GET()

        def do_HEAD(self) -> None:
            if not self._routed():
                super().do_HEAD()

        def do_POST(self) -> None:
            if not self._routed():
                self.send_error(405)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False  # a route still trickling must not hold the test's end

    def __init__(self, handler: type[BaseHTTPRequestHandler], context: ssl.SSLContext,
                 state: HttpsServer) -> None:
        self.context = context
        self.state = state
        super().__init__(("127.0.0.1", 0), handler)

    def finish_request(self, request: Any, client_address: Any) -> None:
        # The handshake runs here, in the request's own thread: one client stalling in it
        # does not hold the accept loop.
        try:
            request.settimeout(30)
            tls = self.context.wrap_socket(request, server_side=True)
        except (OSError, ssl.SSLError) as error:
            self.state.failures.append(f"handshake: {error}")
            return
        try:
            super().finish_request(tls, client_address)
        finally:
            with suppress(OSError):
                tls.close()

    def handle_error(self, request: Any, client_address: Any) -> None:
        self.state.failures.append(repr(sys.exc_info()[1]))


@contextmanager
def serve(root: Path, tls: Tls, routes: dict[str, Route] | None = None) -> Iterator[HttpsServer]:
    """Serve `root` (and `routes`) over HTTPS on 127.0.0.1 until the block ends."""
    state = HttpsServer(0, dict(routes or {}))
    server = _Server(_handler(root, state), tls.server_context(), state)
    state.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                              name="https-server", daemon=True)
    thread.start()
    try:
        yield state
    finally:
        state.stopping.set()
        server.shutdown()
        server.server_close()
        thread.join(10)


def free_port() -> int:
    """A loopback port nothing listens on (bound, then closed): an unreachable registry."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
