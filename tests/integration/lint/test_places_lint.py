"""A tree and a home lint wherever they are on the host (issue 21, item 0).

The guest mounts every tree under vm/mounts.py GUEST_TREES, never at its host path among
the image's own directories: there, nothing under /root could be linted by root (the
image's /root is 0700 and cargo runs unprivileged: "could not find `Cargo.toml` in
`/root/proj`"), so the dependency cache, staged under root's default ROTEIRO_HOME
/root/.roteiro, never worked either; a tree under /dev/shm or /cargo-home was refused.

The places share one boot (each lint under TCG costs 10-20 s): the lint's own steps
(lint.steps_for: the probes, then the pinned clippy command) with one clippy step per
place, each in its tree as the lint runs it. The home test is the CLI as a root user runs
it, with the default home layout (ROTEIRO_HOME unset, a HOME under /root).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from roteiro_py import lint
from roteiro_py.config import Settings
from roteiro_py.process.grants import GrantSet
from roteiro_py.reference import parse_pinned
from roteiro_py.store import Store
from roteiro_py.vm.disks import scratch
from roteiro_py.vm.disks.rootfs import rootfs_image
from roteiro_py.vm.mounts import GUEST_TREES
from roteiro_py.vm.options import VmOptions
from roteiro_py.vm.qemu.backend import QemuBackend
from tests.integration.lint.lint_support import EXE, HOME, USES_FMT, Image, LocalRegistry, crate_tree

LIB = "pub fn one() -> u32 {\n    return 1;\n}\n"

#: How long the host path of the near-PATH_MAX tree is: its files (`/src/lib.rs`) stay
#: under PATH_MAX (4096) in the guest with GUEST_TREES before them, as on the host.
LONG_PATH = 4000


def _crate(path: Path, name: str) -> Path:
    (path / "src").mkdir(parents=True)
    (path / "Cargo.toml").write_text(f'[package]\nname = "{name}"\nversion = "0.1.0"\nedition = "2021"\n')
    (path / "Cargo.lock").write_text(f'version = 4\n[[package]]\nname = "{name}"\nversion = "0.1.0"\n')
    (path / "src" / "lib.rs").write_text(LIB)
    return path


@pytest.fixture
def places(tmp_path: Path) -> Iterator[list[Path]]:
    """One tree in each kind of place, removed after (those outside tmp_path included)."""
    tag = f"roteiro-places-{uuid.uuid4().hex[:8]}"
    made: list[Path] = []  # top directories this fixture created outside tmp_path
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    long = tmp_path / "long"
    while len(str(long)) < LONG_PATH - 200:
        long = long / ("d" * 150)
    long = long / ("e" * (LONG_PATH - len(str(long)) - 1))
    for top in (Path("/root") / tag, Path("/dev/shm") / tag, Path("/usr/local/lib") / tag,
                Path("/run") / tag, Path("/cargo-home") / tag):
        made.append(top.parent if top.parent == Path("/cargo-home") and not top.parent.exists() else top)
        top.mkdir(parents=True)
    trees = [
        made[0] / "proj",  # the image's /root is 0700; the host's too
        private / "proj",  # a host directory no one else may enter
        made[1] / "proj",  # /dev is the VM's own
        tmp_path / "proj",  # the guest's /tmp is a fresh tmpfs
        Path("/usr/local/lib") / tag / "proj",  # where the image's toolchain lives
        Path("/run") / tag / "proj",
        Path("/cargo-home") / tag / "proj",  # the guest's CARGO_HOME
        tmp_path / "proc" / "sys" / "dev" / "tmp" / "cargo-home",  # the VM's names, below a tree's root
        tmp_path / "a b" / "ção ü",  # a space and non-ASCII
        long,  # near PATH_MAX
    ]
    try:
        yield [_crate(tree, f"place{index}") for index, tree in enumerate(trees)]
    finally:
        for top in made:
            shutil.rmtree(top, ignore_errors=True)


def _lints(stdout: bytes, code: str) -> list[dict]:  # type: ignore[type-arg]
    """cargo's compiler messages of lint `code`, as it printed them."""
    lines = [json.loads(line) for line in stdout.decode().splitlines() if line.startswith("{")]
    return [line for line in lines if line.get("reason") == "compiler-message"
            and (line["message"].get("code") or {}).get("code") == code]


@pytest.mark.timeout(900)
def test_a_tree_lints_wherever_it_is_on_the_host(places: list[Path], clippy_image: Image,
                                                 tmp_path: Path) -> None:
    image = Store.default().resolve(parse_pinned(clippy_image.reference, source="test"))
    rootfs = rootfs_image(image.layers, image.manifest_digest).path
    disk = scratch.create_scratch(tmp_path / "scratch.ext4", 512)
    settings = Settings()
    env = lint.guest_env(image)
    argv = lint.clippy_command(settings)
    steps, atoms = [], set()
    for tree in places:
        shaped = lint.Tree(asked=tree, workspace=tree, repo_root=tree)
        found = lint.steps_for(shaped, settings, env, argv)
        steps = steps or found[:2]  # the probes, once
        steps.append(found[2])
        atoms |= lint.grant_for(shaped, None, None).atoms
    backend = QemuBackend(VmOptions(rootfs=rootfs, scratch=disk, accel="tcg"))
    job = backend.run_steps(steps, GrantSet(frozenset(atoms)), stop_on_failure=False,
                            template_steps=2)
    assert job.completed, (job.failure, job.console[-2000:])
    assert [step.exit for step in job.steps[:2]] == [0, 0], job.steps[:2]
    for tree, outcome in zip(places, job.steps[2:], strict=True):
        said = outcome.stdout + outcome.stderr
        assert outcome.exit == 0, (str(tree)[:300], outcome.stderr[-2000:])
        found = _lints(outcome.stdout, "clippy::needless_return")
        assert found, (str(tree)[:300], outcome.stdout[-2000:])
        # cargo's own paths name the tree as the host knows it; the guest's never shows
        assert found[0]["manifest_path"] == f"{tree}/Cargo.toml"
        assert found[0]["message"]["spans"][0]["file_name"] == "src/lib.rs"
        assert GUEST_TREES.encode() not in said


@pytest.mark.timeout(2400)
def test_the_dependency_cache_works_under_a_home_in_root(clippy_image: Image,
                                                         local_registry: LocalRegistry) -> None:
    """A root user's default layout: ROTEIRO_HOME unset, its home under /root (0700), the
    tree there too. The store and the VM assets are the provisioned ones, hard-linked (what
    `prefetch` would have put there); the package store is filled by fetch-deps and every
    cache is made by these lints, in that home."""
    home = Path("/root") / f"roteiro-test-home-{uuid.uuid4().hex[:8]}"
    try:
        (home / ".roteiro").mkdir(parents=True)
        for part in ("store", "vm"):
            subprocess.run(["cp", "-al", str(HOME / part), str(home / ".roteiro" / part)], check=True)
        tree = crate_tree(home / "proj", local_registry, ["loopfmt"], USES_FMT, name="rooted")
        lib = USES_FMT
        env = {name: value for name, value in os.environ.items() if not name.startswith("ROTEIRO_")}
        env.update(HOME=str(home), ROTEIRO_VM_ACCEL="tcg", **local_registry.env)
        fetched = subprocess.run([str(EXE), "fetch-deps", str(tree)], capture_output=True, text=True,
                                 env=env, timeout=600, check=False)
        assert fetched.returncode == 0, fetched.stderr
        assert list((home / ".roteiro" / "packages" / "crates").glob("*.crate"))  # the default home's

        def lint_json() -> dict:  # type: ignore[type-arg]
            done = subprocess.run([str(EXE), "lint", "clippy", str(tree), "--image",
                                   clippy_image.reference, "--format", "json"],
                                  capture_output=True, text=True, env=env, timeout=1500, check=False)
            assert done.returncode in (0, 1), done.stdout[-2000:] + done.stderr[-3000:]
            return json.loads(done.stdout)  # type: ignore[no-any-return]

        first = lint_json()
        assert first["dependency_cache"]["state"] == "built", first["dependency_cache"]
        assert first["summary"]["dependencies_compiled"] == 0 and first["summary"]["dependencies_fresh"] >= 1
        assert any(f["code"] == "clippy::needless_return" and f["path"] == "src/lib.rs"
                   for f in first["findings"]), first["findings"]
        assert list((home / ".roteiro" / "cache" / "deps").glob("*.ext4"))  # the default home's
        (tree / "src" / "lib.rs").write_text(lib + "pub fn two() -> u32 { 2 }\n")  # a one-line edit
        second = lint_json()
        assert second["dependency_cache"]["state"] == "used", second["dependency_cache"]
        assert second["dependency_cache"]["key"] == first["dependency_cache"]["key"]
        assert second["summary"]["dependencies_compiled"] == 0 and second["summary"]["build_succeeded"]
    finally:
        shutil.rmtree(home, ignore_errors=True)
