"""The dependency cache's skeleton (roteiro_py/depcache/skeleton.py): the tree's manifests
written back from their values, its lockfile, its configuration's [profile], and every
target a stub, which real cargo reads as the same packages and targets as the tree, holding
no byte of the tree's code and no file cargo could compile but a stub (the review's three
attacks are SkeletonUnsafe, each beside the same tree without its hostile line, which cargo
checks); its digest moves with what shapes the dependencies' build and not with the
members' code or comments; hostile trees are refused or left out without a read outside
the workspace; its parsing is bounded in bytes and time; and the cache key covers each of
its inputs.

Host cargo runs here only on fixtures this file writes (and their skeletons), offline, with
an empty CARGO_HOME and a target directory of its own under the test's tmp_path.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path
from typing import Any

import pytest

from roteiro_py.cargo.lockfile import path_packages_in
from roteiro_py.config import VmSettings
from roteiro_py.depcache import skeleton
from roteiro_py.depcache.skeleton import (
    CONFIG_KEYS_ALLOWED,
    INVALID_MANIFEST,
    MAX_PARSED_BYTES,
    PROFILE_KEYS_REFUSED,
    STUB,
    Skeleton,
    SkeletonLimits,
    SkeletonUnsafe,
    build_skeleton,
    cache_key,
)
from roteiro_py.errors import DeadlineExceeded, LockfileWouldBeWritten, TreeFileRefused, TreeTooLarge
from roteiro_py.untrusted import is_sanitised

#: In every source file of the fixture, inside a compile_error!: cargo fails on the tree
#: naming it, and no byte of it may reach a skeleton.
MARKER = "TREE-SOURCE-MARKER-7f3a"
SOURCE = f'compile_error!("{MARKER}");\nfn main() {{}}\n'
#: In files outside the workspace that hostile links and paths point at.
OUTSIDE_MARKER = "OUTSIDE-THE-WORKSPACE-51c9"
LIMITS = SkeletonLimits(max_files=10_000, max_depth=64)

ROOT_MANIFEST = """[workspace]
members = ["crates/*", "patched"]
resolver = "2"

[profile.dev]
opt-level = 1

[patch.crates-io]
patched = { path = "patched" }
"""
APP_MANIFEST = """[package]
name = "app"
version = "0.1.0"
edition = "2021"

[dependencies]
engine = { path = "../engine" }
pathdep = { path = "../../vendor/pathdep" }
patched = "0.1"

[[bench]]
name = "b"
harness = false
"""
ENGINE_MANIFEST = """[package]
name = "engine"
version = "0.1.0"
edition = "2021"
build = "meta/gen.rs"

[lib]
path = "lib/engine.rs"

[[bin]]
name = "explicit-bin"
path = "tools/explicit.rs"
"""
#: The workspace's cargo configuration: a profile the skeleton carries, and a key it leaves out.
CONFIG = '[profile.dev.package."*"]\nopt-level = 0\n\n[term]\nverbose = false\n'

#: The files of the fixture that cargo takes as target roots (the skeleton stubs them)...
TARGET_ROOTS = (
    "crates/app/build.rs", "crates/app/src/main.rs", "crates/app/src/bin/tool.rs",
    "crates/app/src/bin/multi/main.rs", "crates/app/src/bin/alias.rs",
    "crates/app/tests/it.rs", "crates/app/tests/suite/main.rs",
    "crates/app/examples/demo.rs", "crates/app/examples/multi/main.rs", "crates/app/benches/b.rs",
    "crates/engine/lib/engine.rs", "crates/engine/tools/explicit.rs", "crates/engine/meta/gen.rs",
    "vendor/pathdep/src/lib.rs", "patched/src/lib.rs", "crates/macros/src/lib.rs",
)
#: ...and the ones it does not (modules, helpers): code, never in the skeleton.
NOT_TARGETS = ("crates/app/src/util.rs", "crates/app/src/bin/multi/helper.rs",
               "crates/app/tests/common/mod.rs", "crates/engine/lib/inner.rs", "notes/sketch.rs")
#: The manifests, written back from their values.
MANIFESTS = ("Cargo.toml", "crates/app/Cargo.toml", "crates/engine/Cargo.toml", "vendor/pathdep/Cargo.toml",
             "patched/Cargo.toml", "crates/macros/Cargo.toml")
#: Every data file of the skeleton (the rest are stubs).
COPIED = (*MANIFESTS, "Cargo.lock", ".cargo/config.toml")


def cargo(args: list[str], cwd: Path, target_dir: Path) -> subprocess.CompletedProcess[str]:
    """Host cargo on a fixture of this file: offline, with an empty CARGO_HOME of its own
    beside `target_dir` (cargo makes `registry/` in it for the [patch.crates-io], and the
    session's is checked to stay empty: test_hermetic.py)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("CARGO_") and k not in ("RUSTC_WRAPPER", "RUSTFLAGS")}
    home = target_dir.with_name(target_dir.name + "-cargo-home")
    home.mkdir(parents=True, exist_ok=True)
    env["CARGO_HOME"] = str(home)
    env["CARGO_TARGET_DIR"] = str(target_dir)
    return subprocess.run(["cargo", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=240, check=False)


def package(root: Path, directory: str, manifest: str) -> None:
    (root / directory).mkdir(parents=True, exist_ok=True)
    (root / directory / "Cargo.toml").write_text(manifest)


def simple(name: str) -> str:
    return f'[package]\nname = "{name}"\nversion = "0.1.0"\nedition = "2021"\n'


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The fixture workspace, with the lockfile real cargo writes for it (path packages only)."""
    root = tmp_path_factory.mktemp("template") / "ws"
    package(root, "", ROOT_MANIFEST)
    package(root, "crates/app", APP_MANIFEST)
    package(root, "crates/engine", ENGINE_MANIFEST)
    package(root, "vendor/pathdep", simple("pathdep"))
    package(root, "patched", simple("patched"))
    package(root, "crates/macros", simple("macros") + "\n[lib]\nproc-macro = true\n")
    (root / ".cargo").mkdir()
    (root / ".cargo" / "config.toml").write_text(CONFIG)
    for rel in TARGET_ROOTS + NOT_TARGETS:
        if rel != "crates/app/src/bin/alias.rs":
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(SOURCE)
    (root / "crates/app/src/bin/alias.rs").symlink_to("../main.rs")  # a link cargo follows
    done = cargo(["generate-lockfile", "--offline"], root, tmp_path_factory.mktemp("target"))
    assert done.returncode == 0, done.stderr
    return root


@pytest.fixture
def tree(template: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(template, tmp_path / "ws", symlinks=True))


def skeleton_of(root: Path, dest: Path, limits: SkeletonLimits = LIMITS) -> Skeleton:
    dest.mkdir()
    return build_skeleton(root, dest, limits)


def files_under(root: Path) -> dict[str, bytes]:
    """Every file below `root` by relative path (links read as links)."""
    found: dict[str, bytes] = {}
    for directory, _, names in os.walk(root):
        for name in names:
            path = Path(directory) / name
            rel = str(path.relative_to(root))
            found[rel] = os.readlink(path).encode() if path.is_symlink() else path.read_bytes()
    return found


def contains(root: Path, needle: str) -> bool:
    return any(needle.encode() in data for data in files_under(root).values())


def toml_of(path: Path) -> dict[str, Any]:
    return tomllib.loads(path.read_text())


def refusal(caught: pytest.ExceptionInfo[Exception]) -> str:
    error = caught.value
    assert isinstance(error, TreeFileRefused | TreeTooLarge | LockfileWouldBeWritten)
    return error.guidance().render_text()


# -- what the skeleton holds ------------------------------------------------------------


def test_the_skeleton_holds_the_manifests_lockfile_config_and_a_stub_per_target(tree: Path,
                                                                                 tmp_path: Path) -> None:
    assert contains(tree, MARKER)  # control: the search finds the tree's code where it is
    skeleton = skeleton_of(tree, tmp_path / "skel")
    held = files_under(skeleton.root)
    assert sorted(held) == sorted(COPIED + TARGET_ROOTS)
    assert held["Cargo.lock"] == (tree / "Cargo.lock").read_bytes()  # byte for byte: --locked
    for rel in MANIFESTS:  # the same values, written anew
        assert toml_of(skeleton.root / rel) == toml_of(tree / rel)
    # Only the configuration's [profile]: [term] is left out.
    assert toml_of(skeleton.root / ".cargo/config.toml") == {"profile": toml_of(tree / ".cargo/config.toml")["profile"]}
    for rel in TARGET_ROOTS:
        assert held[rel] == STUB
        assert not (skeleton.root / rel).is_symlink()
        assert (skeleton.root / rel).stat().st_mode & 0o777 == 0o644
    assert not contains(skeleton.root, MARKER)
    assert skeleton.files == len(held)
    assert skeleton.path_packages == ("app", "engine", "macros", "patched", "pathdep")
    assert skeleton.digest.startswith("sha256:") and len(skeleton.digest) == 7 + 64


def targets(root: Path, target_dir: Path) -> dict[str, list[tuple[str, tuple[str, ...], str]]]:
    """Per package, the (name, kinds, source path relative to the workspace) cargo finds."""
    done = cargo(["metadata", "--offline", "--format-version", "1", "--no-deps"], root, target_dir)
    assert done.returncode == 0, done.stderr
    packages = json.loads(done.stdout)["packages"]
    return {p["name"]: sorted((t["name"], tuple(t["kind"]), os.path.relpath(t["src_path"], root))
                              for t in p["targets"]) for p in packages}


def test_cargo_metadata_finds_the_same_packages_and_targets_in_the_skeleton(tree: Path,
                                                                            tmp_path: Path) -> None:
    skeleton = skeleton_of(tree, tmp_path / "skel")
    original = targets(tree, tmp_path / "target")
    assert targets(skeleton.root, tmp_path / "target") == original
    kinds = {kind for found in original.values() for _, target_kinds, _ in found for kind in target_kinds}
    assert kinds == {"lib", "proc-macro", "bin", "test", "example", "bench",
                     "custom-build"}
    assert len(original["app"]) == 10 and sorted(original) == ["app", "engine", "macros", "patched", "pathdep"]
    # Control: the comparison sees a target the skeleton lacks.
    (skeleton.root / "crates/app/tests/suite/main.rs").unlink()
    assert targets(skeleton.root, tmp_path / "target") != original


def test_cargo_check_fails_on_the_tree_and_passes_on_its_skeleton(tree: Path, tmp_path: Path) -> None:
    skeleton = skeleton_of(tree, tmp_path / "skel")
    lock = (skeleton.root / "Cargo.lock").read_bytes()
    argv = ["check", "--offline", "--locked", "--all-targets"]
    failed = cargo(argv, tree, tmp_path / "target-tree")
    assert failed.returncode != 0 and MARKER in failed.stderr  # control: the tree's code runs
    passed = cargo(argv, skeleton.root, tmp_path / "target-skeleton")
    assert passed.returncode == 0, passed.stderr
    assert MARKER not in passed.stderr
    assert (skeleton.root / "Cargo.lock").read_bytes() == lock


def test_the_limits_are_the_staging_caps() -> None:
    vm = VmSettings(stage_max_files=1234, stage_max_depth=56, stage_max_mib=78)
    limits = SkeletonLimits.of(vm)
    assert (limits.max_files, limits.max_depth, limits.max_bytes) == (1234, 56, 78 * 1024 * 1024)
    default = SkeletonLimits.of(VmSettings())
    assert default.max_bytes == SkeletonLimits(1, 1).max_bytes  # the default is the setting's


# -- the digest -------------------------------------------------------------------------


def edit(root: Path, what: str) -> None:
    if what == "member-source":
        (root / "crates/engine/lib/engine.rs").write_text("pub fn changed() {}\n")
    elif what == "new-module":
        (root / "crates/app/src/extra.rs").write_text(SOURCE)
    elif what == "lockfile":
        with (root / "Cargo.lock").open("a") as lock:
            lock.write("\n")
    elif what == "manifest":
        with (root / "crates/app/Cargo.toml").open("a") as manifest:
            manifest.write('\n[features]\nextra = []\n')
    elif what == "config":
        (root / ".cargo/config.toml").write_text(CONFIG.replace("opt-level = 0", "opt-level = 2"))
    elif what == "config-term":  # a key the skeleton leaves out
        (root / ".cargo/config.toml").write_text(CONFIG.replace("verbose = false", "verbose = true"))
    elif what == "comment":
        with (root / "crates/app/Cargo.toml").open("a") as manifest:
            manifest.write("\n# a comment, and no value\n")
    elif what == "layout":  # the same values written otherwise
        manifest = root / "crates/app/Cargo.toml"
        manifest.write_text(manifest.read_text().replace('name = "app"', "name   =   'app'"))
    elif what == "nested-config":  # cargo reads no configuration below the workspace root
        (root / "crates/app/.cargo").mkdir()
        (root / "crates/app/.cargo/config.toml").write_text('[env]\nA = "1"\n')
    elif what == "new-target":
        (root / "crates/app/tests/new.rs").write_text(SOURCE)
    else:
        raise AssertionError(what)


@pytest.mark.parametrize(("what", "moves"), [
    ("member-source", False), ("new-module", False), ("comment", False), ("layout", False),
    ("config-term", False), ("nested-config", False),
    ("lockfile", True), ("manifest", True), ("config", True), ("new-target", True),
])
def test_the_digest_moves_with_what_shapes_the_build_and_not_with_code(tree: Path, tmp_path: Path,
                                                                        what: str, moves: bool) -> None:
    before = skeleton_of(tree, tmp_path / "before")
    assert skeleton_of(tree, tmp_path / "again").digest == before.digest  # the same tree, the same digest
    edit(tree, what)
    after = skeleton_of(tree, tmp_path / "after")
    assert (after.digest != before.digest) is moves
    assert not contains(after.root, MARKER)


@pytest.mark.parametrize(("moved", "to"), [
    ("vendor/pathdep", "vendor/moved"),  # the same manifest, read elsewhere
    ("crates/app/tests/it.rs", "crates/app/tests/it2.rs"),  # a target renamed: another unit graph
])
def test_the_digest_covers_where_a_file_is_not_only_its_bytes(tree: Path, tmp_path: Path, moved: str,
                                                               to: str) -> None:
    before = skeleton_of(tree, tmp_path / "before")
    (tree / to).parent.mkdir(exist_ok=True)
    (tree / moved).rename(tree / to)
    after = skeleton_of(tree, tmp_path / "moved")
    assert after.files == before.files and after.digest != before.digest
    (tree / to).rename(tree / moved)  # control: moved back, the digest is back
    assert skeleton_of(tree, tmp_path / "back").digest == before.digest


# -- hostile trees ----------------------------------------------------------------------


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A file outside the workspace that must never be read into a skeleton: TOML that a
    manifest, a cargo configuration and a lockfile may all hold, its marker in a key."""
    away = tmp_path / "outside"
    away.mkdir()
    secret = away / "secret.toml"
    secret.write_text(f'[profile.dev.package.{OUTSIDE_MARKER}]\nopt-level = 1\n')
    return secret


@pytest.mark.parametrize("where", ["crates/app/Cargo.toml", ".cargo/config.toml", "Cargo.lock"])
def test_a_linked_manifest_config_or_lockfile_is_refused_naming_it(tree: Path, tmp_path: Path, outside: Path,
                                                                    where: str) -> None:
    target = tree / where
    target.parent.mkdir(parents=True, exist_ok=True)
    target.unlink(missing_ok=True)
    target.symlink_to(outside)
    dest = tmp_path / "skel"
    with pytest.raises(TreeFileRefused) as caught:
        skeleton_of(tree, dest)
    text = refusal(caught)
    assert str(target) in text and "symbolic link" in text
    assert not contains(dest, OUTSIDE_MARKER)
    # Control: the same file as a regular copy of the outside file is taken, marker and all.
    target.unlink()
    shutil.copyfile(outside, target)
    assert contains(skeleton_of(tree, tmp_path / "control").root, OUTSIDE_MARKER)


def test_a_cargo_configuration_below_the_root_is_never_read(tree: Path, tmp_path: Path, outside: Path) -> None:
    """cargo reads no configuration below its working directory, the workspace root: the
    skeleton neither copies one nor follows it, even linked outside or holding [env]."""
    before = skeleton_of(tree, tmp_path / "before")
    (tree / "crates/app/.cargo").mkdir()
    (tree / "crates/app/.cargo/config").symlink_to(outside)
    (tree / "crates/engine/.cargo").mkdir()
    (tree / "crates/engine/.cargo/config.toml").write_text('[env]\nA = "1"\n')
    after = skeleton_of(tree, tmp_path / "after")
    assert after.digest == before.digest and files_under(after.root) == files_under(before.root)
    assert not contains(after.root, OUTSIDE_MARKER)
    # Control: the same [env] at the root, where cargo reads it, is judged.
    (tree / ".cargo/config.toml").write_text('[env]\nA = "1"\n')
    with pytest.raises(SkeletonUnsafe):
        skeleton_of(tree, tmp_path / "root")


def test_a_linked_cargo_directory_is_refused(tree: Path, tmp_path: Path, outside: Path) -> None:
    shutil.rmtree(tree / ".cargo")
    (outside.parent / "config.toml").write_text(f"# {OUTSIDE_MARKER}\n")
    (tree / ".cargo").symlink_to(outside.parent)
    with pytest.raises(TreeFileRefused) as caught:
        skeleton_of(tree, tmp_path / "skel")
    assert str(tree / ".cargo") in refusal(caught)
    assert not contains(tmp_path / "skel", OUTSIDE_MARKER)


@pytest.mark.timeout(30)
@pytest.mark.parametrize("where", ["crates/app/Cargo.toml", ".cargo/config.toml"])
def test_a_fifo_where_a_manifest_is_is_refused_without_blocking(tree: Path, tmp_path: Path, where: str) -> None:
    (tree / where).unlink()
    os.mkfifo(tree / where)
    with pytest.raises(TreeFileRefused) as caught:
        skeleton_of(tree, tmp_path / "skel")
    assert str(tree / where) in refusal(caught) and "not a regular file" in refusal(caught)


def test_a_fifo_or_link_named_like_a_source_is_never_opened(tree: Path, tmp_path: Path, outside: Path) -> None:
    """Sources are never read: a FIFO test (which the guest's copy leaves out) is no target,
    a linked one pointing outside is a stub, and neither blocks nor leaks."""
    os.mkfifo(tree / "crates/app/tests/fifo.rs")
    (tree / "crates/app/tests/linked.rs").symlink_to(outside)
    skeleton = skeleton_of(tree, tmp_path / "skel")
    assert not (skeleton.root / "crates/app/tests/fifo.rs").exists()
    assert (skeleton.root / "crates/app/tests/linked.rs").read_bytes() == STUB
    assert not contains(skeleton.root, OUTSIDE_MARKER)


def test_a_missing_lockfile_is_refused_as_a_lockfile_to_be_written(tree: Path, tmp_path: Path) -> None:
    (tree / "Cargo.lock").unlink()
    with pytest.raises(LockfileWouldBeWritten) as caught:
        skeleton_of(tree, tmp_path / "skel")
    assert "Cargo.lock" in refusal(caught)


def deep(root: Path, levels: int) -> None:
    """`levels` directories named d, one in the other, a manifest at the bottom (through
    descriptors: pathlib's mkdir(parents=True) recurses past Python's limit)."""
    fds = [os.open(root, os.O_RDONLY | os.O_DIRECTORY)]
    try:
        for _ in range(levels):
            os.mkdir("d", dir_fd=fds[-1])
            fds.append(os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fds[-1]))
        manifest = os.open("Cargo.toml", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fds[-1])
        os.write(manifest, simple("deep").encode())
        os.close(manifest)
    finally:
        for fd in fds:
            os.close(fd)


def undeep(root: Path, levels: int) -> None:
    """Remove what deep() made, bottom up (pytest's cleanup, shutil.rmtree, recurses)."""
    (root / ("d/" * levels) / "Cargo.toml").unlink()
    for level in range(levels, 0, -1):
        (root / ("d/" * level)).rmdir()


def test_a_tree_deeper_than_the_cap_is_refused_naming_the_setting(tree: Path, tmp_path: Path) -> None:
    deep(tree, 40)
    # Control: within the cap, the deep manifest is in the skeleton.
    held = skeleton_of(tree, tmp_path / "fits", SkeletonLimits(max_files=10_000, max_depth=40)).root
    assert (held / ("d/" * 40) / "Cargo.toml").is_file()
    with pytest.raises(TreeTooLarge) as caught:
        skeleton_of(tree, tmp_path / "skel", SkeletonLimits(max_files=10_000, max_depth=39))
    assert "stage_max_depth" in refusal(caught) and "39" in refusal(caught)


def test_a_very_deep_tree_is_refused_not_a_recursion_error(tree: Path, tmp_path: Path) -> None:
    deep(tree, 1500)  # a recursive walk would raise RecursionError (exit 4)
    try:
        with pytest.raises(TreeTooLarge) as caught:
            skeleton_of(tree, tmp_path / "skel", SkeletonLimits(max_files=100_000, max_depth=128))
    finally:
        undeep(tree, 1500)
    assert "stage_max_depth" in refusal(caught)


def test_more_entries_than_the_cap_is_refused_naming_the_setting(tree: Path, tmp_path: Path) -> None:
    entries = sum(len(dirs) + len(names) for _, dirs, names in os.walk(tree))
    skeleton_of(tree, tmp_path / "fits", SkeletonLimits(max_files=entries, max_depth=64))  # control
    with pytest.raises(TreeTooLarge) as caught:
        skeleton_of(tree, tmp_path / "skel", SkeletonLimits(max_files=entries - 1, max_depth=64))
    assert "stage_max_files" in refusal(caught) and f"more than {entries - 1}" in refusal(caught)


def test_manifests_past_the_byte_caps_are_refused(tree: Path, tmp_path: Path) -> None:
    size = len((tree / "crates/app/Cargo.toml").read_bytes())
    with pytest.raises(TreeFileRefused) as caught:
        skeleton_of(tree, tmp_path / "one", SkeletonLimits(10_000, 64, max_manifest_bytes=size - 1))
    assert f"larger than {size - 1} bytes" in refusal(caught)
    written = files_under(skeleton_of(tree, tmp_path / "measure").root)
    total = sum(len(written[rel]) for rel in COPIED)  # what is written, stubs aside
    skeleton_of(tree, tmp_path / "fits", SkeletonLimits(10_000, 64, max_bytes=total))  # control
    with pytest.raises(TreeTooLarge) as too_large:
        skeleton_of(tree, tmp_path / "all", SkeletonLimits(10_000, 64, max_bytes=total - 1))
    assert "stage_max_mib" in refusal(too_large)


@pytest.mark.parametrize("escape", ["../../../outside/secret.toml", "ABSOLUTE", "/etc/passwd",
                                    "../../../../../../../../etc/passwd"])
def test_a_target_path_leaving_the_workspace_is_unsafe_and_never_touched(tree: Path, tmp_path: Path,
                                                                         outside: Path, escape: str) -> None:
    """Outside the workspace, the cache's VM holds something else (its image, its cargo
    home): no stub can stand in there, so cargo would compile whatever it finds."""
    escape = str(outside) if escape == "ABSOLUTE" else escape
    manifest = tree / "crates/app/Cargo.toml"
    manifest.write_text(manifest.read_text() + f'\n[[test]]\nname = "t"\npath = "{escape}"\n')
    before = outside.read_bytes(), outside.stat().st_mtime_ns
    passwd = Path("/etc/passwd").read_bytes()
    with pytest.raises(SkeletonUnsafe) as caught:
        skeleton_of(tree, tmp_path / "skel")
    assert escape in str(caught.value) and "outside the workspace" in str(caught.value)
    held = files_under(tmp_path / "skel")
    assert not contains(tmp_path / "skel", OUTSIDE_MARKER) and b"root:" not in b"".join(held.values())
    assert (outside.read_bytes(), outside.stat().st_mtime_ns) == before
    assert Path("/etc/passwd").read_bytes() == passwd
    assert sorted(p.name for p in outside.parent.iterdir()) == ["secret.toml"]
    # Control: the same target inside the workspace is a stub.
    manifest.write_text(manifest.read_text().replace(escape, "tests/it.rs"))
    assert files_under(skeleton_of(tree, tmp_path / "inside").root)["crates/app/tests/it.rs"] == STUB


def test_an_explicit_path_inside_the_workspace_through_dotdot_is_stubbed(tree: Path, tmp_path: Path) -> None:
    (tree / "shared").mkdir()
    (tree / "shared/common.rs").write_text(SOURCE)
    manifest = tree / "crates/app/Cargo.toml"
    manifest.write_text(manifest.read_text() + '\n[[example]]\nname = "shared"\npath = "../../shared/common.rs"\n')
    skeleton = skeleton_of(tree, tmp_path / "skel")
    assert (skeleton.root / "shared/common.rs").read_bytes() == STUB
    assert targets(skeleton.root, tmp_path / "target") == targets(tree, tmp_path / "target")


def test_git_and_cargo_target_directories_are_not_walked_but_a_source_dir_named_target_is(
        tree: Path, tmp_path: Path) -> None:
    for excluded in (".git", "target", "crates/app/target"):
        package(tree, excluded, simple("excluded"))
    (tree / "target/CACHEDIR.TAG").write_text("Signature: 8a477f597d28d172789f06886806bc55\n")
    (tree / "crates/app/target/.rustc_info.json").write_text("{}")
    package(tree, "crates/app/src/target", simple("kept"))  # no marker: a source directory
    held = files_under(skeleton_of(tree, tmp_path / "skel").root)
    assert "crates/app/src/target/Cargo.toml" in held
    assert not [rel for rel in held if rel.startswith((".git/", "target/", "crates/app/target/"))]


#: Run inside a mount namespace by the test below: the guest's copy of the tree
#: (share_image.stage_tree) and the skeleton of the same tree, as JSON.
_BOTH_WALKS = """
import json, sys
from pathlib import Path
from roteiro_py.depcache.skeleton import SkeletonLimits, build_skeleton
from roteiro_py.vm.disks.share_image import stage_tree
tree, out = Path(sys.argv[1]), Path(sys.argv[2])
(out / "copy").mkdir()
(out / "skel").mkdir()
report = stage_tree(tree, out / "copy")
build_skeleton(tree, out / "skel", SkeletonLimits(max_files=10_000, max_depth=64))
print(json.dumps({"left_out": report.left_out(),
                  "skeleton": sorted(str(p.relative_to(out / "skel"))
                                     for p in (out / "skel").rglob("*") if p.is_file())}))
"""


@pytest.mark.skipif(shutil.which("unshare") is None or os.geteuid() != 0,
                    reason="a mount inside the tree needs unshare as root")
def test_a_file_on_another_filesystem_is_left_out_as_the_guests_copy_leaves_it_out(
        tree: Path, tmp_path: Path) -> None:
    """The skeleton walks what the guest's copy holds: an example bind-mounted from another
    filesystem is left out of the copy ("other filesystem"), so the skeleton has no target
    for it either (else its key covers, and its build has, a target the guest's cargo never
    sees). Control: the copy does leave it out, and an example beside it is a stub."""
    other, out = tmp_path / "other", tmp_path / "out"
    other.mkdir()
    out.mkdir()
    demo = tree / "crates/app/examples/demo.rs"
    (tmp_path / "walks.py").write_text(_BOTH_WALKS)
    script = (f"mount -t tmpfs none {other} && echo 'fn main() {{}}' > {other}/demo.rs && "
              f"mount --bind {other}/demo.rs {demo} && "
              f"exec {sys.executable} {tmp_path}/walks.py {tree} {out}")
    worktree = str(Path(__file__).resolve().parents[2])
    done = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, text=True,
                          check=False, env={**os.environ, "PYTHONPATH": worktree})
    assert done.returncode == 0, done.stderr
    both = json.loads(done.stdout)
    assert ["crates/app/examples/demo.rs", "other filesystem"] in both["left_out"]
    assert "crates/app/examples/multi/main.rs" in both["skeleton"]
    assert "crates/app/examples/demo.rs" not in both["skeleton"]


def test_odd_names_and_odd_manifests_are_handled_not_crashed_on(tree: Path, tmp_path: Path) -> None:
    """Non-UTF-8 and 255-byte names are mirrored byte for byte; a manifest that is not TOML
    (a test fixture) is INVALID_MANIFEST and makes no package; a refusal names an odd path
    safely."""
    odd = os.fsdecode(b"crates/m\xff")
    package(tree, odd, simple("odd"))
    long_test = "t" * 252 + ".rs"
    for name in (os.fsdecode(b"x\xfe.rs"), long_test):
        (tree / odd / "tests").mkdir(exist_ok=True)
        (tree / odd / "tests" / name).write_text(SOURCE)
    (tree / "fixtures/bad").mkdir(parents=True)
    (tree / "fixtures/bad/Cargo.toml").write_bytes(b"[package\nname = \xff\n")
    (tree / "fixtures/bad/src").mkdir()
    (tree / "fixtures/bad/src/lib.rs").write_text(SOURCE)
    skeleton = skeleton_of(tree, tmp_path / "skel")
    assert (skeleton.root / odd / "tests" / os.fsdecode(b"x\xfe.rs")).read_bytes() == STUB
    assert (skeleton.root / odd / "tests" / long_test).read_bytes() == STUB
    assert (skeleton.root / "fixtures/bad/Cargo.toml").read_bytes() == INVALID_MANIFEST
    assert not (skeleton.root / "fixtures/bad/src/lib.rs").exists()
    assert skeleton_of(tree, tmp_path / "again").digest == skeleton.digest
    os.mkfifo(tree / odd / ".cargo-fifo")
    (tree / odd / "sub").mkdir()
    os.mkfifo(tree / odd / "sub" / "Cargo.toml")
    with pytest.raises(TreeFileRefused) as caught:
        skeleton_of(tree, tmp_path / "refused")
    text = refusal(caught)
    assert "m\\udcff" in text and is_sanitised(text, keep_newlines=True)


def test_a_lockfile_path_package_without_a_cargo_name_is_refused(tmp_path: Path) -> None:
    lockfile = tmp_path / "Cargo.lock"
    good = {"package": [{"name": "a", "version": "1"}, {"name": "b", "version": "1", "source": "registry+x"},
                        {"name": "a", "version": "2"}]}
    assert path_packages_in(lockfile, good) == ["a"]  # control: unique, sources left out
    for bad in ("../x", 7, "a" * 65, "\x1b[31m"):
        with pytest.raises(TreeFileRefused):
            path_packages_in(lockfile, {"package": [{"name": bad, "version": "1"}]})


# -- the cache key ----------------------------------------------------------------------

KEY_INPUTS: dict[str, Any] = {
    "image_digest": "sha256:" + "a" * 64,
    "skeleton_digest": "sha256:" + "b" * 64,
    "argv": ["cargo", "check", "--locked"],
    "env": {"RUSTFLAGS": "-C debuginfo=0", "CARGO_INCREMENTAL": "0"},
    "disk_mib": 4096,
}
CHANGED: dict[str, Any] = {
    "recipe": ["sh", "-c", "cleanup"],
    "image_digest": "sha256:" + "c" * 64,
    "skeleton_digest": "sha256:" + "d" * 64,
    "argv": ["cargo", "check", "--locked", "--release"],
    "env": {"RUSTFLAGS": "-C debuginfo=1", "CARGO_INCREMENTAL": "0"},
    "disk_mib": 8192,
}


def key(**changes: Any) -> str:
    return cache_key(**{**KEY_INPUTS, **changes})


def test_the_same_inputs_give_the_same_key() -> None:
    first = key()
    assert len(first) == 64 and all(c in "0123456789abcdef" for c in first)
    assert key() == first
    # The environment's order is not an input.
    assert key(env=dict(reversed(KEY_INPUTS["env"].items()))) == first


@pytest.mark.parametrize("field", sorted(CHANGED))
def test_each_input_changes_the_key(field: str) -> None:
    assert key(**{field: CHANGED[field]}) != key()


def test_the_key_frames_its_inputs_apart() -> None:
    assert key(argv=["a b"]) != key(argv=["a", "b"])
    assert key(recipe=["a"], argv=[]) != key(recipe=[], argv=["a"])
    assert key(env={"A": "1 B=2"}) != key(env={"A": "1", "B": "2"})
    assert key(env={}, argv=["A=1"]) != key(env={"A": "1"}, argv=[])
    assert key(env={"A": os.fsdecode(b"\xff")}) != key(env={"A": "\\udcff"})  # no crash on surrogates


@pytest.mark.parametrize(("directory", "path", "expected"), [
    ("crates/app/", "../../shared/common.rs", "shared/common.rs"),
    ("crates/app/", "./src/../lib.rs", "crates/app/lib.rs"),
    ("", "src/lib.rs", "src/lib.rs"),
    ("crates/app/", "../../../outside/secret.rs", None),
    ("", "../ws/src/lib.rs", None),  # back in through the parent: still a path outside first
    ("crates/app/", "/etc/passwd", None),
    ("", "//etc/passwd", None),
])
def test_an_explicit_target_path_is_kept_only_inside_the_workspace(directory: str, path: str,
                                                                  expected: str | None) -> None:
    assert skeleton._inside(directory, path) == expected


# -- the reviewed attacks (issue 12): the tree's bytes compiled or loaded in the cache's build --

#: Printed by a hostile payload when cargo compiles or runs it.
PAYLOAD_MARKER = "PAYLOAD-RAN-3e1d"
#: Valid TOML (the Rust line is a comment, the Rust block comment hides the TOML from rustc)
#: and a valid build script: what the review made cargo run from a copied manifest.
POLYGLOT_MANIFEST = (f'#[cfg(all())] fn main() {{ panic!("{PAYLOAD_MARKER}"); }} /*\n'
                     + simple("payload") + "# */\n")
#: Valid cargo configuration and a valid library root that fails to compile, naming itself.
POLYGLOT_CONFIG = f'#[cfg(all())] compile_error!("{PAYLOAD_MARKER}"); /*\n[term]\nverbose = false\n# */\n'
ATTACK_ROOT = '[workspace]\nmembers = ["app"]\nresolver = "2"\n'


def attack_tree(tmp_path: Path, hostile: str, *, config: str | None = None,
                files: dict[str, str] | None = None) -> Path:
    """A one-member workspace whose member manifest ends with `hostile`, with `files`
    beside it and the lockfile real cargo writes for it (the hostile line touches none)."""
    root = tmp_path / "attack"
    package(root, "", ATTACK_ROOT)
    package(root, "app", simple("app") + hostile)
    (root / "app/src").mkdir()
    (root / "app/src/lib.rs").write_text("pub fn f() {}\n")
    for rel, text in (files or {}).items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    if config is not None:
        (root / ".cargo").mkdir(exist_ok=True)
        (root / ".cargo/config.toml").write_text(config)
    done = cargo(["generate-lockfile", "--offline"], root, tmp_path / "target-lock")
    assert done.returncode == 0, done.stderr
    return root


def check(root: Path, target_dir: Path) -> subprocess.CompletedProcess[str]:
    return cargo(["check", "--offline", "--locked"], root, target_dir)


def assert_control_builds(root: Path, tmp_path: Path) -> None:
    """Control arm: the tree without its hostile line makes a skeleton that cargo checks."""
    made = skeleton_of(root, tmp_path / "control-skel")
    passed = check(made.root, tmp_path / "target-control")
    assert passed.returncode == 0, passed.stderr
    assert PAYLOAD_MARKER not in passed.stderr


def test_a_build_script_path_naming_a_polyglot_manifest_is_unsafe(tmp_path: Path) -> None:
    hostile = 'build = "../payload/Cargo.toml"\n'
    root = attack_tree(tmp_path, "", files={"payload/Cargo.toml": POLYGLOT_MANIFEST})
    manifest = root / "app/Cargo.toml"
    manifest.write_text(manifest.read_text().replace('edition = "2021"\n', f'edition = "2021"\n{hostile}'))
    ran = check(root, tmp_path / "target-tree")  # the danger is real: cargo runs that manifest
    assert ran.returncode != 0 and PAYLOAD_MARKER in ran.stderr
    with pytest.raises(skeleton.SkeletonUnsafe) as caught:
        skeleton_of(root, tmp_path / "skel")
    assert "payload/Cargo.toml" in str(caught.value) and "app/Cargo.toml" in str(caught.value)
    manifest.write_text(manifest.read_text().replace(hostile, ""))
    assert_control_builds(root, tmp_path)


@pytest.mark.parametrize("named", ["sub/.cargo/config", "../.cargo/config.toml"])
def test_a_lib_path_naming_a_cargo_config_is_unsafe(tmp_path: Path, named: str) -> None:
    hostile = f'\n[lib]\npath = "{named}"\n'
    root = attack_tree(tmp_path, hostile, config=POLYGLOT_CONFIG,
                       files={"app/sub/.cargo/config": POLYGLOT_CONFIG})
    compiled = check(root, tmp_path / "target-tree")  # the danger is real: rustc compiles it
    assert compiled.returncode != 0 and PAYLOAD_MARKER in compiled.stderr
    with pytest.raises(skeleton.SkeletonUnsafe) as caught:
        skeleton_of(root, tmp_path / "skel")
    assert named in str(caught.value)
    manifest = root / "app/Cargo.toml"
    manifest.write_text(manifest.read_text().replace(hostile, "\n"))
    assert_control_builds(root, tmp_path)


def test_an_env_ld_preload_config_is_unsafe(tmp_path: Path) -> None:
    hostile = '[env]\nLD_PRELOAD = { value = "blob/.cargo/config", relative = true }\n'
    root = attack_tree(tmp_path, "", config=hostile, files={"blob/.cargo/config": "not an ELF\n"})
    loaded = check(root, tmp_path / "target-tree")  # the danger is real: cargo's rustc preloads it
    assert "LD_PRELOAD" in loaded.stderr and "blob/.cargo/config" in loaded.stderr
    with pytest.raises(skeleton.SkeletonUnsafe) as caught:
        skeleton_of(root, tmp_path / "skel")
    assert "[env]" in str(caught.value) and ".cargo/config.toml" in str(caught.value)
    (root / ".cargo/config.toml").write_text("[term]\nverbose = false\n")
    assert_control_builds(root, tmp_path)


# -- manifests are written back, never copied -------------------------------------------

COMMENT_MARKER = "COMMENT-POLYGLOT-9b2e"


def test_a_manifest_comment_never_reaches_the_skeleton_and_moves_no_key(tree: Path, tmp_path: Path) -> None:
    before = skeleton_of(tree, tmp_path / "before")
    manifest = tree / "crates/app/Cargo.toml"
    manifest.write_text(f"#[cfg(all())] fn main() {{}} /* {COMMENT_MARKER}\n" + manifest.read_text() + "# */\n")
    assert contains(tree, COMMENT_MARKER)  # control: the search finds it in the tree
    after = skeleton_of(tree, tmp_path / "after")
    assert not contains(after.root, COMMENT_MARKER)
    assert toml_of(after.root / "crates/app/Cargo.toml") == toml_of(manifest)
    assert after.digest == before.digest  # cargo hashes values, and so does the key


@pytest.mark.parametrize("broken", [b"[package\nname = \xff\n", b"[package]\nname = 'a'\nx = 1" + b"1" * 5000 + b"\n",
                                    b"[package]\nname = 'a'\nx = 0x" + b"f" * 5000 + b"\n"])
def test_a_manifest_that_is_not_toml_is_the_invalid_marker_and_cargo_fails_on_both(tmp_path: Path,
                                                                                  broken: bytes) -> None:
    """Not UTF-8, an integer tomllib cannot convert, one tomli_w cannot write: each is
    INVALID_MANIFEST, which cargo refuses as it refuses the tree's file, and two different
    broken files are two different keys."""
    root = attack_tree(tmp_path, "")
    before = skeleton_of(root, tmp_path / "valid")
    (root / "app/Cargo.toml").write_bytes(broken)
    made = skeleton_of(root, tmp_path / "skel")
    assert (made.root / "app/Cargo.toml").read_bytes() == INVALID_MANIFEST
    assert made.digest != before.digest
    for where in (root, made.root):  # the lint's cargo and the cache's both fail on it
        failed = cargo(["metadata", "--offline", "--format-version", "1", "--no-deps"], where, tmp_path / "t")
        assert failed.returncode != 0 and "app/Cargo.toml" in failed.stderr
    passed = cargo(["metadata", "--offline", "--format-version", "1", "--no-deps"], before.root, tmp_path / "t")
    assert passed.returncode == 0, passed.stderr  # control: the valid one is read
    (root / "app/Cargo.toml").write_bytes(broken + b"\n# another\n")
    assert skeleton_of(root, tmp_path / "other").digest != made.digest


def test_the_invalid_marker_is_neither_toml_nor_rust() -> None:
    with pytest.raises(tomllib.TOMLDecodeError):
        tomllib.loads(INVALID_MANIFEST.decode())
    assert b"fn " not in INVALID_MANIFEST and STUB not in INVALID_MANIFEST


PROJECT_MANIFEST = '[project]\nname = "legacy"\nversion = "0.1.0"\nedition = "2021"\n'


def test_a_project_table_is_a_package(tmp_path: Path) -> None:
    """`[project]`, the legacy name of `[package]`: its targets are stubbed, and its build
    script path is judged."""
    root = tmp_path / "ws"
    package(root, "", PROJECT_MANIFEST)
    for rel in ("src/main.rs", "build.rs", "tests/it.rs"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(SOURCE)
    assert cargo(["generate-lockfile", "--offline"], root, tmp_path / "t").returncode == 0
    argv = ["check", "--offline", "--locked", "--all-targets"]
    failed = cargo(argv, root, tmp_path / "target-tree")
    assert failed.returncode != 0 and MARKER in failed.stderr  # control: the tree's code is built
    made = skeleton_of(root, tmp_path / "skel")
    for rel in ("src/main.rs", "build.rs", "tests/it.rs"):
        assert (made.root / rel).read_bytes() == STUB
    passed = cargo(argv, made.root, tmp_path / "target-skel")
    assert passed.returncode == 0, passed.stderr
    (root / "Cargo.toml").write_text(PROJECT_MANIFEST + 'build = "Cargo.toml"\n')
    with pytest.raises(SkeletonUnsafe):
        skeleton_of(root, tmp_path / "unsafe")


@pytest.mark.parametrize("hostile", [
    '\n[lib]\npath = "Cargo.toml"\n',
    '\n[[test]]\nname = "t"\npath = "../../Cargo.lock"\n',
    '\n[[bin]]\nname = "b"\npath = "../../.cargo/config.toml"\n',
    '\n[[example]]\nname = "e"\npath = "./src/../Cargo.toml"\n',
    '\n[[bench]]\nname = "c"\npath = "../engine/Cargo.toml"\n',
    "BUILD-LIST",
])
def test_a_target_path_naming_a_data_file_is_unsafe(tree: Path, tmp_path: Path, hostile: str) -> None:
    manifest = tree / "crates/app/Cargo.toml"
    text = manifest.read_text()
    if hostile == "BUILD-LIST":  # cargo's unstable multiple build scripts
        text = text.replace('edition = "2021"\n', 'edition = "2021"\nbuild = ["build.rs", "../../Cargo.lock"]\n')
    else:
        text += hostile
    manifest.write_text(text)
    with pytest.raises(SkeletonUnsafe) as caught:
        skeleton_of(tree, tmp_path / "skel")
    assert "crates/app/Cargo.toml" in str(caught.value) and "cargo would compile its bytes" in str(caught.value)


# -- the cargo configuration ------------------------------------------------------------

#: A value for each key the skeleton accepts in the tree's configuration.
ALLOWED_SAMPLES = {
    "profile": '[profile.release]\nlto = true\n',
    "alias": '[alias]\nb = "build"\n',
    "term": '[term]\ncolor = "never"\n',
    "cargo-new": '[cargo-new]\nvcs = "none"\n',
    "net": '[net]\nretry = 5\ngit-fetch-with-cli = true\n',
    "http": '[http]\ntimeout = 60\n',
    "registries": '[registries.mine]\nindex = "sparse+https://example.invalid/index/"\n',
    "registry": '[registry]\ndefault = "mine"\n',
    "credential-alias": '[credential-alias]\nmine = ["/bin/false"]\n',
    "doc": '[doc]\nbrowser = "firefox"\n',
    "future-incompat-report": '[future-incompat-report]\nfrequency = "never"\n',
    "cache": '[cache]\nauto-clean-frequency = "never"\n',
    "install": '[install]\nroot = "/nowhere"\n',
}
#: Keys that reach the build (or that the skeleton does not know), each as cargo reads it.
REFUSED_SAMPLES = {
    "paths": 'paths = ["vendor/pathdep"]\n',
    "include": 'include = ["blob/.cargo/config"]\n',
    "build": '[build]\nrustc-wrapper = "blob/.cargo/config"\n',
    "env": '[env]\nPERL5OPT = "-Mblob"\n',
    "target": '[target.x86_64-unknown-linux-gnu]\nlinker = "blob/.cargo/config"\n',
    "source": '[source.crates-io]\nreplace-with = "vendored"\n\n[source.vendored]\ndirectory = "vendor"\n',
    "patch": '[patch.crates-io]\npatched = { path = "patched" }\n',
    "resolver": '[resolver]\nincompatible-rust-versions = "allow"\n',
    "unstable": '[unstable]\nbuild-std = ["core"]\n',
    "a-key-of-a-later-cargo": '[a-key-of-a-later-cargo]\nx = 1\n',
}


def test_every_allowed_key_has_a_sample() -> None:
    assert set(ALLOWED_SAMPLES) == CONFIG_KEYS_ALLOWED
    assert not set(REFUSED_SAMPLES) & CONFIG_KEYS_ALLOWED


@pytest.mark.parametrize("key", sorted(REFUSED_SAMPLES))
def test_a_config_key_that_reaches_the_build_is_unsafe_naming_it(tree: Path, tmp_path: Path, key: str) -> None:
    (tree / ".cargo/config.toml").write_text(REFUSED_SAMPLES[key] + "\n" + CONFIG)  # top-level keys first
    with pytest.raises(SkeletonUnsafe) as caught:
        skeleton_of(tree, tmp_path / "skel")
    assert key in str(caught.value) and ".cargo/config.toml" in str(caught.value)
    assert "which would reach the dependencies' build" in str(caught.value)


@pytest.mark.parametrize("key", sorted(ALLOWED_SAMPLES))
def test_an_allowed_config_key_passes_and_only_the_profile_is_written(tree: Path, tmp_path: Path,
                                                                      key: str) -> None:
    (tree / ".cargo/config.toml").write_text(ALLOWED_SAMPLES[key])
    written = skeleton_of(tree, tmp_path / "skel").root / ".cargo/config.toml"
    if key == "profile":
        assert toml_of(written) == toml_of(tree / ".cargo/config.toml")
    else:
        assert not written.exists()


def test_a_config_with_every_allowed_key_keeps_only_its_profile(tree: Path, tmp_path: Path) -> None:
    (tree / ".cargo/config.toml").write_text("\n".join(ALLOWED_SAMPLES.values()))
    made = skeleton_of(tree, tmp_path / "skel")
    assert toml_of(made.root / ".cargo/config.toml") == {"profile": {"release": {"lto": True}}}
    passed = cargo(["check", "--offline", "--locked"], made.root, tmp_path / "target")
    assert passed.returncode == 0, passed.stderr


@pytest.mark.parametrize("key", PROFILE_KEYS_REFUSED)
@pytest.mark.parametrize(("where", "table"), [
    (".cargo/config.toml", "profile.release"),
    (".cargo/config.toml", "profile.release.package.app"),
    (".cargo/config.toml", "profile.test.build-override"),
    ("Cargo.toml", "profile.release"),
    ("Cargo.toml", "profile.dev.package.engine.build-override"),
    ("crates/app/Cargo.toml", "profile.dev"),
])
def test_a_profile_option_that_loads_code_is_unsafe(tree: Path, tmp_path: Path, key: str, where: str,
                                                    table: str) -> None:
    path = tree / where
    value = {"codegen-backend": '"cranelift"', "rustflags": '["-C", "linker=blob"]', "trim-paths": '"all"'}[key]
    with path.open("a") as out:
        out.write(f"\n[{table}]\nopt-level = 3\n")
    skeleton_of(tree, tmp_path / "control")  # control: the same table without that option
    with path.open("a") as out:
        out.write(f"{key} = {value}\n")
    with pytest.raises(SkeletonUnsafe) as caught:
        skeleton_of(tree, tmp_path / "skel")
    assert key in str(caught.value) and table in str(caught.value) and where in str(caught.value)


def test_both_config_files_are_unsafe(tree: Path, tmp_path: Path) -> None:
    (tree / ".cargo/config").write_text(CONFIG)
    with pytest.raises(SkeletonUnsafe) as caught:
        skeleton_of(tree, tmp_path / "skel")
    assert "both" in str(caught.value)
    # Control: `config` alone is read, and its profile written where cargo reads it.
    (tree / ".cargo/config.toml").unlink()
    made = skeleton_of(tree, tmp_path / "config-alone")
    assert toml_of(made.root / ".cargo/config.toml") == {"profile": toml_of(tree / ".cargo/config")["profile"]}
    assert not (made.root / ".cargo/config").exists()


def test_a_config_that_does_not_parse_is_unsafe(tree: Path, tmp_path: Path) -> None:
    (tree / ".cargo/config.toml").write_text("[profile\n")
    with pytest.raises(SkeletonUnsafe) as caught:
        skeleton_of(tree, tmp_path / "skel")
    assert ".cargo/config.toml" in str(caught.value)


# -- bounds -----------------------------------------------------------------------------


def test_the_parse_cap_counts_every_manifest_read_and_written_back(tree: Path, tmp_path: Path) -> None:
    made = skeleton_of(tree, tmp_path / "measure")
    read = sum(len(p.read_bytes()) for p in tree.rglob("Cargo.toml")) + len((tree / ".cargo/config.toml").read_bytes())
    written = sum(len((made.root / rel).read_bytes()) for rel in (*MANIFESTS, ".cargo/config.toml"))
    skeleton_of(tree, tmp_path / "fits", SkeletonLimits(10_000, 64, max_parsed_bytes=read + written))  # control
    with pytest.raises(SkeletonUnsafe) as caught:
        skeleton_of(tree, tmp_path / "skel", SkeletonLimits(10_000, 64, max_parsed_bytes=read + written - 1))
    assert "too many manifest bytes to parse" in str(caught.value)
    assert f"pass {read + written - 1} bytes" in str(caught.value)
    assert SkeletonLimits(1, 1).max_parsed_bytes == MAX_PARSED_BYTES == 16 * 1024 * 1024


@pytest.mark.timeout(60)
def test_a_manifest_that_grows_when_written_back_stops_at_the_cap(tree: Path, tmp_path: Path) -> None:
    """Each element of an array of tables is written under its full dotted name: 5,000
    under a 100 KiB name would be 500 MB. The cap stops it as it is written."""
    import tracemalloc

    element = "{ " + ", ".join(f'f{i} = "{"v" * 10}"' for i in range(8)) + " }"
    grown = tree / "fixtures/grown/Cargo.toml"
    grown.parent.mkdir(parents=True)
    grown.write_text(f'[a.{"k" * 100_000}]\nx = [' + ",".join([element] * 5000) + "]\n")
    tracemalloc.start()
    try:
        with pytest.raises(SkeletonUnsafe) as caught:
            skeleton_of(tree, tmp_path / "skel")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert "too many manifest bytes to parse" in str(caught.value) and peak < 100 * 1024 * 1024
    # Control: the same array under a short name is written back.
    grown.write_text("[a.k]\nx = [" + ",".join([element] * 5000) + "]\n")
    assert toml_of(skeleton_of(tree, tmp_path / "short").root / "fixtures/grown/Cargo.toml") == toml_of(grown)


def test_the_deadline_stops_the_walk(tree: Path, tmp_path: Path) -> None:
    dest = tmp_path / "skel"
    dest.mkdir()
    with pytest.raises(DeadlineExceeded) as caught:
        build_skeleton(tree, dest, LIMITS, until=time.monotonic() - 1, seconds=42)
    assert "42" in caught.value.guidance().summary and "skeleton" in caught.value.guidance().summary
    assert sorted(files_under(dest)) == ["Cargo.lock"]  # stopped at the walk's first entry
    # Control: a deadline ahead is met.
    ahead = tmp_path / "ahead"
    ahead.mkdir()
    assert build_skeleton(tree, ahead, LIMITS, until=time.monotonic() + 600, seconds=600).files > 1


# -- the invariant, checked from disk ---------------------------------------------------


def test_the_check_catches_a_manifest_copied_as_it_is(tree: Path, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Were manifests written byte for byte (as before issue 12's review), _verify sees
    it: the fixture's are not TOML as tomli_w writes it."""
    skeleton_of(tree, tmp_path / "control")  # control: written back, they pass

    def verbatim(walk: Any, rel: str, document: Any) -> bytes:
        return (tree / rel).read_bytes()

    monkeypatch.setattr(skeleton, "_write_back", verbatim)
    with pytest.raises(SkeletonUnsafe) as caught:
        skeleton_of(tree, tmp_path / "skel")
    assert "broke its own rule" in str(caught.value)


def test_the_check_catches_a_target_path_naming_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Were the target paths not judged before writing, _verify sees the build script
    path naming a manifest."""
    root = attack_tree(tmp_path, "", files={"payload/Cargo.toml": simple("payload")})
    manifest = root / "app/Cargo.toml"
    manifest.write_text(manifest.read_text().replace('edition = "2021"\n',
                                                     'edition = "2021"\nbuild = "../payload/Cargo.toml"\n'))
    monkeypatch.setattr(skeleton, "_check_targets", lambda walk: None)
    with pytest.raises(SkeletonUnsafe) as caught:
        skeleton_of(root, tmp_path / "skel")
    assert "broke its own rule" in str(caught.value) and "../payload/Cargo.toml" in str(caught.value)
    # Control: with a target path naming a stub, the same check passes.
    manifest.write_text(manifest.read_text().replace("../payload/Cargo.toml", "src/lib.rs"))
    skeleton_of(root, tmp_path / "control")
