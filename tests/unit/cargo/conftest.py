"""The cargo fetcher's tests: a loopback https registry (tests/support), a CA given the
documented way (CARGO_HTTP_CAINFO), an empty $CARGO_HOME per test, and no proxy or
registry setting of the developer's environment in force. Nothing reaches the internet."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.https_server import Tls, make_tls, serve
from tests.support.registry import build_registry, make_crate
from tests.unit.cargo.cargo_testing import Registry

_CLEARED = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy",
            "NO_PROXY", "no_proxy", "SSL_CERT_FILE", "SSL_CERT_DIR", "CARGO_HTTP_CAINFO",
            "CARGO_HTTP_PROXY", "CARGO_REGISTRY_GLOBAL_CREDENTIAL_PROVIDERS")


@pytest.fixture(scope="session")
def tls(tmp_path_factory: pytest.TempPathFactory) -> Tls:
    return make_tls(tmp_path_factory.mktemp("tls"))


@pytest.fixture(autouse=True)
def cargo_home(tmp_path: Path, tls: Tls, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh $CARGO_HOME, the test CA as cargo is told of one, no proxy, no registry."""
    home = tmp_path / "cargo-home"
    home.mkdir()
    monkeypatch.setenv("CARGO_HOME", str(home))
    for name in _CLEARED:
        monkeypatch.delenv(name, raising=False)
    for name in list(os.environ):
        if name.startswith("CARGO_REGISTRIES_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("CARGO_HTTP_CAINFO", str(tls.ca_pem))
    return home


CRATES = (("itoa", "1.0.15"), ("serde", "1.0.219"), ("a", "0.1.0"))


@pytest.fixture
def registry(tmp_path: Path, tls: Tls) -> Iterator[Registry]:
    root = tmp_path / "registry"
    crates = {(n, v): make_crate(n, v) for n, v in CRATES}
    with serve(root, tls) as server:
        checksums = build_registry(root, server.url, [(n, v, b) for (n, v), b in crates.items()])
        yield Registry(server, root, crates, checksums)
