"""The suite never reads or writes the user's cargo home: the session has its own."""

from __future__ import annotations

import os
from pathlib import Path
from types import ModuleType

import pytest

from roteiro_py import paths


def _root_conftest(config: pytest.Config) -> ModuleType:
    for plugin in config.pluginmanager.get_plugins():
        if isinstance(plugin, ModuleType) and hasattr(plugin, "hermetic_cargo_home"):
            return plugin
    raise AssertionError("tests/conftest.py is not loaded")


def test_the_cargo_home_is_the_sessions_own_and_empty(hermetic_cargo_home: Path,
                                                       request: pytest.FixtureRequest) -> None:
    conftest = _root_conftest(request.config)
    assert paths.cargo_home() == hermetic_cargo_home != conftest.USER_CARGO_HOME
    assert os.environ["CARGO_HOME"] == str(hermetic_cargo_home)
    assert not (hermetic_cargo_home / "registry").exists()  # what a test needs, it provisions


def test_the_guard_sees_a_touched_file(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """Control arm of the session guard: its listing changes when a file's mtime does."""
    listing = _root_conftest(request.config)._listing
    (tmp_path / "registry").mkdir()
    (tmp_path / "registry" / "x.crate").write_text("x")
    before = listing(tmp_path)
    os.utime(tmp_path / "registry" / "x.crate", ns=(1, 1))
    assert listing(tmp_path) != before
    assert set(before) == {"registry", "registry/x.crate"}
