"""The suite never reads or writes the user's homes: the session has its own HOME and
cargo home, and each test its own ROTEIRO_HOME."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from types import ModuleType

import pytest

from roteiro_py import paths

ROOT = Path(__file__).resolve().parents[2]


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


def test_the_suites_home_is_its_own_and_the_tools_defaults_lead_into_it(
        hermetic_cargo_home: Path, request: pytest.FixtureRequest) -> None:
    conftest = _root_conftest(request.config)
    home = Path(os.environ["HOME"])
    assert home != Path(conftest.USER_ROTEIRO_HOME).parent
    assert conftest.default_homes() == {"ROTEIRO_HOME": home / ".roteiro",
                                        "CARGO_HOME": home / ".cargo"}
    done = subprocess.run([sys.executable, "-c", "import pathlib; print(pathlib.Path.home())"],
                          capture_output=True, text=True, check=True, timeout=60)
    assert done.stdout.strip() == str(home)  # a child inherits it


# -- the guard, in a suite of its own -------------------------------------------------------

INNER = """
import os, subprocess, sys, time
from pathlib import Path

def test_a_while() -> None:
    time.sleep(1.0)  # the other process writes to the user's ~/.cargo meanwhile

def test_writes_the_default_roteiro_home() -> None:
    if os.environ.get("INNER_CONTROL") != "roteiro":
        return
    env = {k: v for k, v in os.environ.items() if k != "ROTEIRO_HOME"}
    subprocess.run([str(Path(sys.executable).with_name("pylint-sandbox")), "config", "set",
                    "vm.cpus", "2"], env=env, check=True, capture_output=True, timeout=60)

def test_writes_the_default_cargo_home(monkeypatch) -> None:
    if os.environ.get("INNER_CONTROL") != "cargo":
        return
    from roteiro_py import paths
    monkeypatch.delenv("CARGO_HOME")
    (paths.cargo_home() / "registry").mkdir(parents=True)
"""

WRITER = """
import sys, time
from pathlib import Path
target = Path(sys.argv[1])
for i in range(2000):
    (target / f"touched-{i % 5}").write_text(str(i))
    time.sleep(0.02)
"""


def inner_suite(tmp_path: Path, control: str = "") -> tuple[subprocess.CompletedProcess[str], Path]:
    """A suite run with tests/conftest.py as it is, as a developer runs it (HOME their own,
    no CARGO_HOME or ROTEIRO_HOME), while another process of theirs keeps writing into
    their ~/.cargo. Their home is a directory of this test's: the real one is not touched."""
    user = tmp_path / "user"
    (user / ".cargo" / "registry").mkdir(parents=True)
    (user / ".roteiro").mkdir()
    suite = tmp_path / "suite"
    suite.mkdir()
    shutil.copy(ROOT / "tests" / "conftest.py", suite / "conftest.py")
    (suite / "test_inner.py").write_text(textwrap.dedent(INNER))
    env = {k: v for k, v in os.environ.items()
           if k not in ("CARGO_HOME", "ROTEIRO_HOME", "RUSTUP_HOME", "PYTEST_ADDOPTS")}
    env.update(HOME=str(user), INNER_CONTROL=control)
    editor = subprocess.Popen([sys.executable, "-c", WRITER, str(user / ".cargo" / "registry")])
    try:
        done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q",
                               str(suite)], cwd=suite, env=env,
                              capture_output=True, text=True, timeout=240)
    finally:
        editor.kill()
        editor.wait()
    return done, user


def test_another_process_writing_the_users_cargo_home_does_not_fail_the_run(tmp_path: Path) -> None:
    """Issue 21: the guard compared the user's ~/.cargo before and after the run, so a
    `cargo build` in another terminal failed `scripts/test` ("the suite changed ...")."""
    done, user = inner_suite(tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert len(list((user / ".cargo" / "registry").iterdir())) == 5  # it did write, meanwhile


@pytest.mark.parametrize("control", ["roteiro", "cargo"])
def test_control_a_test_writing_the_default_home_fails_the_run(tmp_path: Path, control: str) -> None:
    """The suite's own write is still caught: `config set` with no ROTEIRO_HOME (the
    tool's default home), a write to the default cargo home. Neither reached the user's."""
    done, user = inner_suite(tmp_path, control)
    assert done.returncode == 1, done.stdout + done.stderr
    name = "ROTEIRO_HOME" if control == "roteiro" else "CARGO_HOME"
    assert "the suite wrote into the default homes" in done.stdout and f"{name} (" in done.stdout, \
        done.stdout
    assert sorted(p.name for p in (user / ".roteiro").iterdir()) == []
