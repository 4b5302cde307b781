"""The dependency cache in real lints (lint/dep_cache.py): built once per key by a VM that
sees only the skeleton, then used; cargo's own `fresh` flags say what was compiled.

Each test's tree carries a fresh nonce in its manifest, so its key is its own even though
the provisioned ROTEIRO_HOME (and its cache/deps/) is shared across runs of the suite. Its
one dependency, `loopfmt`, comes from the loopback registry (lint_support.LocalRegistry).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import uuid
from pathlib import Path

import pytest

from roteiro_py.lint.dep_cache import BUILDING
from roteiro_py.progress import DEP_CACHE, note_prefix
from tests.integration.lint.lint_support import EXE, HOME, USES_FMT, Image, LocalRegistry, cli, crate_tree

#: A member's build script that overwrites every artifact of the dependency it can reach
#: in the target directory, and plants a file there; it says how many it overwrote.
HOSTILE_BUILD = r'''
use std::{env, fs, path::{Path, PathBuf}};
fn poison(dir: &Path, n: &mut u32) {
    let Ok(entries) = fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() { poison(&path, n); }
        else if path.to_string_lossy().contains("loopfmt") && fs::write(&path, b"poisoned").is_ok() { *n += 1; }
    }
}
fn main() {
    let out = PathBuf::from(env::var("OUT_DIR").unwrap());
    let profile = out.ancestors().nth(3).unwrap().to_path_buf();
    let mut n = 0;
    poison(&profile, &mut n);
    fs::write(profile.join("PLANTED"), b"x").unwrap();
    println!("cargo:warning=poisoned {n} files");
}
'''


def make_tree(path: Path, registry: LocalRegistry, nonce: str, build: str = "fn main() {}\n") -> Path:
    """A crate named `depcached` using loopfmt, `nonce` in its manifest, with a build script."""
    tree = crate_tree(path, registry, ["loopfmt"], USES_FMT, name="depcached")
    manifest = tree / "Cargo.toml"
    manifest.write_text(manifest.read_text().replace(
        "[dependencies]", f'description = "{nonce}"\nbuild = "build.rs"\n[dependencies]'))
    (tree / "build.rs").write_text(build)
    assert cli("fetch-deps", str(tree), env=registry.env).returncode == 0
    return tree


def lint_json(tree: Path, image: Image, env: dict[str, str], *extra: str) -> dict:
    done = cli("lint", "clippy", str(tree), "--image", image.reference, "--format", "json", *extra,
               env=env, timeout=1500)
    assert done.returncode in (0, 1), done.stdout[-2000:] + done.stderr[-3000:]
    return json.loads(done.stdout)


def findings(report: dict) -> list[tuple[str, str, int]]:
    return sorted((f["code"], f["path"], f["line"]) for f in report["findings"])


def cache_file(key: str) -> Path:
    return HOME / "cache" / "deps" / f"{key}.ext4"


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.timeout(2400)
def test_built_once_then_used_and_a_hostile_member_cannot_write_into_it(
        tmp_path: Path, clippy_image: Image, local_registry: LocalRegistry) -> None:
    tree = make_tree(tmp_path / "tree", local_registry, uuid.uuid4().hex)
    first = lint_json(tree, clippy_image, local_registry.env)
    cache = first["dependency_cache"]
    assert cache["state"] == "built", cache
    key = cache["key"]
    assert cache_file(key).is_file()
    # built, then used by the same command: loopfmt was not compiled by the lint itself
    assert first["summary"]["dependencies_fresh"] >= 1
    assert first["summary"]["dependencies_compiled"] == 0
    assert first["summary"]["build_succeeded"] is True
    assert ("clippy::needless_return", "src/lib.rs", 3) in findings(first)
    sealed = sha256(cache_file(key))

    # A member's build script overwrites what it finds of loopfmt under the target dir: in
    # its own run it succeeds (the control arm: it did reach the dependency's artifacts)...
    (tree / "build.rs").write_text(HOSTILE_BUILD)
    hostile = lint_json(tree, clippy_image, local_registry.env)
    assert hostile["dependency_cache"] == {**cache, "state": "used", "build_seconds": None,
                                           "reason": None}
    assert hostile["summary"]["build_succeeded"] is False, hostile["findings"]

    # ... and the next lint of the same lockfile is unaffected: same key, nothing compiled,
    # the same findings, and the cache file holds the bytes it was sealed with.
    (tree / "build.rs").write_text("fn main() {}\n")
    after = lint_json(tree, clippy_image, local_registry.env)
    assert after["dependency_cache"]["state"] == "used" and after["dependency_cache"]["key"] == key
    assert after["summary"]["build_succeeded"] is True
    assert after["summary"]["dependencies_compiled"] == 0 and after["summary"]["dependencies_fresh"] >= 1
    assert findings(after) == findings(first)
    assert sha256(cache_file(key)) == sealed

    # Without the cache the lint compiles loopfmt itself, and finds exactly the same.
    plain = lint_json(tree, clippy_image, local_registry.env, "--no-dep-cache")
    assert plain["dependency_cache"]["state"] == "skipped"
    assert "turned off" in plain["dependency_cache"]["reason"]
    assert plain["summary"]["dependencies_compiled"] >= 1
    assert findings(plain) == findings(first)


@pytest.mark.timeout(2400)
def test_a_damaged_cache_is_rebuilt_and_a_changed_lockfile_is_a_new_key(
        tmp_path: Path, clippy_image: Image, local_registry: LocalRegistry) -> None:
    tree = make_tree(tmp_path / "tree", local_registry, uuid.uuid4().hex)
    key = lint_json(tree, clippy_image, local_registry.env)["dependency_cache"]["key"]
    image = cache_file(key)
    # A byte changed where the data is, its mtime put back: the stat identity still moves
    # (ctime), the digest says the bytes are not the ones sealed.
    st = image.stat()
    image.chmod(0o644)
    with image.open("r+b") as handle:
        handle.seek(1024)  # the ext4 superblock
        byte = handle.read(1)
        handle.seek(1024)
        handle.write(bytes([byte[0] ^ 0xFF]))
    os.utime(image, ns=(st.st_atime_ns, st.st_mtime_ns))
    again = lint_json(tree, clippy_image, local_registry.env)
    assert again["dependency_cache"]["state"] == "built", again["dependency_cache"]
    assert again["dependency_cache"]["key"] == key
    assert "damaged" in again["dependency_cache"]["reason"]
    assert again["summary"]["build_succeeded"] is True

    # A new path member changes the manifests and the lockfile: a new key, built anew.
    (tree / "Cargo.toml").write_text((tree / "Cargo.toml").read_text()
                                     + '[workspace]\nmembers = [".", "extra"]\n')
    (tree / "extra" / "src").mkdir(parents=True)
    (tree / "extra" / "Cargo.toml").write_text('[package]\nname = "extra"\nversion = "0.1.0"\n'
                                               'edition = "2021"\n')
    (tree / "extra" / "src" / "lib.rs").write_text("")
    lock = tree / "Cargo.lock"
    lock.write_text(lock.read_text().replace(
        '[[package]]\nname = "depcached"',
        '[[package]]\nname = "extra"\nversion = "0.1.0"\n\n[[package]]\nname = "depcached"'))
    changed = lint_json(tree, clippy_image, local_registry.env)
    assert changed["summary"]["build_succeeded"] is True, changed
    assert changed["dependency_cache"]["state"] == "built"
    assert changed["dependency_cache"]["key"] != key


@pytest.mark.timeout(2400)
def test_two_first_lints_of_one_lockfile_build_one_cache(
        tmp_path: Path, clippy_image: Image, local_registry: LocalRegistry) -> None:
    nonce = uuid.uuid4().hex
    trees = [make_tree(tmp_path / name, local_registry, nonce) for name in ("a", "b")]
    env = {**os.environ, "ROTEIRO_HOME": str(HOME), "ROTEIRO_VM_ACCEL": "tcg", **local_registry.env}
    running = [subprocess.Popen([str(EXE), "lint", "clippy", str(tree), "--image", clippy_image.reference,
                                 "--format", "json"], env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True) for tree in trees]
    reports = []
    for process in running:
        out, err = process.communicate(timeout=2000)
        assert process.returncode in (0, 1), err[-3000:]
        reports.append(json.loads(out))
    states = sorted(r["dependency_cache"]["state"] for r in reports)
    assert states == ["built", "used"], states
    assert reports[0]["dependency_cache"]["key"] == reports[1]["dependency_cache"]["key"]
    assert findings(reports[0]) == findings(reports[1])
    assert all(r["summary"]["dependencies_compiled"] == 0 for r in reports)


def test_a_tree_without_registry_or_git_pins_skips_the_cache(
        demo: Path, clippy_image: Image, tmp_path: Path) -> None:
    report = lint_json(demo, clippy_image, {})
    assert report["dependency_cache"]["state"] == "skipped"
    assert "nothing to cache" in report["dependency_cache"]["reason"]


USES_FMT_IN_TESTS = ("pub fn one() -> u64 {\n    1\n}\n\n#[cfg(test)]\nmod tests {\n"
                     "    #[test]\n    fn renders() {\n        let mut buffer = loopfmt::Buffer::new();\n"
                     "        assert_eq!(buffer.format(super::one()), \"1\");\n    }\n}\n")


@pytest.mark.timeout(2400)
def test_one_cache_serves_a_second_target_selection(
        tmp_path: Path, clippy_image: Image, local_registry: LocalRegistry) -> None:
    """loopfmt is a dev-dependency only: the plain lint needs none of it, `--all-targets`
    does. The cache the plain lint builds (every selection of lint/dep_cache.py SELECTIONS)
    is the one the `--all-targets` lint uses, and it compiles no dependency: red before,
    the selection was in the key and the second lint built a cache of its own (284 s)."""
    tree = make_tree(tmp_path / "tree", local_registry, uuid.uuid4().hex)
    manifest = tree / "Cargo.toml"
    manifest.write_text(manifest.read_text().replace("[dependencies]", "[dev-dependencies]"))
    (tree / "src" / "lib.rs").write_text(USES_FMT_IN_TESTS)
    done = cli("lint", "clippy", str(tree), "--image", clippy_image.reference, "--format", "json",
               env=local_registry.env, timeout=1500)
    assert done.returncode in (0, 1), done.stdout[-2000:] + done.stderr[-3000:]
    plain = json.loads(done.stdout)
    assert plain["dependency_cache"]["state"] == "built", plain["dependency_cache"]
    # said on stderr (a pipe: a CI log's lines) at the default verbosity: that the build
    # happens once per lockfile, and a crate cargo compiled in it
    assert note_prefix(DEP_CACHE) + BUILDING in done.stderr.splitlines(), done.stderr
    assert re.search(rf"^{DEP_CACHE} +(checking|compiling) [a-z][\w-]* v\d", done.stderr, re.M), done.stderr
    assert plain["summary"]["build_succeeded"] is True
    assert plain["summary"]["dependencies_compiled"] == 0  # control: it needs no loopfmt
    every = lint_json(tree, clippy_image, local_registry.env, "--all-targets")
    assert every["dependency_cache"]["state"] == "used", every["dependency_cache"]
    assert every["dependency_cache"]["key"] == plain["dependency_cache"]["key"]
    assert every["summary"]["build_succeeded"] is True, every["findings"]
    assert every["summary"]["dependencies_fresh"] >= 1  # loopfmt, from the cache
    assert every["summary"]["dependencies_compiled"] == 0
