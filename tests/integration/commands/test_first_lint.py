"""A new user's first lint, exactly as README's "a first lint, from nothing" gives it: four
commands, no Docker, no registry of images, no digest copied by hand (issue 23, "Done means").

    pylint-sandbox image build --toolchain 1.95.0
    pylint-sandbox prefetch --vm-assets
    pylint-sandbox fetch-deps .
    pylint-sandbox lint clippy . --accel tcg

Run where a user is: a HOME of its own with nothing in it (so ~/.roteiro is the default
home, created by the first command), an empty CARGO_HOME, the example workspace copied to
a directory under that HOME. The toolchain is the host's installed rustup 1.95.0 (the
installation scripts/test makes): Rust's own distribution is not reachable from the
machines this runs on (`--from-dist` is proven against a stand-in, tests/unit/image).
TCG is opted into as README says a host without KVM must.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
EXE = Path(sys.executable).with_name("pylint-sandbox")


@pytest.mark.timeout(2400)
def test_four_commands_from_nothing_to_a_report(tmp_path: Path) -> None:
    home = tmp_path / "home"
    tree = shutil.copytree(ROOT / "examples" / "demo-workspace", home / "src" / "demo")
    rustup = os.environ.get("RUSTUP_HOME") or str(Path.home() / ".rustup")
    env = {"PATH": os.environ["PATH"], "HOME": str(home), "RUSTUP_HOME": rustup,
           "CARGO_HOME": str(tmp_path / "cargo-home"), "LANG": "C.UTF-8"}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(EXE), *args], cwd=tree, env=env, capture_output=True, text=True,
                              timeout=1800, check=False)

    built = run("image", "build", "--toolchain", "1.95.0")
    assert built.returncode == 0, built.stderr[-3000:]
    reference = built.stdout.strip()
    assert reference.startswith("localhost/roteiro/clippy:1.95.0@sha256:")
    config = home / ".roteiro" / "config.toml"
    assert f'image = "{reference}"' in config.read_text(), built.stderr[-2000:]  # no digest copied by hand

    assets = run("prefetch", "--vm-assets")
    assert assets.returncode == 0, assets.stderr[-3000:]
    fetched = run("fetch-deps", ".")
    assert fetched.returncode == 0, fetched.stderr[-3000:]

    linted = run("lint", "clippy", ".", "--accel", "tcg", "--format", "json")
    assert linted.returncode == 1, linted.stderr[-3000:]  # the example's findings, as documented
    report = json.loads(linted.stdout)
    assert report["provenance"]["image_reference"] == reference
    assert report["isolation"]["accelerator"] == "tcg" and report["isolation"]["hardware_isolated"] is False
    codes = sorted(finding["code"] for finding in report["findings"])
    assert len(codes) == 3 and all(code.startswith("clippy::") for code in codes), codes
    assert report["summary"]["build_succeeded"] is True
