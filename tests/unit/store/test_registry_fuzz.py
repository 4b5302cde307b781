"""Whatever a registry answers, a pull ends provisioned or in a refusal naming it (exit 3).

A real loopback HTTP server (stdlib http.server, writing its answers as raw bytes) plays a
hostile registry: its WWW-Authenticate challenge, its token server's status and JSON, and
the redirects it sends for blobs are drawn by hypothesis. The only outcomes allowed are
"provisioned" and PrefetchFailed naming the registry's URL; anything else reaches the CLI
as an internal error (exit 4), as a realm or a Location of `http://[::1` did (urllib's
ValueError, "Invalid IPv6 URL").

One fake, for a fault we must not produce: a host name that is not loopback fails to
resolve (socket.gaierror, as an unknown name does) instead of being looked up, so no
example sends this machine to the network.
"""

from __future__ import annotations

import base64
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from roteiro_py.errors import EXIT_REFUSED, PrefetchFailed
from roteiro_py.reference import is_loopback_host
from roteiro_py.store import RegistrySourceSpec, Store, prefetch, registry
from roteiro_py.store.manifest import OCI_MANIFEST
from tests.unit.store.store_images import Image, make_image, sha

IMAGE = make_image({"a": b"L" * 3000})


@dataclass
class Script:
    """What the server answers this example; None: what a well-behaved registry would."""

    #: WWW-Authenticate sent with a 401 to a manifest or blob request without Authorization.
    challenge: bytes | None = None
    #: The token endpoint's status and body.
    token_status: int = 200
    token_body: bytes = b'{"token": "t0k"}'
    #: A layer's blob is redirected: status and Location.
    redirect: tuple[int, bytes] | None = None
    #: Credentials in the Docker config for this registry.
    basic: bool = False
    asked: list[str] = field(default_factory=list)


class Registry:
    """One server for the module; each example sets its `script`."""

    def __init__(self, image: Image) -> None:
        self.script = Script()
        blobs = image.blobs()
        config = sha(image.config)
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def answer(self, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
                head = b"HTTP/1.1 %d X\r\n" % status
                for name, value in [*headers, (b"Content-Length", b"%d" % len(body)),
                                    (b"Connection", b"close")]:
                    head += name + b": " + value + b"\r\n"
                self.wfile.write(head + b"\r\n" + body)
                self.close_connection = True

            def do_GET(self) -> None:
                script = outer.script
                script.asked.append(self.path)
                if self.path.startswith("/token"):
                    self.answer(script.token_status, [], script.token_body)
                    return
                if script.challenge is not None and "Authorization" not in self.headers:
                    self.answer(401, [(b"WWW-Authenticate", script.challenge)], b"")
                    return
                digest = self.path.rsplit("/", 1)[-1]
                if "/blobs/" in self.path and digest != config and script.redirect:
                    status, location = script.redirect
                    self.answer(status, [(b"Location", location)], b"")
                    return
                data = blobs.get(digest)
                if data is None:
                    self.answer(404, [], b"")
                    return
                self.answer(200, [(b"Content-Type", OCI_MANIFEST.encode())], data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture(scope="module")
def server() -> Iterator[Registry]:
    served = Registry(IMAGE)
    real = socket.getaddrinfo

    def loopback_only(host: Any, *args: Any, **kwargs: Any) -> Any:
        name = host.decode() if isinstance(host, bytes) else str(host)
        if not is_loopback_host(name):
            raise socket.gaierror(socket.EAI_NONAME, "not looked up by this test")
        return real(host, *args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(socket, "getaddrinfo", loopback_only)
        patch.setattr(registry, "DEADLINE", 20.0)  # an example that hangs fails, not stalls
        yield served
    served.close()


def pull(served: Registry, script: Script) -> BaseException | str:
    """prefetch from `served` answering as `script`, into a new store; its outcome."""
    served.script = script
    with tempfile.TemporaryDirectory() as scratch, pytest.MonkeyPatch.context() as patch:
        docker = Path(scratch) / "docker"
        docker.mkdir()
        if script.basic:
            auth = base64.b64encode(b"user:pass").decode()
            (docker / "config.json").write_text(json.dumps(
                {"auths": {f"127.0.0.1:{served.port}": {"auth": auth}}}))
        patch.setenv("DOCKER_CONFIG", str(docker))
        try:
            prefetch(Store(Path(scratch) / "store"),
                     f"127.0.0.1:{served.port}/team/clippy@{IMAGE.digest}",
                     RegistrySourceSpec(), allow_download=True)
        except Exception as exc:  # noqa: BLE001 - the test judges it
            return exc
        return "provisioned"


def assert_refused_or_provisioned(outcome: BaseException | str, served: Registry) -> None:
    if outcome == "provisioned":
        return
    assert isinstance(outcome, PrefetchFailed), f"{type(outcome).__name__}: {outcome} (exit 4)"
    assert outcome.exit_code == EXIT_REFUSED
    text = outcome.guidance().render_text()  # renders: no raw control character, one line
    assert f"from {served.base}:" in text, text


# -- what the registry says, drawn --------------------------------------------------------

HOSTS = st.sampled_from(["127.0.0.1", "localhost", "[::1]", "[::1", "::1]", "127.0.0.1:",
                         "registry.example", "", "[", "a@b", "%zz", "127.0.0.1:99999",
                         "127.0.0.1:-1", "127.0.0.1:abc", "\u00e9.example"])
SCHEMES = st.sampled_from(["http", "https", "HTTP", "ftp", "file", "data", "", "javascript"])
TEXT = st.text(max_size=30)


@st.composite
def urls(draw: st.DrawFn, port: int) -> str:
    """A URL as a registry might write one: its own, mangled, another scheme, or any text."""
    own = f"http://127.0.0.1:{port}"
    return draw(st.one_of(
        st.builds(lambda path: f"{own}/token{path}", TEXT),
        st.builds(lambda h, p: f"http://{h}{p}", HOSTS, TEXT),
        st.builds(lambda s, h, p: f"{s}://{h}{p}", SCHEMES, HOSTS, TEXT),
        st.builds(lambda path: f"/{path}", TEXT),  # relative: resolved against the request
        TEXT,
    ))


def header_bytes(text: str) -> bytes:
    """As a server writes a header: Latin-1 where it can, UTF-8 otherwise."""
    try:
        return text.encode("latin-1")
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogatepass")


def quoted(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


@st.composite
def challenges(draw: st.DrawFn, port: int) -> bytes:
    """Mostly a Bearer challenge naming this server's token endpoint (so the token's JSON
    is reached), its realm sometimes mangled; otherwise any scheme, parameters or bytes."""
    own = draw(st.booleans())
    scheme = "Bearer" if own else draw(st.sampled_from(["Bearer", "bearer", "Basic", "Negotiate", ""]))
    params = {} if own else draw(st.dictionaries(st.sampled_from(["realm", "service", "scope", "x"]),
                                                 st.one_of(urls(port), TEXT), max_size=3))
    if own:
        params["realm"] = draw(st.one_of(st.just(f"http://127.0.0.1:{port}/token"), urls(port)))
        params["service"] = draw(TEXT)
    text = f"{scheme} " + ",".join(f"{k}={quoted(v) if draw(st.booleans()) else v}"
                                   for k, v in params.items())
    return draw(st.one_of(st.just(header_bytes(text)), st.binary(max_size=40)))


JSON_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=20))
JSON = st.recursive(JSON_SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=8), inner, max_size=3)),
    max_leaves=10)
TOKENS = st.one_of(
    st.builds(lambda t: json.dumps({"token": t}).encode(), st.one_of(st.text(max_size=30), JSON)),
    st.builds(lambda t: json.dumps({"access_token": t}).encode(), st.text(max_size=30)),
    st.builds(lambda v: json.dumps(v).encode(), JSON),
    st.binary(max_size=60),
)


@st.composite
def scripts(draw: st.DrawFn, port: int) -> Script:
    redirect = draw(st.one_of(st.none(), st.tuples(
        st.sampled_from([301, 302, 303, 307, 308]),
        st.one_of(st.builds(header_bytes, urls(port)), st.binary(max_size=40)))))
    return Script(challenge=draw(st.one_of(st.none(), challenges(port))),
                  token_status=draw(st.sampled_from([200, 200, 200, 401, 500, 302])),
                  token_body=draw(TOKENS), redirect=redirect, basic=draw(st.booleans()))


@given(data=st.data())
@example(data=None)  # the two answers that were exit 4, then a well-behaved registry
def test_any_answer_from_a_registry_ends_provisioned_or_refused_naming_it(
        server: Registry, data: st.DataObject | None) -> None:
    if data is None:
        realm = Script(challenge=b'Bearer realm="http://[::1/token",service="r"')
        location = Script(redirect=(302, b"http://[::1/v2/team/clippy/blobs/x"))
        for script in (realm, location):
            outcome = pull(server, script)
            assert_refused_or_provisioned(outcome, server)
            assert outcome != "provisioned" and "Invalid IPv6 URL" in str(outcome.reason), outcome  # type: ignore[union-attr]
        assert pull(server, Script(challenge=b'Bearer realm="%s/token"' % server.base.encode())) \
            == "provisioned"  # control: the same server, well-behaved, provisions
        return
    assert_refused_or_provisioned(pull(server, data.draw(scripts(server.port))), server)


@pytest.mark.parametrize("case", ["realm", "location", "control"])
def test_the_cli_refuses_a_registry_answer_it_cannot_use_with_exit_3(
        server: Registry, tmp_path: Path, case: str) -> None:
    """Through the command a CI job runs (`prefetch --allow-download`): exit 3 and the
    registry named, where exit 4 and "internal error" were."""
    served = server.base.encode()
    server.script = {
        "realm": Script(challenge=b'Bearer realm="http://[::1/token"'),
        "location": Script(redirect=(302, b"http://[::1/blob")),
        "control": Script(challenge=b'Bearer realm="' + served + b'/token"'),
    }[case]
    reference = f"127.0.0.1:{server.port}/team/clippy@{IMAGE.digest}"
    done = subprocess.run(
        [str(Path(sys.executable).with_name("pylint-sandbox")), "prefetch", "--analyzer",
         "clippy", "--image", reference, "--allow-download"], cwd=tmp_path, text=True,
        capture_output=True, timeout=60,
        env={**os.environ, "DOCKER_CONFIG": str(tmp_path), "NO_COLOR": "1", "COLUMNS": "300"})
    if case == "control":
        assert (done.returncode, done.stdout.strip()) == (0, reference), done.stderr
        return
    assert done.returncode == EXIT_REFUSED, done.stderr
    assert "Traceback" not in done.stderr and "internal error" not in done.stderr
    if case == "realm":
        said = (f"the token realm 'http://[::1/token' that {server.base} named is not a usable "
                "URL (Invalid IPv6 URL)")
    else:
        said = (f"the Location 'http://[::1/blob' that 127.0.0.1:{server.port} redirected to is "
                "not a usable URL (Invalid IPv6 URL)")
    refusal = done.stderr[done.stderr.find("error: "):]  # after the progress lines
    assert refusal == (f"error: Could not provision {reference} from {server.base}: {said}.\n"
                       "  note: Nothing partial was left in the store: the reference is not "
                       "present.\n"), done.stderr
