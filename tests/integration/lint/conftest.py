"""Fixtures for real lints; the helpers live in lint_support.py (importable by the tests)."""

from __future__ import annotations

import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from lint_support import HOME, ROOT, Image, build_image, cli  # noqa: E402


@pytest.fixture(scope="session")
def provisioned_home() -> Path:
    HOME.mkdir(parents=True, exist_ok=True)
    done = cli("prefetch", "--vm-assets", "--allow-download", timeout=1500)
    assert done.returncode == 0, done.stderr
    return HOME


def _provision(image: Image) -> None:
    done = cli("prefetch", "--analyzer", "clippy", "--from", f"oci:{image.layout}", "--image",
               image.reference, timeout=1500)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == image.reference


@pytest.fixture(scope="session")
def clippy_image(provisioned_home: Path) -> Image:
    image = build_image("clippy-1.95.0")
    _provision(image)
    return image


@pytest.fixture(scope="session")
def noclippy_image(provisioned_home: Path) -> Image:
    image = build_image("clippy-1.95.0-noclippy", "--without-clippy")
    _provision(image)
    return image


@pytest.fixture(autouse=True)
def roteiro_home(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Overrides the suite's empty per-test home: these tests share the provisioned one."""
    monkeypatch.setenv("ROTEIRO_HOME", str(HOME))
    yield HOME


@pytest.fixture
def demo(tmp_path: Path) -> Path:
    """A private copy of the example workspace (the lint must not depend on where it lives)."""
    target = tmp_path / "demo-workspace"
    shutil.copytree(ROOT / "examples" / "demo-workspace", target,
                    ignore=shutil.ignore_patterns("target"))
    return target
