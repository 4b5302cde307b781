"""Suite-wide: mark tests by directory, give every test its own $ROTEIRO_HOME, and the
session its own empty $CARGO_HOME, checking at the end that the user's were not touched."""

from __future__ import annotations

import os
import shutil
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


#: The user's own cargo home and roteiro home, as they were before the suite changed anything.
USER_CARGO_HOME = Path(os.environ.get("CARGO_HOME") or Path.home() / ".cargo").expanduser()
USER_ROTEIRO_HOME = Path.home() / ".roteiro"


def _listing(root: Path) -> dict[str, tuple[int, int, int]]:
    """Every entry under `root` with its mode, size and mtime (ns); empty when absent."""
    found: dict[str, tuple[int, int, int]] = {}
    for directory, subdirs, files in os.walk(root):
        for name in subdirs + files:
            path = os.path.join(directory, name)
            with __import__("contextlib").suppress(OSError):
                st = os.lstat(path)
                found[os.path.relpath(path, root)] = (st.st_mode, st.st_size, st.st_mtime_ns)
    return found


def _rustup_home() -> str | None:
    """Where rustup keeps its toolchains, found without $HOME (the suite may run with HOME
    pointing at an empty directory): the `.rustup` beside the `.cargo/bin` rustup is in."""
    # A rustup proxy run once with an empty HOME leaves an empty ~/.rustup behind: only a
    # ~/.rustup holding toolchains is rustup's home.
    if os.environ.get("RUSTUP_HOME") or (Path.home() / ".rustup" / "toolchains").is_dir():
        return None
    rustup = shutil.which("rustup")
    if rustup is None:
        return None
    beside = Path(rustup).resolve().parents[2] / ".rustup"
    return str(beside) if beside.is_dir() else None


@pytest.fixture(scope="session", autouse=True)
def hermetic_cargo_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """An empty $CARGO_HOME for the session (a test that needs crates provisions its own),
    and a guard: the user's ~/.cargo and ~/.roteiro are the same after the suite as before.

    Without this a lint test passed or failed by what the developer's ~/.cargo/registry
    happened to hold, and host cargo run by a test wrote into it.
    """
    before = {root: _listing(root) for root in (USER_CARGO_HOME, USER_ROTEIRO_HOME)}
    home = tmp_path_factory.mktemp("session-cargo-home")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("CARGO_HOME", str(home))
        rustup_home = _rustup_home()
        if rustup_home is not None:
            patch.setenv("RUSTUP_HOME", rustup_home)
        yield home
    for root, listing in before.items():
        after = _listing(root)
        changed = sorted(k for k in listing.keys() | after.keys() if listing.get(k) != after.get(k))
        assert not changed, f"the suite changed {root}: {changed[:20]}"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if "integration" in Path(str(item.fspath)).parts:
            item.add_marker(pytest.mark.integration)


@pytest.fixture(autouse=True)
def roteiro_home(tmp_path_factory: pytest.TempPathFactory,
                 monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An empty $ROTEIRO_HOME per test, so no test reads the developer's configuration
    (and no $GITHUB_STEP_SUMMARY, so none writes into a CI job's page)."""
    home = tmp_path_factory.mktemp("roteiro-home")
    monkeypatch.setenv("ROTEIRO_HOME", str(home))
    for name in list(__import__("os").environ):
        if name.startswith("ROTEIRO_") and name != "ROTEIRO_HOME":
            monkeypatch.delenv(name)
    # A suite run in a GitHub job must not append test reports to the job's real summary.
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    yield home
