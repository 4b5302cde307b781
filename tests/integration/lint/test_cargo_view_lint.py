"""The guest sees only the vendored view of what the lockfile pins, and that is enough.

The host here holds more than the tree under lint pins: in the package store (shared by
every project of the host, filled by `fetch-deps`), another project's registry package and
private git checkout, each holding PRIVATE; in the host's cargo home, a cached `.crate`
holding PRIVATE and a credentials.toml with a token. The tree pins `loopfmt` from the
loopback registry and `gdep` from the loopback git host (lint_support.LocalRegistry: no
internet). A real lint of the tree works (the view is complete for cargo --offline
--locked in the guest), and a shell in the same guest, with the grant the lint computes,
finds under /cargo-home only the pinned packages' files, each package's
.cargo-checksum.json and the view's sources.toml: no `.git`, no `.crate`, nothing of
the other project or of the host's cargo home, and PRIVATE nowhere it can read.

Before issue 20 the view was a copy of what host cargo had left in $CARGO_HOME (the same
test then filled it with host cargo from crates.io and file:// repositories).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from roteiro_py import lint
from roteiro_py.process.sandbox import Command
from roteiro_py.reference import parse_pinned
from roteiro_py.store import Store
from roteiro_py.vm.disks import scratch
from roteiro_py.vm.disks.rootfs import rootfs_image
from roteiro_py.vm.mounts import GUEST_CARGO_HOME, GUEST_TREES
from roteiro_py.vm.options import VmOptions
from roteiro_py.vm.qemu.backend import QemuBackend
from tests.integration.lint.lint_support import FMT_LIB, USES_FMT, Image, LocalRegistry, cli, crate_tree, git_lock_entry

PRIVATE = "PRIVATE-CHECKOUT-MARKER-71"
TOKEN = "HOST-CARGO-TOKEN-SECRET-9"
LINTED_LIB = USES_FMT + "\npub fn from_git() -> u64 {\n    gdep::G\n}\n"


@pytest.fixture(scope="module")
def shared_host(tmp_path_factory: pytest.TempPathFactory,
                local_registry: LocalRegistry) -> tuple[Path, dict[str, str]]:
    """(the tree to lint, the environment of its lint): the store and the host's cargo
    home also hold another project's packages."""
    base = tmp_path_factory.mktemp("cargo-view")
    cargo_home = base / "cargo-home"
    cache = cargo_home / "registry" / "cache" / "index.crates.io-1949cf8c6b5b557f"
    cache.mkdir(parents=True)
    (cache / "hostonly-1.0.0.crate").write_text(PRIVATE)
    (cargo_home / "credentials.toml").write_text(f'[registries.local]\ntoken = "{TOKEN}"\n')
    (cargo_home / "config.toml").write_text((local_registry.cargo_home / "config.toml").read_text())
    env = {**local_registry.env, "CARGO_HOME": str(cargo_home)}

    local_registry.publish("privfmt", nonce=PRIVATE)
    url, commit = local_registry.git_repository("privdep", f'pub const K: &str = "{PRIVATE}";\n')
    other = crate_tree(base / "other-project", local_registry, ["privfmt"], "")
    lock = other / "Cargo.lock"
    lock.write_text(lock.read_text() + git_lock_entry("privdep", url, commit))
    done = cli("fetch-deps", str(other), env=env)
    assert done.returncode == 0, done.stderr

    url, commit = local_registry.git_repository("gdep", "pub const G: u64 = 7;\n")
    tree = crate_tree(base / "linted", local_registry, ["loopfmt"], LINTED_LIB)
    manifest = tree / "Cargo.toml"
    manifest.write_text(manifest.read_text() + f'gdep = {{ git = "{url}" }}\n')
    lock = tree / "Cargo.lock"
    lock.write_text(lock.read_text().replace('dependencies = ["loopfmt"]', 'dependencies = ["gdep", "loopfmt"]')
                    + git_lock_entry("gdep", url, commit))
    done = cli("fetch-deps", str(tree), env=env)
    assert done.returncode == 0, done.stderr
    return tree, env


def test_a_tree_with_registry_and_git_dependencies_lints_from_its_view(
        shared_host: tuple[Path, dict[str, str]], clippy_image: Image) -> None:
    tree, env = shared_host
    done = cli("lint", "clippy", str(tree), "--image", clippy_image.reference, "--format", "json", env=env)
    assert done.returncode == 1, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["summary"]["build_succeeded"] is True
    assert any(f["code"] == "clippy::needless_return" and f["path"] == "src/lib.rs"
               for f in report["findings"]), report["findings"]


@pytest.mark.timeout(600)
def test_the_guest_finds_only_the_pinned_packages_under_its_cargo_home(
        shared_host: tuple[Path, dict[str, str]], clippy_image: Image, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    tree_path, env = shared_host
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    tree = lint.locate(tree_path)
    registry, git = lint.package_cache(tree)
    grant = lint.grant_for(tree, registry, git)
    image = Store.default().resolve(parse_pinned(clippy_image.reference, source="test"))
    rootfs = rootfs_image(image.layers, image.manifest_digest).path
    disk = scratch.create_scratch(tmp_path / "scratch.ext4", 64)
    backend = QemuBackend(VmOptions(rootfs=rootfs, scratch=disk, accel="tcg"))
    host_cargo = os.environ["CARGO_HOME"]
    script = (f"find {GUEST_CARGO_HOME} -type f | sort; echo ==; "
              f"find {GUEST_CARGO_HOME} -name .git -o -name '*.crate'; echo ==; "
              # every tree the guest sees is under GUEST_TREES (vm/mounts.py)
              f"grep -rl -e {PRIVATE} -e {TOKEN} {GUEST_CARGO_HOME} {GUEST_TREES} 2>/dev/null; echo ==; "
              f"grep -rl 'pub const G' {GUEST_CARGO_HOME}; echo ==; "
              f"ls {host_cargo} 2>&1; echo ==; "
              f"cat {GUEST_CARGO_HOME}/git/*/gdep-0.1.0/src/lib.rs "
              f"{GUEST_CARGO_HOME}/registry/*/loopfmt-1.0.0/src/lib.rs")
    job = backend.run_steps([Command("sh", ("-c", script), tree.workspace, {"PATH": "/usr/bin:/bin"},
                                     timeout=240)], grant)
    assert job.completed and job.steps, (job.failure, job.console[-2000:])
    files, hidden, grep, found, host, pinned = job.steps[0].stdout.decode().split("==\n")
    listed = set(files.splitlines())
    packages = {f"{GUEST_CARGO_HOME}/registry/0/loopfmt-1.0.0", f"{GUEST_CARGO_HOME}/git/0/gdep-0.1.0"}
    assert listed == {f"{GUEST_CARGO_HOME}/registry/sources.toml"} | {
        f"{package}/{name}" for package in packages
        for name in ("Cargo.toml", "src/lib.rs", ".cargo-checksum.json")}, files
    assert hidden.strip() == "", hidden
    assert grep.strip() == "", grep
    assert found.strip() == f"{GUEST_CARGO_HOME}/git/0/gdep-0.1.0/src/lib.rs", found  # grep's control
    assert "No such file or directory" in host, host
    # control: what the lockfile pins is there, whole
    assert pinned == "pub const G: u64 = 7;\n" + FMT_LIB, pinned
