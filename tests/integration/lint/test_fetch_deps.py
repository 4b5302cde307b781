"""fetch-deps fills the cache without running the tree's configuration or code on the host.

Uses real cargo and crates.io (reachable from every machine this project runs on).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXE = Path(sys.executable).with_name("pylint-sandbox")


def hostile_tree(base: Path) -> tuple[Path, Path]:
    """A crate depending on `itoa` whose config, toolchain file and build script leave markers."""
    tree = base / "tree"
    (tree / "src").mkdir(parents=True)
    (tree / ".cargo").mkdir()
    marker = base / "markers"
    marker.mkdir()
    (tree / "Cargo.toml").write_text(
        '[package]\nname = "victim"\nversion = "0.1.0"\nedition = "2021"\nbuild = "build.rs"\n'
        '[dependencies]\nitoa = "=1.0.15"\n')
    (tree / "src" / "main.rs").write_text("fn main() {}\n")
    (tree / "build.rs").write_text(f'fn main() {{ std::fs::write("{marker}/build-rs", "").unwrap(); }}\n')
    subprocess.run(["cargo", "generate-lockfile", "--offline", "-q"], cwd=tree, check=False,
                   capture_output=True)
    if not (tree / "Cargo.lock").exists():
        subprocess.run(["cargo", "generate-lockfile", "-q"], cwd=tree, check=True, timeout=300)
    wrapper = base / "evil-rustc"
    wrapper.write_text(f'#!/bin/sh\ntouch {marker}/build-rustc\nexec rustc "$@"\n')
    wrapper.chmod(0o755)
    (tree / ".cargo" / "config.toml").write_text(
        f'[build]\nrustc = "{wrapper}"\n[env]\nEVIL = "1"\n')
    return tree, marker


@pytest.fixture
def cargo_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "cargo-home"
    monkeypatch.setenv("CARGO_HOME", str(home))
    return home


def test_fetch_deps_runs_none_of_the_trees_config(tmp_path: Path, cargo_home: Path) -> None:
    tree, marker = hostile_tree(tmp_path)
    result = subprocess.run([str(EXE), "fetch-deps", str(tree)], capture_output=True, text=True,
                            timeout=600, env=os.environ)
    assert result.returncode == 0, result.stderr
    assert list(marker.iterdir()) == [], "the tree's build.rustc ran on the host"
    unpacked = list((cargo_home / "registry" / "src").glob("*/itoa-1.0.15/src/lib.rs"))
    assert unpacked, "the crate must be unpacked, or the read-only guest would fail to unpack it"
    assert sorted(p.name for p in tree.iterdir()) == [".cargo", "Cargo.lock", "Cargo.toml", "build.rs", "src"]


def test_control_arm_plain_cargo_fetch_does_run_the_config(tmp_path: Path, cargo_home: Path) -> None:
    """Shows the marker is observable: the naive way runs the tree's build.rustc."""
    tree, marker = hostile_tree(tmp_path)
    subprocess.run(["cargo", "fetch"], cwd=tree, capture_output=True, timeout=600, check=False)
    assert (marker / "build-rustc").exists()


def test_toolchain_file_is_not_consulted(tmp_path: Path, cargo_home: Path) -> None:
    tree, marker = hostile_tree(tmp_path)
    (tree / "rust-toolchain.toml").write_text(f'[toolchain]\npath = "{tmp_path}/no-such-toolchain"\n')
    result = subprocess.run([str(EXE), "fetch-deps", str(tree)], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    assert list(marker.iterdir()) == []


def test_missing_lockfile_is_refused_naming_the_fix(tmp_path: Path, cargo_home: Path) -> None:
    tree, _ = hostile_tree(tmp_path)
    (tree / "Cargo.lock").unlink()
    result = subprocess.run([str(EXE), "fetch-deps", str(tree)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 3
    assert "would write Cargo.lock" in result.stderr and "commit an up-to-date Cargo.lock" in result.stderr
    assert "generate-lockfile" not in result.stderr  # no advice runs host cargo on the tree's sources


@pytest.mark.parametrize("source", ["git+file:///etc/secret-repo#abc", "git+ssh://git@internal/x#abc",
                                    "registry+http://mirror.invalid/index", "git+git://host/x#abc"])
def test_sources_other_than_https_are_refused_before_cargo_runs(tmp_path: Path, cargo_home: Path,
                                                                  source: str) -> None:
    tree, _ = hostile_tree(tmp_path)
    lock = tree / "Cargo.lock"
    lock.write_text(lock.read_text() + f'\n[[package]]\nname = "sneaky"\nversion = "0.1.0"\nsource = "{source}"\n')
    result = subprocess.run([str(EXE), "fetch-deps", str(tree)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 3 and "other than https" in result.stderr and source.split("#")[0] in result.stderr
    assert not list(cargo_home.glob("registry/src/*/itoa-*")), "cargo fetched although refused"
    assert not (cargo_home / "git").exists()


def test_a_manifests_file_git_source_is_never_fetched_by_host_cargo(tmp_path: Path, cargo_home: Path) -> None:
    """The lockfile is unchanged (https only), but a manifest declares `git = "file://..."`:
    cargo fetch --locked would clone it into the host cache before refusing the lockfile."""
    tree, _ = hostile_tree(tmp_path)
    repo = tmp_path / "private-repo"
    (repo / "src").mkdir(parents=True)
    (repo / "Cargo.toml").write_text('[package]\nname = "sneaky"\nversion = "0.1.0"\n')
    (repo / "src" / "lib.rs").write_text("pub const PRIVATE: u8 = 1;\n")
    git = ["git", "-c", "user.email=t@t", "-c", "user.name=t"]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "x"]):
        subprocess.run([*git, *args], cwd=repo, check=True, capture_output=True, timeout=60)
    manifest = tree / "Cargo.toml"
    manifest.write_text(manifest.read_text() + f'sneaky = {{ git = "file://{repo}" }}\n')
    result = subprocess.run([str(EXE), "fetch-deps", str(tree)], capture_output=True, text=True, timeout=600)
    assert result.returncode == 3, result.stdout + result.stderr
    assert "Refused before cargo ran" in result.stderr and f"file://{repo}" in result.stderr
    assert not (cargo_home / "git").exists(), "host cargo cloned the file:// source"
