"""The guest sees only what the lockfile pins of the host's cargo cache, and that is enough.

The host cache here is filled by real cargo (crates.io and local git repositories) into a
private CARGO_HOME: the tree under lint pins `itoa 1.0.15` and a git crate; another
project on the same host fetched `itoa 1.0.14` and a private git checkout. A real lint
of the tree works (the view is complete for cargo --offline --locked in the guest), and
a shell in the same guest, with the grant the lint computes, can neither list nor read
what the other project fetched.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from lint_support import Image, cli

from roteiro_py import lint
from roteiro_py.process.sandbox import Command
from roteiro_py.reference import parse_pinned
from roteiro_py.store import Store
from roteiro_py.vm.mounts import GUEST_CARGO_HOME, GUEST_TREES
from roteiro_py.vm.qemu import scratch
from roteiro_py.vm.qemu.backend import QemuBackend
from roteiro_py.vm.qemu.rootfs import rootfs_image

PRIVATE = "PRIVATE-CHECKOUT-MARKER-71"


def _git_repo(path: Path, name: str, body: str) -> None:
    (path / "src").mkdir(parents=True)
    (path / "Cargo.toml").write_text(f'[package]\nname = "{name}"\nversion = "0.1.0"\nedition = "2021"\n')
    (path / "src" / "lib.rs").write_text(body)
    git = ["git", "-c", "user.email=t@t", "-c", "user.name=t", "-c", "init.defaultBranch=main"]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "x"]):
        subprocess.run([*git, *args], cwd=path, check=True, capture_output=True, timeout=60)


def _tree(path: Path, dependencies: str, lib: str) -> Path:
    (path / "src").mkdir(parents=True)
    (path / "Cargo.toml").write_text(f'[package]\nname = "{path.name}"\nversion = "0.1.0"\n'
                                     f'edition = "2021"\n[dependencies]\n{dependencies}')
    (path / "src" / "lib.rs").write_text(lib)
    return path


def _fetch(tree: Path, cargo_home: Path) -> None:
    """Host cargo fills the private cache (test scaffolding: fetch-deps refuses file://)."""
    env = {**os.environ, "CARGO_HOME": str(cargo_home)}
    for args in (["generate-lockfile", "-q"], ["fetch", "-q", "--locked"]):
        done = subprocess.run(["cargo", *args], cwd=tree, env=env, capture_output=True, text=True,
                              timeout=600, check=False)
        assert done.returncode == 0, done.stderr


@pytest.fixture(scope="session")
def shared_host_cache(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(the tree to lint, the host cargo home also holding another project's fetches)."""
    base = tmp_path_factory.mktemp("cargo-view")
    cargo_home = base / "cargo-home"
    _git_repo(base / "gdep", "gdep", "pub const G: u64 = 7;\n")
    _git_repo(base / "privdep", "privdep", f'pub const K: &str = "{PRIVATE}";\n')
    other = _tree(base / "other-project", f'itoa = "=1.0.14"\nprivdep = {{ git = "file://{base}/privdep" }}\n',
                  "pub fn k() -> &'static str { privdep::K }\n")
    _fetch(other, cargo_home)
    tree = _tree(base / "linted", f'itoa = "=1.0.15"\ngdep = {{ git = "file://{base}/gdep" }}\n',
                 "pub fn render() -> String {\n    let mut b = itoa::Buffer::new();\n"
                 "    return b.format(gdep::G).to_string();\n}\n")
    _fetch(tree, cargo_home)
    assert list(cargo_home.glob("git/checkouts/privdep-*/*/src/lib.rs"))  # the other project's is there
    assert list(cargo_home.glob("registry/src/*/itoa-1.0.14"))
    return tree, cargo_home


def test_a_tree_with_registry_and_git_dependencies_lints_from_its_view(
        shared_host_cache: tuple[Path, Path], clippy_image: Image) -> None:
    tree, cargo_home = shared_host_cache
    done = cli("lint", "clippy", str(tree), "--image", clippy_image.reference, "--format", "json",
               env={"CARGO_HOME": str(cargo_home)})
    assert done.returncode == 1, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["summary"]["build_succeeded"] is True
    assert any(f["code"] == "clippy::needless_return" and f["path"] == "src/lib.rs"
               for f in report["findings"]), report["findings"]


@pytest.mark.timeout(600)
def test_the_guest_cannot_list_or_read_what_another_project_fetched(
        shared_host_cache: tuple[Path, Path], clippy_image: Image, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    tree_path, cargo_home = shared_host_cache
    monkeypatch.setenv("CARGO_HOME", str(cargo_home))
    tree = lint.locate(tree_path)
    registry, git = lint.package_cache(tree)
    grant = lint.grant_for(tree, registry, git)
    image = Store.default().resolve(parse_pinned(clippy_image.reference, source="test"))
    rootfs = rootfs_image(image.layers, image.manifest_digest).path
    disk = scratch.create_scratch(tmp_path / "scratch.ext4", 64)
    backend = QemuBackend(rootfs=rootfs, scratch=disk, scratch_guest=lint.GUEST_SCRATCH, accel="tcg")
    script = (f"find {GUEST_CARGO_HOME} -name '*.rs' -o -name '*.crate' | sort; echo ==; "
              f"cat {GUEST_CARGO_HOME}/git/checkouts/privdep-*/*/src/lib.rs 2>&1; echo ==; "
              # every tree the guest sees is under GUEST_TREES (vm/mounts.py)
              f"grep -rl {PRIVATE} {GUEST_CARGO_HOME} {GUEST_TREES} 2>/dev/null; echo ==; "
              f"cat {GUEST_CARGO_HOME}/git/checkouts/gdep-*/*/src/lib.rs")
    job = backend.run_steps([Command("sh", ("-c", script), tree.workspace, {"PATH": "/usr/bin:/bin"},
                                     timeout=240)], grant)
    assert job.completed and job.steps, (job.failure, job.console[-2000:])
    listing, private, grep, pinned = job.steps[0].stdout.decode().split("==\n")
    assert "itoa-1.0.15.crate" in listing and "/itoa-1.0.15/src/lib.rs" in listing
    assert "gdep-" in listing  # control arm: the pinned crate and checkout are there
    assert "itoa-1.0.14" not in listing and "privdep" not in listing, listing
    assert PRIVATE not in private and "No such file" in private, private
    assert grep.strip() == "", grep
    assert pinned.strip() == "pub const G: u64 = 7;"
