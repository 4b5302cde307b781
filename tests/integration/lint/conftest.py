"""Fixtures for real lints; the helpers live in lint_support.py (importable by the tests)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.lint.lint_support import (
    HOME,
    ROOT,
    Image,
    LocalRegistry,
    build_image,
    provision,
    provision_vm_assets,
)
from tests.support.https_server import make_tls, serve


@pytest.fixture(scope="session")
def provisioned_home() -> Path:
    return provision_vm_assets()


@pytest.fixture(scope="session")
def clippy_image(provisioned_home: Path) -> Image:
    return provision(build_image("clippy-1.95.0"))


@pytest.fixture(scope="session")
def noclippy_image(provisioned_home: Path) -> Image:
    return provision(build_image("clippy-1.95.0-noclippy", "--without-clippy"))


@pytest.fixture(autouse=True)
def roteiro_home(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Overrides the suite's empty per-test home: these tests share the provisioned one."""
    monkeypatch.setenv("ROTEIRO_HOME", str(HOME))
    yield HOME


@pytest.fixture(scope="session")
def local_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalRegistry]:
    """A sparse registry over TLS on loopback for the session, standing in for crates.io
    (nothing here needs the internet), serving `loopfmt 1.0.0`; tests publish more."""
    base = tmp_path_factory.mktemp("local-registry")
    tls = make_tls(base / "tls")
    with serve(base / "served", tls) as server:
        cargo_home = base / "cargo-home"
        cargo_home.mkdir()
        (cargo_home / "config.toml").write_text(f'[registries.local]\nindex = "sparse+{server.url}/"\n')
        registry = LocalRegistry(server, base / "served", tls, cargo_home)
        registry.publish("loopfmt")
        yield registry


@pytest.fixture
def demo(tmp_path: Path) -> Path:
    """A private copy of the example workspace (the lint must not depend on where it lives)."""
    target = tmp_path / "demo-workspace"
    shutil.copytree(ROOT / "examples" / "demo-workspace", target,
                    ignore=shutil.ignore_patterns("target"))
    return target
