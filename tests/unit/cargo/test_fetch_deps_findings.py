"""The review's findings against `fetch-deps` (issue 20), reproduced through the real CLI
with nothing but the tree changed: a tree's manifests name `file://` git repositories that
host cargo used to clone (an `[build_dependencies]`/`[dev_dependencies]` table cargo still
accepts, a path dependency leading out of the copy), and an https git dependency whose
submodule is `file://` or `ssh://`. A private host repository holds a marker; it must never
reach $CARGO_HOME or $ROTEIRO_HOME, and the ssh "server" (a listening socket) must see no
connection. Each test runs `pylint-sandbox fetch-deps` as a user would, so it ran against
the old fetcher unchanged: there the marker arrived (host cargo cloned the repository).

Controls: a registry dependency and an https git dependency with an https submodule are
fetched, and the lint's view of them is made.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from roteiro_py.cargo import vendor
from roteiro_py.cargo.lockfile import read_pins
from tests.support.git_server import git_route
from tests.support.https_server import Tls, serve
from tests.support.registry import build_registry, make_crate

EXE = Path(sys.executable).with_name("pylint-sandbox")
MARKER = "PRIVATE-BRANCH-7f3a9c"
GIT_ENV = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_AUTHOR_NAME": "t",
           "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}


def git(cwd: Path, *args: str) -> str:
    done = subprocess.run(["git", "-c", "protocol.file.allow=always", *args], cwd=cwd,
                          env={**os.environ, **GIT_ENV}, capture_output=True, text=True,
                          timeout=60, check=True)
    return done.stdout.strip()


def repository(path: Path, files: dict[str, str], branch_marker: bool = False) -> str:
    """A git repository at `path` holding `files`; returns its HEAD commit. With
    `branch_marker`, a second branch holds MARKER (never named by any lockfile)."""
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    for name, text in files.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(text)
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "init")
    if branch_marker:
        git(path, "checkout", "-q", "-b", "secret")
        (path / "secret.txt").write_text(MARKER)
        git(path, "add", "-A")
        git(path, "commit", "-q", "-m", "secret")
        git(path, "checkout", "-q", "main")
    return git(path, "rev-parse", "HEAD")


def crate_files(name: str) -> dict[str, str]:
    return {"Cargo.toml": f'[package]\nname = "{name}"\nversion = "0.1.0"\nedition = "2021"\n',
            "src/lib.rs": "pub fn f() -> u32 { 1 }\n"}


def fetch(tree: Path, home: Path, cargo_home: Path, tls: Tls) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "ROTEIRO_HOME": str(home), "CARGO_HOME": str(cargo_home),
           "CARGO_HTTP_CAINFO": str(tls.ca_pem)}
    return subprocess.run([str(EXE), "fetch-deps", str(tree)], env=env, capture_output=True,
                          text=True, timeout=300, check=False)


def nowhere(marker: str, *roots: Path) -> None:
    """`marker` is in no file under `roots` (names and contents, every file read)."""
    for root in roots:
        for directory, _, files in os.walk(root):
            for name in files:
                path = Path(directory) / name
                assert marker not in str(path)
                if path.is_file() and not path.is_symlink():
                    assert marker.encode() not in path.read_bytes(), path


@pytest.fixture
def private(tmp_path: Path) -> Path:
    """A private repository of this host, with a branch holding MARKER."""
    path = tmp_path / "private-repo"
    repository(path, crate_files("p"), branch_marker=True)
    return path


@pytest.fixture
def homes(tmp_path: Path, cargo_home: Path) -> tuple[Path, Path]:
    """A ROTEIRO_HOME of the test's, and the conftest's empty CARGO_HOME."""
    home = tmp_path / "roteiro-home"
    home.mkdir()
    return home, cargo_home


def tree_of(path: Path, manifest: str, lockfile: str) -> Path:
    (path / "src").mkdir(parents=True)
    (path / "src" / "lib.rs").write_text("")
    (path / "Cargo.toml").write_text(manifest)
    (path / "Cargo.lock").write_text(lockfile)
    return path


ME = '[package]\nname = "me"\nversion = "0.1.0"\nedition = "2018"\n'
ME_LOCK = 'version = 4\n[[package]]\nname = "me"\nversion = "0.1.0"\n'


@pytest.mark.parametrize("table", ["build_dependencies", "dev_dependencies", "build-dependencies",
                                   "target.'cfg(unix)'.dependencies"])
def test_a_manifests_file_git_source_is_never_fetched(tmp_path: Path, private: Path, tls: Tls,
                                                     homes: tuple[Path, Path], table: str) -> None:
    tree = tree_of(tmp_path / "tree", f'{ME}[{table}]\np = {{ git = "file://{private}", branch = "secret" }}\n',
                   ME_LOCK)
    done = fetch(tree, *homes, tls)
    assert done.returncode == 0, done.stderr  # the lockfile pins nothing: nothing to fetch
    nowhere(MARKER, *homes)


def test_a_path_dependency_out_of_the_tree_brings_no_manifest_to_act_on(
        tmp_path: Path, private: Path, tls: Tls, homes: tuple[Path, Path]) -> None:
    outside = tmp_path / "checkout" / "outside"
    tree_of(outside, '[package]\nname = "outside"\nversion = "0.1.0"\nedition = "2021"\n'
            f'[dependencies]\np = {{ git = "file://{private}", branch = "secret" }}\n', "")
    tree = tree_of(tmp_path / "tree", f'{ME}[dependencies]\noutside = {{ path = "{outside}" }}\n',
                   ME_LOCK + '[[package]]\nname = "outside"\nversion = "0.1.0"\n')
    done = fetch(tree, *homes, tls)
    assert done.returncode == 0, done.stderr
    nowhere(MARKER, *homes)


def test_a_lockfile_pinning_a_file_source_is_refused_naming_it(
        tmp_path: Path, private: Path, tls: Tls, homes: tuple[Path, Path]) -> None:
    commit = git(private, "rev-parse", "secret")
    tree = tree_of(tmp_path / "tree", f'{ME}[dependencies]\np = {{ git = "file://{private}" }}\n',
                   ME_LOCK + f'[[package]]\nname = "p"\nversion = "0.1.0"\n'
                   f'source = "git+file://{private}?branch=secret#{commit}"\n')
    done = fetch(tree, *homes, tls)
    assert done.returncode == 3, done.stderr
    assert "p 0.1.0" in done.stderr and "not https" in done.stderr
    nowhere(MARKER, *homes)


@pytest.fixture
def listener() -> Iterator[tuple[int, list[str]]]:
    """A TCP socket on 127.0.0.1 that records every connection made to it."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.settimeout(0.2)
    seen: list[str] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, peer = server.accept()
            except TimeoutError:
                continue
            seen.append(str(peer))
            conn.close()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server.getsockname()[1], seen
    stop.set()
    thread.join(timeout=5)
    server.close()


def _with_submodule(repos: Path, url: str) -> str:
    """`dep.git` under `repos`: a crate whose `.gitmodules` names `url` for `vendor/sub`,
    with a gitlink at that path; returns its commit."""
    work = repos / "dep-work"
    commit = repository(work, crate_files("dep"))
    sub = repos / "sub-work"
    sub_commit = repository(sub, {"README": "sub\n"})
    (work / ".gitmodules").write_text(f'[submodule "sub"]\n\tpath = vendor/sub\n\turl = {url}\n')
    git(work, "update-index", "--add", "--cacheinfo", f"160000,{sub_commit},vendor/sub")
    git(work, "add", ".gitmodules")
    git(work, "commit", "-q", "-m", "submodule")
    commit = git(work, "rev-parse", "HEAD")
    git(repos, "clone", "-q", "--bare", str(work), "dep.git")
    git(repos, "clone", "-q", "--bare", str(sub), "sub.git")
    return commit


def _git_tree(tmp_path: Path, url: str, commit: str) -> Path:
    return tree_of(tmp_path / "tree", f'{ME}[dependencies]\ndep = {{ git = "{url}" }}\n',
                   ME_LOCK.replace('version = "0.1.0"\n', 'version = "0.1.0"\ndependencies = ["dep"]\n')
                   + f'[[package]]\nname = "dep"\nversion = "0.1.0"\nsource = "git+{url}#{commit}"\n')


@pytest.mark.parametrize("kind", ["file", "ssh", "https"])
def test_a_submodule_leaving_https_is_refused_before_it_is_asked_anything(
        tmp_path: Path, private: Path, tls: Tls, homes: tuple[Path, Path],
        listener: tuple[int, list[str]], kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    port, seen = listener
    repos = tmp_path / "repos"
    repos.mkdir()
    with serve(tmp_path / "empty", tls, {"/git/": git_route(repos)}) as server:
        url = {"file": f"file://{private}", "ssh": f"ssh://git@127.0.0.1:{port}/private.git",
               "https": f"{server.url}/git/sub.git"}[kind]
        commit = _with_submodule(repos, url)
        dep_url = f"{server.url}/git/dep.git"
        tree = _git_tree(tmp_path, dep_url, commit)
        done = fetch(tree, *homes, tls)
        if kind == "https":  # control: an https submodule is fetched into place
            assert done.returncode == 0, done.stderr
            monkeypatch.setenv("ROTEIRO_HOME", str(homes[0]))
            made = vendor.vendored(read_pins(tree / "Cargo.lock"), tree)
            assert made.git is not None
            assert (made.git / "0" / "dep-0.1.0" / "vendor" / "sub" / "README").read_text() == "sub\n"
            assert not list(made.git.rglob(".git"))
        else:
            assert done.returncode == 3, done.stderr
            assert "dep 0.1.0" in done.stderr and "vendor/sub" in done.stderr, done.stderr
    nowhere(MARKER, *homes)
    assert seen == []  # not one connection to the ssh "server"
    with socket.create_connection(("127.0.0.1", port), timeout=5):
        pass  # control: a connection to it is seen
    for _ in range(50):
        if seen:
            break
        threading.Event().wait(0.05)
    assert seen


def test_a_registry_dependency_is_fetched_and_its_view_made(tmp_path: Path, tls: Tls,
                                                           homes: tuple[Path, Path]) -> None:
    root = tmp_path / "registry"
    data = make_crate("tiny", "1.0.0")
    with serve(root, tls) as server:
        checksums = build_registry(root, server.url, [("tiny", "1.0.0", data)])
        tree = tree_of(tmp_path / "tree", f'{ME}[dependencies]\ntiny = "1"\n',
                       ME_LOCK + f'[[package]]\nname = "tiny"\nversion = "1.0.0"\n'
                       f'source = "sparse+{server.url}/"\nchecksum = "{checksums[("tiny", "1.0.0")]}"\n')
        done = fetch(tree, *homes, tls)
        assert done.returncode == 0, done.stderr
        assert "1 downloaded" in done.stdout
        again = fetch(tree, *homes, tls)  # warm: nothing asked of the registry
        assert again.returncode == 0 and "1 already in the store" in again.stdout
        assert len(server.requests()) == 2  # config.json and the .crate, once
