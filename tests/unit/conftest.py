"""Loads tests/data/realcargo.py (real cargo runs) and its fixtures for the unit tests."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

_PATH = Path(__file__).resolve().parents[1] / "data" / "realcargo.py"
if "realcargo" not in sys.modules:
    _spec = importlib.util.spec_from_file_location("realcargo", _PATH)
    assert _spec is not None and _spec.loader is not None
    _module = importlib.util.module_from_spec(_spec)
    sys.modules["realcargo"] = _module
    _spec.loader.exec_module(_module)

from realcargo import (  # noqa: E402,F401  (fixtures, used by name)
    demo_all_targets,
    demo_copy,
    demo_default,
    demo_report,
    evil_copy,
    evil_report,
    evil_run,
)


@pytest.fixture
def hold_lock() -> Iterator[Callable[[Path], Callable[[], None]]]:
    """Another run holding a FileLock: `release = hold_lock(path)` returns once a real
    second process has acquired it; `release()` (or the test's end) kills that process."""
    holders: list[subprocess.Popen[str]] = []

    def release(holder: subprocess.Popen[str]) -> None:
        holder.kill()
        holder.wait()
        assert holder.stdout is not None
        holder.stdout.close()

    def hold(path: Path) -> Callable[[], None]:
        holder = subprocess.Popen([sys.executable, "-c",
                                   "import sys,time,filelock; l=filelock.FileLock(sys.argv[1]); "
                                   "l.acquire(); print('held', flush=True); time.sleep(60)",
                                   str(path)], stdout=subprocess.PIPE, text=True)
        holders.append(holder)
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        return lambda: release(holder)

    yield hold
    for holder in holders:
        if holder.returncode is None:
            release(holder)
