"""A hostile registry: redirects to other schemes or hosts, and a token server's JSON.

Real HTTP servers in threads (stdlib http.server); the docker registry of the integration
tests cannot be made to redirect to ftp:// or answer a token request with a JSON bomb.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from roteiro_py.errors import PrefetchFailed
from roteiro_py.store import RegistrySourceSpec, Store, prefetch, registry
from roteiro_py.store.manifest import OCI_MANIFEST
from tests.unit.store.store_images import Image, make_image, sha

#: Answers one request itself (True) or leaves it to the blob server (False).
Route = Callable[[BaseHTTPRequestHandler], bool]


class TricklingFtp:
    """An FTP control channel that never finishes its greeting: a `220-` line every 0.2 s."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(4)
        self.port = self.sock.getsockname()[1]
        self.stop = threading.Event()
        self.connected = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connected.set()
            threading.Thread(target=self._trickle, args=(conn,), daemon=True).start()

    def _trickle(self, conn: socket.socket) -> None:
        try:
            while not self.stop.is_set():
                conn.sendall(b"220-hello\r\n")
                time.sleep(0.2)
        except OSError:
            pass
        finally:
            conn.close()

    def close(self) -> None:
        self.stop.set()
        self.sock.close()


@contextmanager
def serve(image: Image, route: Route = lambda handler: False,
          host: str = "127.0.0.1") -> Iterator[tuple[int, list[str]]]:
    """A registry serving `image`'s blobs, `route` first; yields its port and the paths asked."""
    blobs = image.blobs()
    asked: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            asked.append(self.path)
            if route(self):
                return
            data = blobs.get(self.path.rsplit("/", 1)[-1])
            if data is None:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", OCI_MANIFEST)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    httpd = ThreadingHTTPServer((host, 0), Handler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield httpd.server_address[1], asked
    finally:
        httpd.shutdown()
        httpd.server_close()


def redirect_layer(image: Image, location: str) -> Route:
    """Sends every blob but the config elsewhere ("to our CDN")."""
    def route(handler: BaseHTTPRequestHandler) -> bool:
        if "/blobs/" not in handler.path or handler.path.endswith(sha(image.config)):
            return False
        handler.send_response(302)
        handler.send_header("Location", location)
        handler.send_header("Content-Length", "0")
        handler.end_headers()
        return True
    return route


def pull_in_thread(store: Store, ref: str, seconds: float) -> list[BaseException | str]:
    """prefetch in a worker; its outcome, or an empty list if it is still running."""
    outcome: list[BaseException | str] = []

    def pull() -> None:
        try:
            prefetch(store, ref, RegistrySourceSpec(), allow_download=True)
            outcome.append("provisioned")
        except BaseException as exc:  # noqa: BLE001 - the test inspects it
            outcome.append(exc)

    worker = threading.Thread(target=pull, daemon=True)
    worker.start()
    worker.join(seconds)
    return outcome


def test_a_blob_redirect_to_ftp_is_refused_and_ends_within_the_deadline(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """urllib's default opener followed it, and the watchdog never saw the FTP socket:
    a greeting trickled every 0.2 s held the pull past a 1 s DEADLINE indefinitely."""
    image = make_image({"a": b"L" * 4000})
    ftp = TricklingFtp()
    monkeypatch.setattr(registry, "DEADLINE", 1.0)
    try:
        with serve(image, redirect_layer(image, f"ftp://127.0.0.1:{ftp.port}/layer")) as (
                port, _):
            outcome = pull_in_thread(Store(tmp_path / "store"),
                                     f"127.0.0.1:{port}/team/clippy@{image.digest}", 10)
        assert outcome, "the pull still runs 10 s after a 1 s deadline"
        assert isinstance(outcome[0], PrefetchFailed), outcome
        assert f"redirected to ftp://127.0.0.1:{ftp.port}" in str(outcome[0])
        assert not ftp.connected.is_set(), "the host spoke FTP"
    finally:
        ftp.close()


def test_control_a_blob_redirect_from_loopback_to_loopback_is_followed(tmp_path: Path) -> None:
    image = make_image({"a": b"L" * 4000})
    with serve(image) as (cdn, cdn_asked):
        location = f"http://127.0.0.1:{cdn}/v2/team/clippy/blobs/"

        def to_same_blob(handler: BaseHTTPRequestHandler) -> bool:
            return redirect_layer(image, location + handler.path.rsplit("/", 1)[-1])(handler)

        with serve(image, to_same_blob) as (port, _):
            outcome = pull_in_thread(Store(tmp_path / "store"),
                                     f"127.0.0.1:{port}/team/clippy@{image.digest}", 10)
    assert outcome == ["provisioned"]
    assert any("/blobs/" in path for path in cdn_asked), "the redirect was followed"


def _outward_address() -> str:
    """This machine's address on a non-loopback interface (no packet is sent)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect(("192.0.2.1", 9))
        return str(probe.getsockname()[0])


def test_a_redirect_from_loopback_to_plain_http_elsewhere_is_refused(tmp_path: Path) -> None:
    """A loopback registry may use plain HTTP, but must not send the host to an internal
    address over it: only HTTPS leaves loopback."""
    address = _outward_address()
    if address.startswith("127."):
        pytest.skip("no non-loopback interface to redirect to")
    image = make_image({"a": b"L" * 4000})
    with serve(image, host="0.0.0.0") as (inside, inside_asked):  # noqa: S104 - the target
        location = f"http://{address}:{inside}/v2/team/clippy/blobs/"

        def to_inside(handler: BaseHTTPRequestHandler) -> bool:
            return redirect_layer(image, location + handler.path.rsplit("/", 1)[-1])(handler)

        with serve(image, to_inside) as (port, _):
            outcome = pull_in_thread(Store(tmp_path / "store"),
                                     f"127.0.0.1:{port}/team/clippy@{image.digest}", 10)
    assert isinstance(outcome[0], PrefetchFailed), outcome
    assert f"redirected to http://{address}:{inside}" in str(outcome[0])
    assert inside_asked == [], "the host was sent to a non-loopback address over plain HTTP"


def raw_redirect(image: Image, head: bytes, closed: threading.Event) -> Route:
    """Every blob but the config answered with `head` (a redirect's status line, headers and
    what follows them) as raw bytes; `closed` is set once the client closes that connection.

    The server sees the close: a plain-HTTP socket left to the garbage collector gives no
    ResourceWarning (its makefile() closes it quietly), so the client side cannot tell."""
    def route(handler: BaseHTTPRequestHandler) -> bool:
        if "/blobs/" not in handler.path or handler.path.endswith(sha(image.config)):
            return False
        handler.wfile.write(head)
        handler.wfile.flush()
        handler.close_connection = True
        handler.connection.settimeout(10)
        try:
            if handler.connection.recv(1) == b"":
                closed.set()
        except OSError:
            pass
        return True
    return route


def test_a_redirect_whose_location_does_not_parse_closes_its_connection(tmp_path: Path) -> None:
    """urllib parses the Location before `redirect_request` sees it; a ValueError there left
    the reply and its socket open for as long as the error was kept (here: held)."""
    image = make_image({"a": b"L" * 4000})
    closed = threading.Event()
    head = b"HTTP/1.1 302 Found\r\nLocation: https://[::1/\r\nContent-Length: 5\r\n\r\nabcde"
    with serve(image, raw_redirect(image, head, closed)) as (port, _):
        outcome = pull_in_thread(Store(tmp_path / "store"),
                                 f"127.0.0.1:{port}/team/clippy@{image.digest}", 10)
        assert isinstance(outcome[0], PrefetchFailed), outcome
        assert "is not a usable URL" in str(outcome[0])
        assert closed.wait(5), "the redirect's connection is still open, its refusal held"


@pytest.mark.parametrize("framing", [b"Content-Length: 99999999999\r\n\r\n",
                                     b"Transfer-Encoding: chunked\r\n\r\n5\r\nab"],
                         ids=["100-GB", "broken-chunk"])
def test_a_redirects_body_is_never_read(tmp_path: Path, framing: bytes) -> None:
    """urllib read a redirect's body whole before following it: a 100 GB Content-Length was
    a 100 GB allocation (MemoryError, an internal error), a chunk that broke off failed the
    pull. The body is closed unread (the connection with it) and the redirect followed."""
    image = make_image({"a": b"L" * 4000})
    closed = threading.Event()

    def elsewhere(handler: BaseHTTPRequestHandler) -> bool:
        location = b"/v2/team/clippy/cdn/" + handler.path.rsplit("/", 1)[-1].encode()
        head = b"HTTP/1.1 302 Found\r\nLocation: " + location + b"\r\n" + framing
        return raw_redirect(image, head, closed)(handler)

    with serve(image, elsewhere) as (port, asked):
        outcome = pull_in_thread(Store(tmp_path / "store"),
                                 f"127.0.0.1:{port}/team/clippy@{image.digest}", 20)
        assert outcome == ["provisioned"], outcome
        assert any("/cdn/" in path for path in asked), "the redirect was followed"
        assert closed.wait(5), "the redirect's connection was left open"


def test_a_deeply_nested_token_response_is_a_refusal_not_a_crash(tmp_path: Path) -> None:
    """json.loads with ValueError caught raised RecursionError here (exit 4)."""
    image = make_image({"a": b"x"})
    token_body = {"bomb": b"[" * 200_000, "control": b'{"token": "t0k"}'}
    for kind, body in token_body.items():
        def route(handler: BaseHTTPRequestHandler, body: bytes = body) -> bool:
            if handler.path.startswith("/token"):
                handler.send_response(200)
                handler.send_header("Content-Length", str(len(body)))
                handler.end_headers()
                handler.wfile.write(body)
                return True
            if handler.headers.get("Authorization") == "Bearer t0k":
                return False
            port = handler.server.server_address[1]
            handler.send_response(401)
            handler.send_header("WWW-Authenticate",
                                f'Bearer realm="http://127.0.0.1:{port}/token",service="r"')
            handler.send_header("Content-Length", "0")
            handler.end_headers()
            return True

        with serve(image, route) as (port, _):
            outcome = pull_in_thread(Store(tmp_path / kind),
                                     f"127.0.0.1:{port}/team/clippy@{image.digest}", 30)
        if kind == "control":
            assert outcome == ["provisioned"], outcome
        else:
            assert isinstance(outcome[0], PrefetchFailed), outcome
            assert "not JSON" in str(outcome[0])
