"""A registry that trickles: every request ends within registry.DEADLINE.

A real HTTP server on loopback (stdlib http.server in a thread) speaks the two GETs a
pull makes; `slow` decides which response it sends a byte every 0.2 s. The docker
registry used by the integration tests cannot be made to trickle, hence this server.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from roteiro_py.errors import PrefetchFailed
from roteiro_py.store import RegistrySourceSpec, Store, prefetch, registry
from roteiro_py.store.manifest import OCI_MANIFEST
from tests.unit.store.store_images import Image, make_image, sha

TRICKLE = 0.2


class Server:
    def __init__(self, image: Image) -> None:
        self.blobs = image.blobs()
        self.slow: str | None = None  # "body:<digest>" or "headers"
        self.stop = threading.Event()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                digest = self.path.rsplit("/", 1)[-1]
                data = owner.blobs.get(digest)
                if data is None:
                    self.send_error(404)
                    return
                head = (f"HTTP/1.1 200 OK\r\nContent-Length: {len(data)}\r\n"
                        f"Content-Type: {OCI_MANIFEST}\r\nConnection: close\r\n\r\n").encode()
                if owner.slow == "headers":
                    owner.trickle(self, head + data)
                elif owner.slow == f"body:{digest}":
                    self.wfile.write(head)
                    owner.trickle(self, data)
                else:
                    self.wfile.write(head + data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def trickle(self, handler: BaseHTTPRequestHandler, data: bytes) -> None:
        try:
            for i in range(len(data)):
                if self.stop.is_set():
                    return
                handler.wfile.write(data[i:i + 1])
                handler.wfile.flush()
                time.sleep(TRICKLE)
        except OSError:
            return  # the client hung up: what the deadline is for

    def close(self) -> None:
        self.stop.set()
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def served() -> Iterator[tuple[Server, Image]]:
    image = make_image({"a": b"L" * 4000})
    server = Server(image)
    yield server, image
    server.close()


def ref_on(server: Server, image: Image) -> str:
    return f"127.0.0.1:{server.port}/team/clippy@{image.digest}"


@pytest.mark.parametrize("slow", ["body-of-layer", "body-of-manifest", "headers"])
def test_a_trickling_registry_is_cut_at_the_deadline(served: tuple[Server, Image],
                                                     monkeypatch: pytest.MonkeyPatch,
                                                     tmp_path: Path, slow: str) -> None:
    server, image = served
    layer = sha(image.layers[0])
    server.slow = {"body-of-layer": f"body:{layer}", "body-of-manifest": f"body:{image.digest}",
                   "headers": "headers"}[slow]
    monkeypatch.setattr(registry, "DEADLINE", 1.0)
    store = Store(tmp_path / "store")
    started = time.monotonic()
    with pytest.raises(PrefetchFailed) as refused:
        prefetch(store, ref_on(server, image), RegistrySourceSpec(), allow_download=True)
    took = time.monotonic() - started
    # without the deadline the slowest of these (4000 bytes) would take 800 s
    assert took < 1.0 + 5, took
    text = refused.value.guidance().render_text()
    assert f"within {registry.DEADLINE:g} s" in text and "registry.DEADLINE" in text
    assert f"http://127.0.0.1:{server.port}" in text and refused.value.exit_code == 3
    assert not store.is_present(ref_on(server, image))


def test_control_a_fast_registry_completes_under_the_same_deadline(
        served: tuple[Server, Image], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    server, image = served
    monkeypatch.setattr(registry, "DEADLINE", 1.0)
    store = Store(tmp_path / "store")
    result = prefetch(store, ref_on(server, image), RegistrySourceSpec(), allow_download=True)
    assert result.blobs_fetched == 2 and store.is_present(ref_on(server, image))

