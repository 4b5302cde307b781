"""Suite-wide: mark tests by directory, give every test its own $ROTEIRO_HOME, and the
session its own HOME and empty $CARGO_HOME, checking at the end that nothing the suite ran
wrote into the homes the tool and cargo default to (HOME/.roteiro, HOME/.cargo)."""

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


#: The user's own homes, as the suite found them. The suite's processes never get them:
#: HOME, CARGO_HOME and ROTEIRO_HOME are the suite's own (below).
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
    """Where rustup keeps its toolchains, found before HOME becomes the suite's: the
    user's ~/.rustup when it holds toolchains, else the `.rustup` beside the `.cargo/bin`
    rustup is in (a suite started with HOME pointing at an empty directory)."""
    if os.environ.get("RUSTUP_HOME"):
        return None
    # A rustup proxy run once with an empty HOME leaves an empty ~/.rustup behind: only a
    # ~/.rustup holding toolchains is rustup's home.
    if (Path.home() / ".rustup" / "toolchains").is_dir():
        return str(Path.home() / ".rustup")
    rustup = shutil.which("rustup")
    if rustup is None:
        return None
    beside = Path(rustup).resolve().parents[2] / ".rustup"
    return str(beside) if beside.is_dir() else None


def default_homes() -> dict[str, Path]:
    """Where the tool puts its home and cargo's when no variable names them
    (roteiro_py/paths.py; cargo resolves `$HOME/.cargo` the same way)."""
    from roteiro_py import paths

    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("ROTEIRO_HOME", raising=False)
        patch.delenv("CARGO_HOME", raising=False)
        return {"ROTEIRO_HOME": paths.roteiro_home(), "CARGO_HOME": paths.cargo_home()}


def written_into(homes: dict[str, Path]) -> dict[str, list[str]]:
    """What is under each of `homes` (each absent when the suite starts)."""
    return {f"{name} ({root})": sorted(_listing(root))[:20]
            for name, root in homes.items() if root.exists() or root.is_symlink()}


@pytest.fixture(scope="session", autouse=True)
def hermetic_cargo_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """An empty $CARGO_HOME for the session (a test that needs crates provisions its own)
    and a HOME of the suite's own, which every child inherits; and a guard: nothing the
    suite ran wrote into the default homes (HOME/.cargo, HOME/.roteiro).

    Without the cargo home a lint test passed or failed by what the developer's
    ~/.cargo/registry happened to hold, and host cargo run by a test wrote into it. The
    guard used to compare the user's ~/.cargo and ~/.roteiro before and after the run,
    so anything else on the machine touching them (an editor, a `cargo build` in another
    terminal) failed the whole run (issue 21). The suite's HOME is its own, so the homes
    the tool and cargo fall back to are in a directory nothing else writes to: whatever
    is found there was written by the suite. The control arm: at the start, the tool's
    own resolution of its default homes (`default_homes`) must lead into it.
    """
    home = tmp_path_factory.mktemp("suite-home")
    cargo = tmp_path_factory.mktemp("session-cargo-home")
    rustup_home = _rustup_home()  # before HOME is the suite's: rustup finds it from HOME
    # the Docker client's contexts (a rootless engine's socket) are found as before
    docker = Path.home() / ".docker"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HOME", str(home))
        if rustup_home is not None:
            patch.setenv("RUSTUP_HOME", rustup_home)
        if "DOCKER_CONFIG" not in os.environ and docker.is_dir():
            patch.setenv("DOCKER_CONFIG", str(docker))
        defaults = default_homes()
        assert defaults == {"ROTEIRO_HOME": home / ".roteiro", "CARGO_HOME": home / ".cargo"}, \
            f"the default homes are not in the suite's HOME {home}: {defaults}"
        assert written_into(defaults) == {}
        patch.setenv("CARGO_HOME", str(cargo))
        yield cargo
    written = written_into(defaults)
    assert not written, f"the suite wrote into the default homes (its HOME is {home}): {written}"


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
