"""`pylint-sandbox fetch-deps` reads the lockfile and nothing else of the tree, and runs no
program of the tree's or the host toolchain's: the real CLI against a loopback https
registry and git host (lint_support.LocalRegistry), no internet, no VM.

What a run executes is observed with strace (every successful execve of the CLI and its
descendants), not inferred: a tree pinning only registry packages runs no program at all
(the CLI is the one execve), and the tree's `.cargo/config.toml` (`build.rustc`), its
toolchain file, its build script and a `cargo`/`rustup`/`rustc`/`git` first on PATH are
all left unrun. The control arm is a tree with a git pin: strace sees host git run, and
only the git of the fixed system PATH the fetcher gives it (cargo/git.py,
process/stream.py DEFAULT_PATH), never the one first on the user's PATH.

This file used to prove the same of host `cargo fetch` run in a clean copy of the tree's
manifests (issue 9). Dropped with it, as no longer about anything that runs:
- "plain `cargo fetch` runs the tree's config" (the control arm for host cargo): no host
  cargo runs now; the git pin is this file's control arm instead;
- "a manifest's `git = "file://..."` is never fetched": fetch-deps reads no manifest; the
  review's manifest findings (file:// in `[build_dependencies]`, a path dependency out of
  the tree, file:// and ssh:// submodules) run through the real CLI in
  tests/unit/cargo/test_fetch_deps_findings.py.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from roteiro_py.process.stream import DEFAULT_PATH
from tests.integration.lint.lint_support import EXE, LocalRegistry, git_lock_entry, write_lockfile

#: A successful execve in strace's log: the program's path.
_EXECVE = re.compile(r'^\d+\s+execve(?:at)?\((?:\d+, )?"(?P<path>[^"]*)"', re.MULTILINE)


def hostile_tree(base: Path, registry: LocalRegistry) -> tuple[Path, Path]:
    """A crate pinning `loopfmt` whose cargo config, toolchain file and build script each
    leave a marker in the returned directory if anything runs them."""
    marker = base / "markers"
    marker.mkdir()
    tree = base / "tree"
    (tree / "src").mkdir(parents=True)
    (tree / ".cargo").mkdir()
    (tree / "Cargo.toml").write_text(
        '[package]\nname = "tree"\nversion = "0.1.0"\nedition = "2021"\nbuild = "build.rs"\n'
        "[dependencies]\n" + registry.dependency("loopfmt"))
    (tree / "src" / "lib.rs").write_text("")
    (tree / "build.rs").write_text(f'fn main() {{ std::fs::write("{marker}/build-rs", "").unwrap(); }}\n')
    wrapper = base / "evil-rustc"
    wrapper.write_text(f'#!/bin/sh\ntouch {marker}/build-rustc\nexec rustc "$@"\n')
    wrapper.chmod(0o755)
    (tree / ".cargo" / "config.toml").write_text(f'[build]\nrustc = "{wrapper}"\n[env]\nEVIL = "1"\n')
    (tree / "rust-toolchain.toml").write_text(f'[toolchain]\npath = "{base}/no-such-toolchain"\n')
    write_lockfile(tree, registry, ["loopfmt"])
    return tree, marker


def stubs(base: Path, marker: Path) -> Path:
    """A directory of `cargo`, `rustup`, `rustc` and `git` that each leave a marker."""
    directory = base / "stubs"
    directory.mkdir()
    for tool in ("cargo", "rustup", "rustc", "git"):
        (directory / tool).write_text(f'#!/bin/sh\ntouch {marker}/{tool}-on-path\nexit 1\n')
        (directory / tool).chmod(0o755)
    return directory


def listing(tree: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(tree)): (p.lstat().st_size, p.lstat().st_mtime_ns) for p in tree.rglob("*")}


def fetch_traced(tree: Path, registry: LocalRegistry, home: Path, path: str,
                 log: Path) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    """fetch-deps under strace; (its outcome, the path of every program it executed)."""
    strace = shutil.which("strace")
    assert strace, "strace is needed to see what runs (scripts/lib/setup.sh installs it)"
    env = {**os.environ, **registry.env, "ROTEIRO_HOME": str(home), "PATH": path}
    done = subprocess.run([strace, "-f", "-qq", "-e", "trace=execve,execveat", "-e", "signal=none",
                           "--status=successful", "-s", "4096", "-o", str(log), str(EXE),
                           "fetch-deps", str(tree)], env=env, capture_output=True, text=True,
                          timeout=300, check=False)
    return done, _EXECVE.findall(log.read_text())


def test_a_tree_pinning_only_registry_packages_runs_no_program(
        tmp_path: Path, local_registry: LocalRegistry) -> None:
    tree, marker = hostile_tree(tmp_path, local_registry)
    before = listing(tree)
    path = f"{stubs(tmp_path, marker)}:{EXE.parent}:/usr/bin:/bin"
    done, executed = fetch_traced(tree, local_registry, tmp_path / "roteiro", path, tmp_path / "strace.log")
    assert done.returncode == 0, done.stderr
    assert "1 downloaded" in done.stdout
    checksum = local_registry.checksums[("loopfmt", "1.0.0")]
    assert (tmp_path / "roteiro" / "packages" / "crates" / f"{checksum}.crate").is_file()
    assert executed == [str(EXE)], executed  # the CLI itself, and nothing it started
    assert sorted(p.name for p in marker.iterdir()) == []
    assert listing(tree) == before  # nothing written into the tree


def test_control_a_git_pin_runs_hardened_git_from_the_system_path_only(
        tmp_path: Path, local_registry: LocalRegistry) -> None:
    """The control arm: strace does see what the CLI starts. Host git runs for a git pin,
    and it is the system's (DEFAULT_PATH), not the `git` first on the user's PATH."""
    tree, marker = hostile_tree(tmp_path, local_registry)
    url, commit = local_registry.git_repository("gitdep", "pub fn g() -> u64 { 7 }\n")
    lock = tree / "Cargo.lock"
    lock.write_text(lock.read_text() + git_lock_entry("gitdep", url, commit))
    path = f"{stubs(tmp_path, marker)}:{EXE.parent}:/usr/bin:/bin"
    done, executed = fetch_traced(tree, local_registry, tmp_path / "roteiro", path, tmp_path / "strace.log")
    assert done.returncode == 0, done.stderr
    assert "1 downloaded" in done.stdout and "1 fetched with git" in done.stdout
    assert executed[0] == str(EXE)
    programs = executed[1:]
    assert programs, "git must have run for the git pin"
    system = DEFAULT_PATH.split(":")
    # git, from the system's PATH, each started through the CLI's own interpreter, which
    # sets the pack's size limit (RLIMIT_FSIZE) and execs git (cargo/git.py)
    assert all(Path(p).name.startswith("git") and str(Path(p).parent) in system
               or "git-core" in p or (Path(p).parent == EXE.parent and Path(p).name.startswith("python"))
               for p in programs), programs
    assert any(Path(p).name == "git" for p in programs), programs
    assert not any(p.startswith(str(tmp_path)) for p in programs), programs
    assert sorted(p.name for p in marker.iterdir()) == []


def test_fetch_deps_works_on_a_host_with_no_rust_toolchain(
        tmp_path: Path, local_registry: LocalRegistry) -> None:
    """A CI runner or a reviewer's laptop: no cargo, rustup or rustc anywhere on PATH, no
    rustup home, an empty HOME; registry and git pins are fetched all the same."""
    path = f"{EXE.parent}:/usr/bin:/bin"
    for tool in ("cargo", "rustup", "rustc"):
        assert shutil.which(tool, path=path) is None, f"{tool} is on {path}: the test proves nothing"
    tree, _ = hostile_tree(tmp_path, local_registry)
    url, commit = local_registry.git_repository("bare-host-dep", "pub fn g() -> u64 { 7 }\n")
    lock = tree / "Cargo.lock"
    lock.write_text(lock.read_text() + git_lock_entry("bare-host-dep", url, commit))
    (tmp_path / "empty-home").mkdir()
    env = {name: value for name, value in os.environ.items()
           if not name.startswith(("RUSTUP_", "CARGO", "RUSTC"))}
    env.update(local_registry.env, PATH=path, HOME=str(tmp_path / "empty-home"),
               ROTEIRO_HOME=str(tmp_path / "roteiro"))
    done = subprocess.run([str(EXE), "fetch-deps", str(tree)], env=env, capture_output=True,
                          text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    assert "2 pinned packages" in done.stdout and "1 downloaded" in done.stdout
    assert "1 fetched with git" in done.stdout


def test_missing_lockfile_is_refused_naming_the_fix(tmp_path: Path, local_registry: LocalRegistry) -> None:
    tree, _ = hostile_tree(tmp_path, local_registry)
    (tree / "Cargo.lock").unlink()
    result = subprocess.run([str(EXE), "fetch-deps", str(tree)], capture_output=True, text=True, timeout=60,
                            env={**os.environ, **local_registry.env, "ROTEIRO_HOME": str(tmp_path / "r")})
    assert result.returncode == 3
    assert "would write Cargo.lock" in result.stderr and "commit an up-to-date Cargo.lock" in result.stderr
    assert "generate-lockfile" not in result.stderr  # no advice runs host cargo on the tree's sources


COMMIT = "a" * 40
CHECKSUM = "b" * 64


@pytest.mark.parametrize("source", [f"git+file:///etc/secret-repo#{COMMIT}", f"git+ssh://git@internal/x#{COMMIT}",
                                    "registry+http://mirror.invalid/index", f"git+git://host/x#{COMMIT}"])
def test_a_source_other_than_https_is_refused_before_anything_is_fetched(
        tmp_path: Path, local_registry: LocalRegistry, source: str) -> None:
    """Every pin is checked before any is fetched: the lockfile's other pin (loopfmt, from
    the https registry) is not downloaded either."""
    tree, _ = hostile_tree(tmp_path, local_registry)
    lock = tree / "Cargo.lock"
    lock.write_text(lock.read_text() + f'[[package]]\nname = "sneaky"\nversion = "0.1.0"\n'
                    f'source = "{source}"\nchecksum = "{CHECKSUM}"\n')
    asked = local_registry.crate_requests("loopfmt")
    home = tmp_path / "roteiro"
    result = subprocess.run([str(EXE), "fetch-deps", str(tree)], capture_output=True, text=True, timeout=60,
                            env={**os.environ, **local_registry.env, "ROTEIRO_HOME": str(home)})
    said = " ".join(result.stderr.split())
    assert result.returncode == 3, result.stdout + result.stderr
    assert "pins sneaky 0.1.0, which is not fetched" in said and "is not https" in said, said
    assert source.split("#")[0] in said
    assert local_registry.crate_requests("loopfmt") == asked
    assert not list(home.glob("packages/crates/*")) and not list(home.glob("packages/git/*"))

