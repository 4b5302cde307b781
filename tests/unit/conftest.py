"""Loads tests/data/realcargo.py (real cargo runs) and its fixtures for the unit tests."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

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
