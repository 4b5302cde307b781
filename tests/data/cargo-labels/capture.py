"""Regenerate clippy.jsonl and rendered.txt: real `cargo clippy` JSON output on this
crate, with the argv of roteiro_py/clippy/command.py, and the text cargo prints for a
person (each diagnostic's `rendered` field, in order).

    .venv/bin/python tests/data/cargo-labels/capture.py [CRATE]

CRATE defaults to this directory; tests/data/cargo-layout is captured the same way.

test_captured_labels_still_match_live_cargo fails when they drift from live cargo.
Absolute paths of the machine that captured them (package_id, manifest_path) are
rewritten to /guest/repo, the prefix a guest would show, and the target directory to
/target.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from realcargo import copy_crate, run_clippy  # noqa: E402


def rendered(stdout: str) -> str:
    """cargo's human text of the diagnostics in `stdout`, as it prints them."""
    texts = []
    for line in stdout.splitlines():
        message = json.loads(line)
        if message.get("reason") == "compiler-message":
            texts.append(message["message"]["rendered"])
    return "".join(texts)


if __name__ == "__main__":
    source = Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else HERE
    with tempfile.TemporaryDirectory() as area:
        crate = copy_crate(source, Path(area) / "crate")
        target = Path(area) / "target"
        run = run_clippy(crate, target_dir=target)
        text = run.stdout.decode().replace(str(target), "/target").replace(str(crate), "/guest/repo")
        (source / "clippy.jsonl").write_text(text)
        (source / "rendered.txt").write_text(rendered(text))
        print(run.status, len(text.splitlines()), "lines")
