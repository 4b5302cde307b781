"""Fixtures for real lints; the helpers live in lint_support.py (importable by the tests)."""

from __future__ import annotations

import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from lint_support import HOME, ROOT, Image, build_image, cli, provision, provision_vm_assets  # noqa: E402


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
def itoa_cargo_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A private cargo home holding itoa 1.0.15, filled once by `fetch-deps` from crates.io;
    no lint test reads the user's ~/.cargo (tests/conftest.py gives the session an empty one)."""
    base = tmp_path_factory.mktemp("itoa-cargo-home")
    tree = base / "tree"
    (tree / "src").mkdir(parents=True)
    (tree / "src" / "lib.rs").write_text("")
    (tree / "Cargo.toml").write_text('[package]\nname = "t"\nversion = "0.1.0"\nedition = "2021"\n'
                                     '[dependencies]\nitoa = "=1.0.15"\n')
    (tree / "Cargo.lock").write_text(
        'version = 4\n[[package]]\nname = "itoa"\nversion = "1.0.15"\n'
        'source = "registry+https://github.com/rust-lang/crates.io-index"\n'
        'checksum = "4a5f13b858c8d314ee3e8f639011f7ccefe71f97f96e50151fb991f267928e2c"\n'
        '[[package]]\nname = "t"\nversion = "0.1.0"\ndependencies = ["itoa"]\n')
    home = base / "cargo-home"
    done = cli("fetch-deps", str(tree), env={"CARGO_HOME": str(home)}, timeout=600)
    assert done.returncode == 0, done.stderr
    assert list(home.glob("registry/src/*/itoa-1.0.15/src/lib.rs"))
    return home


@pytest.fixture
def demo(tmp_path: Path) -> Path:
    """A private copy of the example workspace (the lint must not depend on where it lives)."""
    target = tmp_path / "demo-workspace"
    shutil.copytree(ROOT / "examples" / "demo-workspace", target,
                    ignore=shutil.ignore_patterns("target"))
    return target
