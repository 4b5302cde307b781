"""cargo's vocabulary through a real lint: a member path lints that member alone, lint
levels after `--` raise its findings to errors, and the report's command says so."""

from __future__ import annotations

import json
from pathlib import Path

from lint_support import Image, cli


def test_a_member_path_with_levels_lints_that_member_at_deny(demo: Path, clippy_image: Image) -> None:
    done = cli("lint", "clippy", str(demo / "crates" / "demo-core"), "--image", clippy_image.reference,
               "--format", "json", "--", "-D", "warnings")
    assert done.returncode == 1, done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert report["findings"], report
    assert {f["path"].split("/")[1] for f in report["findings"]} == {"demo-core"}
    assert {f["level"] for f in report["findings"]} == {"error"}
    assert report["command"][-5:] == ["--package", "demo-core", "--", "-D", "warnings"]
    # control: the workspace root lints both members, at their own levels
    whole = json.loads(cli("lint", "clippy", str(demo), "--image", clippy_image.reference,
                           "--format", "json").stdout)
    assert {f["path"].split("/")[1] for f in whole["findings"]} == {"demo-core", "demo-app"}
    assert "warning" in {f["level"] for f in whole["findings"]}
