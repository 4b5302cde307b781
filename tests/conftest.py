"""Suite-wide: mark tests by directory, and give every test its own $ROTEIRO_HOME."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if "integration" in Path(str(item.fspath)).parts:
            item.add_marker(pytest.mark.integration)


@pytest.fixture(autouse=True)
def roteiro_home(tmp_path_factory: pytest.TempPathFactory,
                 monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An empty $ROTEIRO_HOME per test, so no test reads the developer's configuration."""
    home = tmp_path_factory.mktemp("roteiro-home")
    monkeypatch.setenv("ROTEIRO_HOME", str(home))
    for name in list(__import__("os").environ):
        if name.startswith("ROTEIRO_") and name != "ROTEIRO_HOME":
            monkeypatch.delenv(name)
    yield home
