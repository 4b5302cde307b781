"""`lint clippy --fix` end to end: the VM computes the suggestions, the host writes them,
and the files equal what host `cargo clippy --fix --allow-no-vcs` (the same 1.95.0 as the
test image) leaves on another copy. Host cargo runs only on the tests' own fixtures, with
a CARGO_HOME and target directory of the test's own."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.integration.lint.lint_support import ROOT, Image, cli

HOST_CARGO = Path("/root/.cargo/bin/cargo")
#: The example workspaces with no dependency to fetch and a suggestion to apply.
WORKSPACES = {
    "demo-workspace": ROOT / "examples" / "demo-workspace",
    "cargo-layout": ROOT / "tests" / "data" / "cargo-layout",
    "cargo-labels": ROOT / "tests" / "data" / "cargo-labels",  # its bin does not build
}


def _copy(source: Path, target: Path) -> Path:
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("target", "*.jsonl", "*.txt", "*.py"))
    return target


def _files(root: Path) -> dict[str, bytes]:
    return {path.relative_to(root).as_posix(): path.read_bytes()
            for path in sorted(root.rglob("*")) if path.is_file() and ".git" not in path.parts}


def host_fix(tree: Path, tmp: Path) -> dict[str, bytes]:
    """What host `cargo clippy --fix --allow-no-vcs` leaves in a copy of `tree`."""
    if not HOST_CARGO.exists():
        pytest.skip("no host Rust toolchain at /root/.cargo/bin")
    env = {**os.environ, "CARGO_HOME": str(tmp / "cargo-home"), "CARGO_TARGET_DIR": str(tmp / "host-target"),
           "PATH": f"{HOST_CARGO.parent}:{os.environ['PATH']}", "RUSTUP_TOOLCHAIN": "1.95.0"}
    done = subprocess.run([str(HOST_CARGO), "clippy", "--fix", "--allow-no-vcs", "--offline"], cwd=tree,
                          env=env, capture_output=True, text=True, timeout=600, check=False)
    assert "Fixed" in done.stderr, done.stderr[-2000:]
    return _files(tree)


@pytest.mark.parametrize("name", list(WORKSPACES))
def test_fix_leaves_the_files_host_cargo_clippy_fix_leaves(name: str, clippy_image: Image, tmp_path: Path) -> None:
    source = WORKSPACES[name]
    expected = host_fix(_copy(source, tmp_path / "host"), tmp_path)
    ours = _copy(source, tmp_path / "ours")
    before = _files(ours)
    done = cli("lint", "clippy", str(ours), "--fix", "--allow-no-vcs", "--image", clippy_image.reference,
               "--fail-on", "never", "--no-dep-cache")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "--fix applied" in done.stderr
    after = _files(ours)
    assert after != before, "host cargo changed the files, so ours must have too"
    assert after == expected


def test_fix_patch_prints_a_diff_that_patch_applies_and_writes_nothing(clippy_image: Image, tmp_path: Path) -> None:
    source = WORKSPACES["demo-workspace"]
    expected = host_fix(_copy(source, tmp_path / "host"), tmp_path)
    ours = _copy(source, tmp_path / "ours")
    before = _files(ours)
    done = cli("lint", "clippy", str(ours), "--fix=patch", "--image", clippy_image.reference,
               "--fail-on", "never", "--no-dep-cache")
    assert done.returncode == 0, done.stderr[-3000:]
    assert _files(ours) == before  # the reviewer's path: nothing written, no VCS needed
    assert done.stdout.startswith("--- a/")
    patched = _copy(source, tmp_path / "patched")
    subprocess.run(["patch", "-p1", "-s"], input=done.stdout, text=True, cwd=patched, check=True, timeout=60)
    assert _files(patched) == expected


def _git(root: Path, *args: str) -> None:
    """git on the test's own fixture (never in the product)."""
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=root, check=True,
                   capture_output=True, timeout=60)


def test_a_dirty_tree_is_refused_before_any_vm_and_allow_dirty_fixes_it(
        clippy_image: Image, tmp_path: Path) -> None:
    source = WORKSPACES["demo-workspace"]
    expected = host_fix(_copy(source, tmp_path / "host"), tmp_path)
    ours = _copy(source, tmp_path / "ours")
    _git(ours, "init", "-q")
    _git(ours, "add", ".")
    _git(ours, "commit", "-qm", "c")
    (ours / "NOTES.md").write_text("uncommitted\n")
    before = _files(ours)
    refused = cli("lint", "clippy", str(ours), "--fix", "--image", clippy_image.reference, timeout=120)
    assert refused.returncode == 3, refused.stderr
    assert "uncommitted changes" in refused.stderr and "* NOTES.md (dirty)" in refused.stderr
    assert "--allow-dirty" in refused.stderr
    assert _files(ours) == before
    done = cli("lint", "clippy", str(ours), "--fix", "--allow-dirty", "--image", clippy_image.reference,
               "--fail-on", "never", "--no-dep-cache")
    assert done.returncode == 0, done.stderr[-3000:]
    after = _files(ours)
    assert after.pop("NOTES.md") == b"uncommitted\n"
    assert after == expected
