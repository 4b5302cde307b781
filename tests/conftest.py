"""Suite-wide: mark tests by directory, and give every test its own $ROTEIRO_HOME."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

ROOT = Path(__file__).resolve().parent.parent


# Fuzzing is an ordinary test: a bounded number of examples, no per-example deadline (a
# loaded 2-core CI machine makes wall-clock deadlines flaky), and no example database
# written into the checkout (a failure prints its minimal example and its seed instead).
settings.register_profile("roteiro", max_examples=200, deadline=None, database=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("roteiro")


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
