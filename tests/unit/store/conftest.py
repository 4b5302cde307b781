"""Fixtures for the store's unit tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from roteiro_py.store import Store


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store(tmp_path / "store")
