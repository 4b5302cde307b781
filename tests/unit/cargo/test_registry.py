"""cargo/registry.py against a real loopback https registry: what is kept is the lockfile's
bytes, whatever the registry, the network or the host's cargo cache does."""

from __future__ import annotations

import contextlib
import gc
import hashlib
import json
import os
import socket
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from roteiro_py import errors
from roteiro_py.cargo import registry as reg
from roteiro_py.cargo import store
from roteiro_py.cargo.lockfile import CRATES_IO_SOURCE, Pin, pin_of
from tests.support.https_server import Tls, free_port
from tests.support.registry import build_registry, make_crate
from tests.unit.cargo.cargo_testing import LOCKFILE, TREE, Registry

SECRET = "cio-SECRET-token-4711"


def fetch(pin: Pin, *, allow_download: bool = True, host: reg.HostCargo | None = None,
          seconds: float = 30.0) -> reg.Origin:
    return reg.fetch_crate(pin, tree=TREE, lockfile=LOCKFILE, allow_download=allow_download,
                           host=host or reg.HostCargo.read(), until=time.monotonic() + seconds)


def stored(pin: Pin) -> bytes | None:
    assert pin.checksum
    path = store.crate_path(pin.checksum)
    return path.read_bytes() if path.exists() else None


def nothing_kept() -> bool:
    """No crate and no temporary left in the store."""
    root = store.packages_root()
    return not [p for p in root.rglob("*") if p.is_file()] if root.exists() else True


def text(error: errors.RoteiroError) -> str:
    return error.guidance().render_text()


@pytest.fixture
def plain_listener() -> Iterator[tuple[int, list[str]]]:
    """A plain TCP port that records every connection it is offered (it answers nothing)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    sock.settimeout(0.1)
    seen: list[str] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = sock.accept()
            except OSError:
                continue
            seen.append("connection")
            conn.close()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield sock.getsockname()[1], seen
    stop.set()
    thread.join(5)
    sock.close()


# -- the download -------------------------------------------------------------------------


def test_a_download_is_kept_when_its_sha256_is_the_lockfiles(registry: Registry) -> None:
    host = reg.HostCargo.read()
    itoa, serde = registry.pin("itoa", "1.0.15"), registry.pin("serde", "1.0.219")
    assert fetch(itoa, host=host) == "download"
    assert fetch(serde, host=host) == "download"
    assert stored(itoa) == registry.crates[("itoa", "1.0.15")]
    assert stored(serde) == registry.crates[("serde", "1.0.219")]
    # config.json once per registry per run; each crate by the dl template
    assert len(registry.server.requests("/config.json")) == 1
    assert [r.path for r in registry.server.requests()][1:] == [
        "/crates/itoa/itoa-1.0.15.crate", "/crates/serde/serde-1.0.219.crate"]
    # warm: the store answers, the registry is not asked again
    before = len(registry.server.log)
    assert fetch(itoa) == "store"
    assert len(registry.server.log) == before
    assert not list((store.packages_root() / "tmp").iterdir())


def test_a_download_of_other_bytes_keeps_nothing(registry: Registry) -> None:
    pin = registry.pin("itoa", "1.0.15", checksum="e" * 64)
    with pytest.raises(errors.PackageRefused) as caught:
        fetch(pin)
    actual = registry.checksums[("itoa", "1.0.15")]
    assert f"its sha256 is {actual}, the lockfile says {'e' * 64}; nothing was kept" in text(caught.value)
    assert caught.value.exit_code == 3
    assert nothing_kept()


@pytest.mark.parametrize("with_length", [True, False])
def test_a_crate_larger_than_the_bound_is_refused(registry: Registry, monkeypatch: pytest.MonkeyPatch,
                                                  with_length: bool) -> None:
    big = os.urandom(5000)
    pin = registry.pin("itoa", "1.0.15", checksum=hashlib.sha256(big).hexdigest())

    def body(handler: BaseHTTPRequestHandler) -> bool:
        handler.send_response(200)
        if with_length:
            handler.send_header("Content-Length", str(len(big)))
        handler.send_header("Connection", "close")
        handler.end_headers()
        handler.wfile.write(big)
        handler.close_connection = True
        return True

    registry.server.route("/crates/", body)
    monkeypatch.setattr(store, "MAX_CRATE_BYTES", 4999)
    with pytest.raises(errors.PackageRefused) as caught:
        fetch(pin)
    assert "larger than 4999 bytes" in text(caught.value)
    assert nothing_kept()
    monkeypatch.setattr(store, "MAX_CRATE_BYTES", 5000)  # control: at the bound it is kept
    assert fetch(pin) == "download" and stored(pin) == big


def test_a_dl_template_that_is_not_https_is_refused_before_any_request(
        registry: Registry, plain_listener: tuple[int, list[str]]) -> None:
    port, seen = plain_listener
    (registry.root / "config.json").write_text(json.dumps(
        {"dl": f"http://127.0.0.1:{port}/crates/{{crate}}/{{crate}}-{{version}}.crate"}))
    with pytest.raises(errors.PackageRefused) as caught:
        fetch(registry.pin("itoa", "1.0.15"))
    assert "is not https" in text(caught.value) and registry.index in text(caught.value)
    time.sleep(0.2)
    assert seen == [] and nothing_kept()
    assert [r.path for r in registry.server.requests()] == ["/config.json"]


@pytest.mark.parametrize("target", ["http://127.0.0.1:{port}/x.crate", "ftp://127.0.0.1:{port}/x.crate"])
def test_a_redirect_that_leaves_https_is_refused(registry: Registry, plain_listener: tuple[int, list[str]],
                                                 target: str) -> None:
    port, seen = plain_listener
    registry.server.route("/crates/", _redirect(target.format(port=port)))
    with pytest.raises(errors.PackageRefused) as caught:
        fetch(registry.pin("itoa", "1.0.15"))
    assert "redirected a download to" in text(caught.value) and "not https" in text(caught.value)
    time.sleep(0.2)
    assert seen == [] and nothing_kept()


def test_a_redirect_to_https_is_followed(registry: Registry) -> None:
    """The control arm of the two above: the same redirect to https (another host name of
    the same server) arrives."""
    registry.server.route("/crates/", _redirect(registry.server.url_for("localhost") + "/real/itoa.crate"))
    (registry.root / "real").mkdir()
    (registry.root / "real" / "itoa.crate").write_bytes(registry.crates[("itoa", "1.0.15")])
    assert fetch(registry.pin("itoa", "1.0.15")) == "download"


def _redirect(location: str) -> Callable[[BaseHTTPRequestHandler], bool]:
    def answer(handler: BaseHTTPRequestHandler) -> bool:
        handler.send_response(302)
        handler.send_header("Location", location)
        handler.send_header("Content-Length", "0")
        handler.end_headers()
        return True
    return answer


# -- credentials ---------------------------------------------------------------------------


def _private(registry: Registry, cargo_home: Path, *, provider: str | None = None) -> None:
    """The registry requires a token (401 without it); the host names it `my-reg`; its
    downloads redirect to the same server under another host name (another origin)."""
    build_registry(registry.root, registry.server.url, [], auth_required=True)
    config = f'[registries.my-reg]\nindex = "sparse+{registry.index}"\n'
    if provider:
        config += f'credential-provider = "{provider}"\n'
    (cargo_home / "config.toml").write_text(config)

    def guard(handler: BaseHTTPRequestHandler) -> bool:
        if handler.headers.get("Host", "").startswith("127.0.0.1") \
                and handler.headers.get("Authorization") != SECRET:
            handler.send_response(401)
            handler.send_header("Content-Length", "0")
            handler.end_headers()
            return True
        return False

    registry.server.route("/", guard)
    registry.server.route("/crates/", lambda h: guard(h) or _redirect(
        registry.server.url_for("localhost") + "/elsewhere" + h.path)(h))
    (registry.root / "elsewhere").symlink_to(registry.root)


@pytest.mark.parametrize("where", ["env", "credentials.toml"])
def test_a_token_goes_to_the_registry_and_never_to_another_origin(
        registry: Registry, cargo_home: Path, monkeypatch: pytest.MonkeyPatch, where: str) -> None:
    _private(registry, cargo_home)
    if where == "env":
        monkeypatch.setenv("CARGO_REGISTRIES_MY_REG_TOKEN", SECRET)
    else:
        (cargo_home / "credentials.toml").write_text(f'[registries.my-reg]\ntoken = "{SECRET}"\n')
    host = reg.HostCargo.read()
    assert SECRET not in repr(host)
    assert fetch(registry.pin("itoa", "1.0.15"), host=host) == "download"
    at_registry = [r for r in registry.server.requests() if r.host.startswith("127.0.0.1")]
    elsewhere = [r for r in registry.server.requests() if r.host.startswith("localhost")]
    # the control arm: the token does arrive where it belongs (config.json, the dl URL)
    assert {r.path for r in at_registry if r.headers.get("authorization") == SECRET} == {
        "/config.json", "/crates/itoa/itoa-1.0.15.crate"}
    assert [r.path for r in elsewhere] == ["/elsewhere/crates/itoa/itoa-1.0.15.crate"]
    assert all("authorization" not in r.headers for r in elsewhere)


def test_a_registry_asking_for_credentials_without_a_token_names_the_variable(
        registry: Registry, cargo_home: Path) -> None:
    _private(registry, cargo_home)
    with pytest.raises(errors.PackageSourceUnreachable) as caught:
        fetch(registry.pin("itoa", "1.0.15"))
    said = text(caught.value)
    assert "CARGO_REGISTRIES_MY_REG_TOKEN" in said and registry.index in said and "itoa 1.0.15" in said
    assert caught.value.exit_code == 3 and nothing_kept()


def test_a_wrong_token_is_refused_without_showing_it(registry: Registry, cargo_home: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    _private(registry, cargo_home)
    monkeypatch.setenv("CARGO_REGISTRIES_MY_REG_TOKEN", "not-" + SECRET)
    with pytest.raises(errors.PackageSourceUnreachable) as caught:
        fetch(registry.pin("itoa", "1.0.15"))
    said = text(caught.value)
    assert "HTTP 401" in said and "CARGO_REGISTRIES_MY_REG_TOKEN" in said and SECRET not in said


def test_a_credential_provider_is_refused_not_run(registry: Registry, cargo_home: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    _private(registry, cargo_home, provider="/usr/local/bin/evil-provider --flag")
    (cargo_home / "credentials.toml").write_text(f'[registries.my-reg]\ntoken = "{SECRET}"\n')
    with pytest.raises(errors.PackageSourceUnreachable) as caught:
        fetch(registry.pin("itoa", "1.0.15"))
    said = text(caught.value)
    assert "/usr/local/bin/evil-provider --flag" in said and "not run" in said
    assert "CARGO_REGISTRIES_MY_REG_TOKEN" in said and SECRET not in said
    assert not registry.server.requests("/crates/itoa/itoa-1.0.15.crate")
    # the way forward it names works: the token from the environment
    monkeypatch.setenv("CARGO_REGISTRIES_MY_REG_TOKEN", SECRET)
    assert fetch(registry.pin("itoa", "1.0.15")) == "download"


def test_a_global_credential_provider_is_refused_too(registry: Registry, cargo_home: Path) -> None:
    _private(registry, cargo_home)
    with (cargo_home / "config.toml").open("a") as config:
        config.write('[registry]\nglobal-credential-providers = ["cargo:token", "cargo:libsecret"]\n')
    (cargo_home / "credentials.toml").write_text(f'[registries.my-reg]\ntoken = "{SECRET}"\n')
    with pytest.raises(errors.PackageSourceUnreachable) as caught:
        fetch(registry.pin("itoa", "1.0.15"))
    assert "cargo:libsecret" in text(caught.value)


# -- the host's cargo cache ----------------------------------------------------------------


def _crates_io_pin(data: bytes, name: str = "itoa", version: str = "1.0.15") -> Pin:
    return pin_of(LOCKFILE, name, version, CRATES_IO_SOURCE, hashlib.sha256(data).hexdigest())


def _cache(cargo_home: Path, directory: str = "index.crates.io-1949cf8c6b5b557f") -> Path:
    path = cargo_home / "registry" / "cache" / directory
    path.mkdir(parents=True)
    return path


def test_the_cargo_cache_is_used_when_its_bytes_are_the_lockfiles(cargo_home: Path) -> None:
    data = make_crate("itoa", "1.0.15")
    (_cache(cargo_home) / "itoa-1.0.15.crate").write_bytes(data)
    pin = _crates_io_pin(data)
    assert fetch(pin, allow_download=False) == "cargo-cache"
    assert stored(pin) == data


def test_a_tampered_cargo_cache_file_is_not_used(cargo_home: Path) -> None:
    data = make_crate("itoa", "1.0.15")
    (_cache(cargo_home) / "itoa-1.0.15.crate").write_bytes(data + b"\0")
    assert fetch(_crates_io_pin(data), allow_download=False) == "missing"
    assert nothing_kept()


def test_a_link_in_the_cargo_cache_is_not_followed(cargo_home: Path, tmp_path: Path) -> None:
    data = make_crate("itoa", "1.0.15")
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "sub").mkdir(parents=True)
    (elsewhere / "itoa-1.0.15.crate").write_bytes(data)
    (elsewhere / "sub" / "itoa-1.0.15.crate").write_bytes(data)
    (_cache(cargo_home) / "itoa-1.0.15.crate").symlink_to(elsewhere / "itoa-1.0.15.crate")
    (cargo_home / "registry" / "cache" / "github.com-1ecc6299db9ec823").symlink_to(elsewhere / "sub")
    pin = _crates_io_pin(data)
    assert fetch(pin, allow_download=False) == "missing"
    assert nothing_kept()
    # control: the same bytes as a regular file in a real directory are used
    (_cache(cargo_home, "other.example-0123456789abcdef") / "itoa-1.0.15.crate").write_bytes(data)
    assert fetch(pin, allow_download=False) == "cargo-cache"


# -- fetch-deps --from DIR -----------------------------------------------------------------


def test_crates_from_a_directory(tmp_path: Path) -> None:
    good, other = make_crate("itoa", "1.0.15"), make_crate("serde", "1.0.219")
    directory = tmp_path / "from"
    directory.mkdir()
    (directory / "itoa-1.0.15.crate").write_bytes(good)
    pins = [_crates_io_pin(good), _crates_io_pin(other, "serde", "1.0.219")]
    kept, missing = reg.crates_from_dir(directory, pins, lockfile=LOCKFILE, tree=TREE)
    assert (kept, missing) == ([pins[0]], [pins[1]])
    assert stored(pins[0]) == good


@pytest.mark.parametrize("kind", ["other bytes", "link"])
def test_a_file_in_the_directory_that_is_not_the_pins_is_refused(tmp_path: Path, kind: str) -> None:
    good = make_crate("itoa", "1.0.15")
    directory = tmp_path / "from"
    directory.mkdir()
    if kind == "link":
        (tmp_path / "real.crate").write_bytes(good)
        (directory / "itoa-1.0.15.crate").symlink_to(tmp_path / "real.crate")
    else:
        (directory / "itoa-1.0.15.crate").write_bytes(good[:-1])
    with pytest.raises(errors.PackageRefused) as caught:
        reg.crates_from_dir(directory, [_crates_io_pin(good)], lockfile=LOCKFILE, tree=TREE)
    said = text(caught.value)
    assert "itoa-1.0.15.crate" in said and ("symbolic link" in said if kind == "link" else "nothing was kept" in said)
    assert nothing_kept()


# -- reaching the registry -----------------------------------------------------------------


def test_an_unreachable_registry_is_a_refusal_naming_it(tmp_path: Path) -> None:
    index = f"https://127.0.0.1:{free_port()}/"
    pin = pin_of(LOCKFILE, "itoa", "1.0.15", f"sparse+{index}", "a" * 64)
    with pytest.raises(errors.PackageSourceUnreachable) as caught:
        fetch(pin)
    said = text(caught.value)
    assert caught.value.exit_code == 3
    assert index in said and "itoa 1.0.15" in said and "--from DIR" in said


def test_tls_verifies_against_the_ca_cargo_is_told_of(registry: Registry, cargo_home: Path, tls: Tls,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    pin = registry.pin("itoa", "1.0.15")
    monkeypatch.delenv("CARGO_HTTP_CAINFO")
    with pytest.raises(errors.PackageSourceUnreachable) as caught:
        fetch(pin)  # the system's CAs do not know the test CA: verification is on
    assert "CERTIFICATE_VERIFY_FAILED" in text(caught.value)
    (cargo_home / "config.toml").write_text(f'[http]\ncainfo = "{tls.ca_pem}"\n')
    assert fetch(pin) == "download"


def test_ssl_cert_file_is_honoured(registry: Registry, tls: Tls, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CARGO_HTTP_CAINFO")
    monkeypatch.setenv("SSL_CERT_FILE", str(tls.ca_pem))
    assert fetch(registry.pin("itoa", "1.0.15")) == "download"


def test_a_crates_io_pin_is_downloaded_from_the_hosts_mirror(registry: Registry, cargo_home: Path) -> None:
    (cargo_home / "config.toml").write_text(
        '[source.crates-io]\nreplace-with = "mirror"\n'
        f'[source.mirror]\nregistry = "sparse+{registry.index}"\n')
    data = registry.crates[("serde", "1.0.219")]
    assert fetch(_crates_io_pin(data, "serde", "1.0.219")) == "download"
    assert registry.server.requests("/crates/serde/serde-1.0.219.crate")


def test_a_mirror_over_plain_http_is_refused(cargo_home: Path, plain_listener: tuple[int, list[str]]) -> None:
    port, seen = plain_listener
    (cargo_home / "config.toml").write_text(
        '[source.crates-io]\nreplace-with = "mirror"\n'
        f'[source.mirror]\nregistry = "sparse+http://127.0.0.1:{port}/"\n')
    with pytest.raises(errors.PackageSourceUnreachable) as caught:
        fetch(_crates_io_pin(b"x"))
    assert "not https" in text(caught.value)
    assert seen == []


def test_the_deadline_bounds_a_registry_that_trickles_its_headers(registry: Registry) -> None:
    def trickle(handler: BaseHTTPRequestHandler) -> bool:
        handler.wfile.write(b"HTTP/1.1 200 OK\r\n")
        handler.wfile.flush()
        while not registry.server.stopping.wait(0.2):
            handler.wfile.write(b"X-Slow: 1\r\n")
            handler.wfile.flush()
        return True

    registry.server.route("/config.json", trickle)
    started = time.monotonic()
    with pytest.raises(errors.PackageSourceUnreachable) as caught:
        fetch(registry.pin("itoa", "1.0.15"), seconds=1.5)
    assert time.monotonic() - started < 10
    assert "did not arrive within" in text(caught.value)


def test_the_opener_itself_refuses_plain_http_before_connecting(
        plain_listener: tuple[int, list[str]]) -> None:
    """get() and _Redirects refuse a URL that is not https before the opener sees it; the
    opener (socket_deadline.armed_opener, whose http handler the other clients use) refuses
    one too, before any connection is made."""
    port, seen = plain_listener
    watch = reg._Watch(5.0)
    try:
        with pytest.raises(reg._Refused, match="is not https"):
            reg._opener(reg.HostCargo.read(), watch).open(f"http://127.0.0.1:{port}/config.json",
                                                          timeout=5.0)
    finally:
        watch.close()
    socket.create_connection(("127.0.0.1", port)).close()  # control: a connection is seen
    deadline = time.monotonic() + 5
    while not seen and time.monotonic() < deadline:
        time.sleep(0.05)
    assert seen == ["connection"]


def test_a_body_slower_than_the_minimum_rate_is_given_up(registry: Registry,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    def trickle(handler: BaseHTTPRequestHandler) -> bool:
        handler.send_response(200)
        handler.send_header("Content-Length", "100000")
        handler.end_headers()
        while not registry.server.stopping.wait(0.05):
            handler.wfile.write(b"x")
            handler.wfile.flush()
        return True

    registry.server.route("/crates/", trickle)
    monkeypatch.setattr(reg, "NETWORK_TIMEOUT_S", 0.3)
    monkeypatch.setattr(reg, "MIN_BYTES_PER_S", 1000)
    with pytest.raises(errors.PackageSourceUnreachable) as caught:
        fetch(registry.pin("itoa", "1.0.15"))
    assert "less than 1000 bytes a second" in text(caught.value)
    assert nothing_kept()


@pytest.mark.parametrize("how", ["http.proxy", "HTTPS_PROXY"])
def test_https_goes_through_the_proxy_the_host_names(registry: Registry, cargo_home: Path,
                                                     monkeypatch: pytest.MonkeyPatch, how: str) -> None:
    port, connects = _connect_proxy(registry.server.stopping)
    if how == "http.proxy":
        (cargo_home / "config.toml").write_text(f'[http]\nproxy = "127.0.0.1:{port}"\n')
    else:
        monkeypatch.setenv("HTTPS_PROXY", f"http://127.0.0.1:{port}")
    assert fetch(registry.pin("itoa", "1.0.15")) == "download"
    assert [c.rsplit(" ", 1)[0] for c in connects] == [f"CONNECT 127.0.0.1:{registry.server.port}"] * 2


def _connect_proxy(stopping: threading.Event) -> tuple[int, list[str]]:
    """A minimal HTTP CONNECT proxy on loopback (none is installed here): its port, and
    the CONNECT line of each tunnel it made."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.settimeout(0.1)
    log: list[str] = []

    def pipe(src: socket.socket, dst: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while chunk := src.recv(65536):
                dst.sendall(chunk)
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)

    def tunnel(client: socket.socket) -> None:
        with client, contextlib.suppress(OSError):
            head = b""
            while b"\r\n\r\n" not in head and (chunk := client.recv(4096)):
                head += chunk
            line = head.split(b"\r\n")[0].decode()
            log.append(line)
            where, port = line.split()[1].rsplit(":", 1)
            with socket.create_connection((where, int(port))) as upstream:
                client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
                back = threading.Thread(target=pipe, args=(upstream, client), daemon=True)
                back.start()
                pipe(client, upstream)
                back.join(5)

    def accept() -> None:
        with listener:
            while not stopping.is_set():
                try:
                    client, _ = listener.accept()
                except OSError:
                    continue
                threading.Thread(target=tunnel, args=(client,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    return int(listener.getsockname()[1]), log


# -- cargo's dl rules, and fuzzing ----------------------------------------------------------


def test_dl_templates_follow_cargos_rules() -> None:
    pin = pin_of(LOCKFILE, "AbCd-e", "1.0.0+x", CRATES_IO_SOURCE, "c" * 64)
    assert reg.dl_url("https://static.crates.io/crates", pin) == \
        "https://static.crates.io/crates/AbCd-e/1.0.0+x/download"
    assert reg.dl_url("https://r.example/{prefix}/{lowerprefix}/{crate}-{version}?s={sha256-checksum}", pin) == \
        f"https://r.example/Ab/Cd/ab/cd/AbCd-e-1.0.0+x?s={'c' * 64}"
    assert [reg.dl_prefix(n) for n in ("a", "AB", "abc", "Abcd")] == ["1", "2", "3/a", "Ab/cd"]
    for bad in ("http://r.example/{crate}", "https://u:p@r.example/{crate}", "https://r example/{crate}",
                "https://r.example:99999999999/{crate}", "file:///etc/{crate}", "https:///{crate}"):
        with pytest.raises(reg._Refused):
            reg.dl_url(bad, pin)


@given(st.one_of(st.binary(max_size=300),
                 st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=40),
                              lambda inner: st.lists(inner, max_size=4)
                              | st.dictionaries(st.sampled_from(["dl", "auth-required", "api", "x"]),
                                                inner, max_size=4)).map(lambda v: json.dumps(v).encode()),
                 st.integers(1, 100_000).map(lambda n: b"[" * n)))
def test_config_json_is_parsed_or_refused(data: bytes) -> None:
    try:
        dl, auth = reg.parse_config(data)
    except reg._Unreachable:
        return
    assert isinstance(dl, str) and isinstance(auth, bool)


@given(st.text(max_size=200))
def test_any_dl_template_is_a_checked_https_url_or_refused(template: str) -> None:
    pin = pin_of(LOCKFILE, "itoa", "1.0.15", CRATES_IO_SOURCE, "c" * 64)
    try:
        url = reg.dl_url(template, pin)
    except reg._Refused:
        return
    assert url.startswith("https://") and reg._not_https(url) is None


_STATUS = st.sampled_from([b"HTTP/1.1 200 OK", b"HTTP/1.1 302 Found", b"HTTP/1.1 500 x", b"HTTP/1.0 401 A",
                           b"HTTP/1.1 99999 ?", b"HTTP/9 200 OK", b"garbage", b""])
_HEADER = st.one_of(st.sampled_from([b"Content-Length: 5", b"Content-Length: -1", b"Content-Length: 99999999999",
                                     b"Transfer-Encoding: chunked", b"Location: http://127.0.0.1:1/",
                                     b"Location: https://[::1/", b"Location: \x00"]),
                    st.binary(max_size=60))


def test_any_response_ends_in_a_download_or_a_refusal(registry: Registry) -> None:
    responses: list[bytes] = []

    def raw(handler: BaseHTTPRequestHandler) -> bool:
        handler.wfile.write(responses[-1])
        handler.close_connection = True
        return True

    registry.server.route("/crates/", raw)
    host = reg.HostCargo.read()

    @settings(max_examples=60)
    @given(_STATUS, st.lists(_HEADER, max_size=5), st.binary(max_size=200))
    def one(status: bytes, headers: list[bytes], body: bytes) -> None:
        responses.append(status + b"\r\n" + b"\r\n".join(headers) + b"\r\n\r\n" + body)
        pin = registry.pin("itoa", "1.0.15", checksum=hashlib.sha256(body).hexdigest())
        try:
            fetch(pin, host=host, seconds=5)
        except (errors.PackageRefused, errors.PackageSourceUnreachable) as error:
            text(error)

    one()


def _raw(response: bytes) -> Callable[[BaseHTTPRequestHandler], bool]:
    def answer(handler: BaseHTTPRequestHandler) -> bool:
        handler.wfile.write(response)
        handler.close_connection = True
        return True
    return answer


@contextlib.contextmanager
def _no_unclosed_socket() -> Iterator[None]:
    """Fails when the block leaves a socket for the garbage collector to close."""
    gc.collect()
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        yield
        gc.collect()
    assert [str(w.message) for w in seen if issubclass(w.category, ResourceWarning)] == []


def test_a_redirect_whose_location_does_not_parse_closes_its_connection(registry: Registry) -> None:
    """A shape the fuzz above found: the stdlib's redirect handler raised ValueError with
    the response (and its TLS socket) still open, for the garbage collector to close."""
    registry.server.route("/crates/", _raw(b"HTTP/1.1 302 Found\r\nLocation: https://[::1/\r\n\r\n"))
    with _no_unclosed_socket(), pytest.raises(errors.PackageSourceUnreachable):
        fetch(registry.pin("itoa", "1.0.15"))


@pytest.mark.parametrize("framing", [b"Content-Length: 99999999999\r\n\r\n",
                                     b"Transfer-Encoding: chunked\r\n\r\n5\r\nab"],
                         ids=["100-GB", "broken-chunk"])
def test_a_redirects_body_is_never_read(registry: Registry, framing: bytes) -> None:
    """Shapes the fuzz above found: the stdlib drained a redirect's body whole (a 100 GB
    allocation: MemoryError, or a broken read that left the socket open); it is closed
    unread and the redirect followed."""
    (registry.root / "real").mkdir()
    (registry.root / "real" / "itoa.crate").write_bytes(registry.crates[("itoa", "1.0.15")])
    registry.server.route("/crates/", _raw(b"HTTP/1.1 302 Found\r\nLocation: /real/itoa.crate\r\n" + framing))
    with _no_unclosed_socket():
        assert fetch(registry.pin("itoa", "1.0.15")) == "download"


# -- what the user reads --------------------------------------------------------------------


def test_the_checksum_refusal_as_rendered(registry: Registry) -> None:
    pin = registry.pin("itoa", "1.0.15", checksum="e" * 64)
    with pytest.raises(errors.PackageRefused) as caught:
        fetch(pin)
    actual = registry.checksums[("itoa", "1.0.15")]
    assert text(caught.value).splitlines()[0] == (
        f"error: The lockfile {LOCKFILE} pins itoa 1.0.15, which is not fetched: its sha256 is "
        f"{actual}, the lockfile says {'e' * 64}; nothing was kept (from {registry.index}).")


def test_a_registry_without_the_crate_or_a_config_says_which(registry: Registry, tmp_path: Path) -> None:
    with pytest.raises(errors.PackageSourceUnreachable) as caught:
        fetch(registry.pin("itoa", "9.9.9", checksum="b" * 64))
    assert "the registry has no itoa 9.9.9's .crate (HTTP 404)" in text(caught.value)
    (registry.root / "config.json").unlink()
    with pytest.raises(errors.PackageSourceUnreachable) as caught:
        fetch(registry.pin("itoa", "1.0.15"))
    assert "no config.json (HTTP 404): only sparse registries are fetched" in text(caught.value)


def test_a_broken_host_configuration_matters_only_for_a_download(registry: Registry, cargo_home: Path) -> None:
    data = make_crate("itoa", "1.0.15")
    (_cache(cargo_home) / "itoa-1.0.15.crate").write_bytes(data)
    (cargo_home / "config.toml").write_text("[http\n")
    assert fetch(_crates_io_pin(data)) == "cargo-cache"
    with pytest.raises(errors.PackageSourceUnreachable) as caught:
        fetch(registry.pin("serde", "1.0.219"))
    assert f"{cargo_home / 'config.toml'} cannot be read: it is not valid TOML" in text(caught.value)
    assert registry.server.requests() == []


def test_what_one_fetch_downloads_is_bounded_in_all(registry: Registry, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Review of issue 20: each `.crate` was bounded (store.MAX_CRATE_BYTES), their sum not:
    a lockfile pinning 20,000 packages (MAX_PINS) of 64 MiB from its own registry made one
    fetch-deps write up to 1.3 TB into the store, bounded only by FETCH_TIMEOUT_S. Now one
    fetch may download at most MAX_FETCH_BYTES (what one vendored view may hold unpacked)."""
    from roteiro_py.commands import fetch_deps

    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "Cargo.toml").write_text('[package]\nname = "me"\nversion = "0.1.0"\n')
    (tree / "Cargo.lock").write_text("version = 4\n" + "".join(
        f'[[package]]\nname = "{n}"\nversion = "{v}"\nsource = "sparse+{registry.index}"\n'
        f'checksum = "{registry.checksums[(n, v)]}"\n' for n, v in registry.crates))
    sizes = sorted(len(data) for data in registry.crates.values())
    monkeypatch.setattr(fetch_deps, "MAX_FETCH_BYTES", sizes[0] + sizes[1] - 1)
    with pytest.raises(errors.TreeFileRefused, match=f"more than {sizes[0] + sizes[1] - 1} bytes"):
        fetch_deps.fetch_deps(tree)
    kept = list((store.packages_root() / "crates").iterdir())
    assert len(kept) < len(registry.crates)
    monkeypatch.setattr(fetch_deps, "MAX_FETCH_BYTES", sum(sizes))  # control: the whole set fits
    assert fetch_deps.fetch_deps(tree).origins == {"store": len(kept),
                                                   "download": len(registry.crates) - len(kept)}
