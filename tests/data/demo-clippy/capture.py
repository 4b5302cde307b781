"""Regenerate default.jsonl and all-targets.jsonl: real `cargo clippy` JSON output on
examples/demo-workspace, with the argv of roteiro_py/clippy/command.py.

    .venv/bin/python tests/data/demo-clippy/capture.py

test_captured_fixture_still_matches_live_cargo fails when they drift from live cargo.
Absolute paths of the machine that captured them (package_id, manifest_path) are
rewritten to /guest/repo, the prefix a guest would show.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from realcargo import DEMO, run_clippy  # noqa: E402

from roteiro_py.clippy.command import ClippyOptions  # noqa: E402

for name, options in (("default", ClippyOptions()),
                      ("all-targets", ClippyOptions(all_targets=True))):
    with tempfile.TemporaryDirectory() as target:
        run = run_clippy(DEMO, options, target_dir=Path(target))
        text = run.stdout.decode().replace(str(DEMO), "/guest/repo").replace(target, "/target")
        (HERE / f"{name}.jsonl").write_text(text)
        print(name, run.status, len(text.splitlines()), "lines")
