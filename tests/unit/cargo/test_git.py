"""cargo/git.py: a git pin's files fetched by hardened host git from a real https git host
on loopback (`git http-backend` behind TLS, its CA given as CARGO_HTTP_CAINFO), and what
the tree, the remote or the user's git configuration could not make it do."""

from __future__ import annotations

import io
import json
import os
import shutil
import socket
import subprocess
import tarfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from roteiro_py import errors
from roteiro_py.cargo import git, store
from roteiro_py.cargo.lockfile import Pin, pin_of
from tests.support.git_server import auth_route, git_route
from tests.support.https_server import HttpsServer, make_tls, serve

MARKER = "PRIVATE-BRANCH-MARKER-5c1e0"


def _git_env(home: Path) -> dict[str, str]:
    return {"PATH": os.environ["PATH"], "HOME": str(home), "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
            "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t", "LC_ALL": "C"}


@dataclass
class Repos:
    """Repositories made for a test, served under `<server>/git/<name>`."""

    root: Path
    home: Path

    def git(self, repo: Path, *args: str) -> str:
        done = subprocess.run(["git", "-c", "protocol.file.allow=always", *args], cwd=repo,
                              env=_git_env(self.home), capture_output=True, check=True)
        return done.stdout.decode().strip()

    def make(self, name: str, files: dict[str, str], *, links: dict[str, str] | None = None,
             gitlinks: dict[str, str] | None = None, executable: tuple[str, ...] = ()) -> str:
        """A commit holding `files`, `links` (path -> target) and `gitlinks` (path ->
        commit, written straight into the index: no submodule is cloned to make it)."""
        repo = self.root / name
        if not repo.exists():
            repo.mkdir(parents=True)
            self.git(repo, "init", "-q", "-b", "main", ".")
        for path, text in files.items():
            (repo / path).parent.mkdir(parents=True, exist_ok=True)
            (repo / path).write_text(text)
        for path in executable:
            (repo / path).chmod(0o755)
        for path, target in (links or {}).items():
            (repo / path).parent.mkdir(parents=True, exist_ok=True)
            os.symlink(target, repo / path)
        self.git(repo, "add", "-A")
        for path, commit in (gitlinks or {}).items():
            self.git(repo, "update-index", "--add", "--cacheinfo", f"160000,{commit},{path}")
        self.git(repo, "commit", "-q", "--allow-empty", "-m", "commit")
        return self.git(repo, "rev-parse", "HEAD")


@dataclass
class Host:
    server: HttpsServer
    repos: Repos
    tmp: Path

    def url(self, name: str) -> str:
        return f"{self.server.url}/git/{name}"

    def pin(self, name: str, commit: str, *, package: str = "dep", query: str = "") -> Pin:
        return pin_of(self.tmp / "Cargo.lock", package, "0.1.0",
                      f"git+{self.url(name)}{query}#{commit}", None)

    def fetch(self, pin: Pin) -> Path:
        return git.fetch_checkout(pin, lockfile=self.tmp / "Cargo.lock", tree=self.tmp,
                                  until=time.monotonic() + 60)

    def requested(self, name: str) -> list[str]:
        return [r.path for r in self.server.log if r.path.startswith(f"/git/{name}/")]


def _host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, protocol_v0: bool = False,
          ) -> Iterator[Host]:
    repos = Repos(tmp_path / "repos", tmp_path / "maker-home")
    repos.home.mkdir()
    tls = make_tls(tmp_path / "tls")
    monkeypatch.setenv("CARGO_HTTP_CAINFO", str(tls.ca_pem))
    (tmp_path / "www").mkdir()
    with serve(tmp_path / "www", tls, {"/git/": git_route(repos.root, protocol_v0=protocol_v0),
                                       "/auth/": auth_route}) as server:
        yield Host(server, repos, tmp_path)
        assert not server.failures


@pytest.fixture
def host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Host]:
    yield from _host(tmp_path, monkeypatch)


@pytest.fixture
def v0_host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Host]:
    yield from _host(tmp_path, monkeypatch, protocol_v0=True)


def _files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes()
            for p in sorted(root.rglob("*")) if p.is_file()}


def _holding(marker: str, *roots: Path) -> list[Path]:
    """Every file under `roots` whose bytes hold `marker` (links not followed)."""
    found = []
    for root in roots:
        for directory, _, names in os.walk(root):
            for name in names:
                path = Path(directory, name)
                if path.is_file() and not path.is_symlink() and marker.encode() in path.read_bytes():
                    found.append(path)
    return found


def _no_git_anywhere(root: Path) -> None:
    assert not [p for p in root.rglob("*") if p.name in (".git", "objects", "HEAD")]


# -- (a) the pinned commit, and nothing else -------------------------------------------


def test_the_pinned_commit_is_fetched_and_sealed_without_git_metadata(host: Host) -> None:
    first = host.repos.make("dep.git", {"Cargo.toml": "[package]\nname = 'dep'\n",
                                        "src/lib.rs": "pub fn f() {}\n", "run.sh": "#!/bin/sh\n",
                                        ".gitattributes": "src/lib.rs export-ignore\n"},
                            links={"docs/LICENSE": "../Cargo.toml"}, executable=("run.sh",))
    host.repos.make("dep.git", {"later.rs": "// a later commit\n"})  # the tip moved on
    checkout = host.fetch(host.pin("dep.git", first))
    assert _files(checkout) == {
        ".gitattributes": b"src/lib.rs export-ignore\n", "Cargo.toml": b"[package]\nname = 'dep'\n",
        "docs/LICENSE": b"[package]\nname = 'dep'\n", "run.sh": b"#!/bin/sh\n",
        "src/lib.rs": b"pub fn f() {}\n"}
    assert not (checkout / "docs/LICENSE").is_symlink()  # a link inside becomes a copy
    assert os.access(checkout / "run.sh", os.X_OK)
    _no_git_anywhere(store.packages_root())
    sealed = store.git_checkout(host.pin("dep.git", first))
    assert sealed is not None and set(sealed[1]) == set(_files(checkout))
    assert sealed[1]["src/lib.rs"] == store.sha256_file(checkout / "src/lib.rs")
    # A second fetch is the store's: the host is not asked again.
    asked = len(host.server.log)
    assert host.fetch(host.pin("dep.git", first)) == checkout
    assert len(host.server.log) == asked


def test_a_host_that_will_not_serve_a_commit_by_id_gets_the_branch_which_must_be_the_pin(
        v0_host: Host) -> None:
    old = v0_host.repos.make("dep.git", {"a.rs": "old\n"})
    tip = v0_host.repos.make("dep.git", {"a.rs": "tip\n"})
    assert _files(v0_host.fetch(v0_host.pin("dep.git", tip, query="?branch=main")))["a.rs"] == b"tip\n"
    with pytest.raises(errors.PackageRefused) as refused:
        v0_host.fetch(v0_host.pin("dep.git", old, query="?branch=main"))
    assert "does not serve a commit by its id" in refused.value.why
    assert f"refs/heads/main there is now '{tip}'" in refused.value.why
    assert store.git_checkout(v0_host.pin("dep.git", old)) is None


# -- (b), (c): submodules that leave https are refused before anything is fetched --------


def test_a_file_submodule_is_refused_and_the_private_branch_reaches_nothing(
        host: Host, tmp_path: Path, roteiro_home: Path, hermetic_cargo_home: Path) -> None:
    private = tmp_path / "private-repo"  # beside the served repositories, never served
    secret = Repos(tmp_path, host.repos.home).make("private-repo", {"secret.txt": MARKER})
    host.repos.git(private, "branch", "secret")
    commit = host.repos.make("dep.git", {
        "Cargo.toml": "[package]\nname = 'dep'\n",
        ".gitmodules": f'[submodule "p"]\n\tpath = vendor/p\n\turl = file://{private}\n'},
        gitlinks={"vendor/p": secret})
    with pytest.raises(errors.PackageRefused) as refused:
        host.fetch(host.pin("dep.git", commit))
    assert refused.value.package == f"dep 0.1.0 (git {commit[:12]})"
    assert "'vendor/p'" in refused.value.why and f"'file://{private}'" in refused.value.why
    assert "nothing was fetched from it" in refused.value.why
    assert _holding(MARKER, roteiro_home, hermetic_cargo_home) == []
    assert list((store.packages_root() / "git").iterdir()) == []  # no half checkout kept
    # Control: the marker is findable where it is (the private repository's work tree).
    assert _holding(MARKER, private) == [private / "secret.txt"]


def test_every_submodule_is_checked_before_any_is_fetched(host: Host, tmp_path: Path) -> None:
    sub = host.repos.make("sub.git", {"sub.txt": "sub\n"})
    commit = host.repos.make("dep.git", {".gitmodules": (
        '[submodule "a"]\n\tpath = a\n\turl = ../sub.git\n'
        f'[submodule "b"]\n\tpath = b\n\turl = file://{tmp_path}/private\n')},
        gitlinks={"a": sub, "b": sub})
    with pytest.raises(errors.PackageRefused, match="'b'"):
        host.fetch(host.pin("dep.git", commit))
    assert host.requested("sub.git") == []


def test_an_ssh_submodule_is_refused_and_no_connection_is_attempted(host: Host) -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        listener.setblocking(False)
        port = listener.getsockname()[1]
        commit = host.repos.make("dep.git", {
            ".gitmodules": f'[submodule "x"]\n\tpath = x\n\turl = ssh://127.0.0.1:{port}/x\n'},
            gitlinks={"x": "1" * 40})
        with pytest.raises(errors.PackageRefused) as refused:
            host.fetch(host.pin("dep.git", commit))
        assert f"'ssh://127.0.0.1:{port}/x'" in refused.value.why
        time.sleep(0.2)
        with pytest.raises(BlockingIOError):
            listener.accept()
        # Control: a connection to it is seen.
        with socket.create_connection(("127.0.0.1", port)):
            time.sleep(0.2)
            listener.accept()[0].close()


@pytest.mark.parametrize("scheme", ["file", "ssh"])
def test_hardened_git_itself_reaches_no_other_protocol(tmp_path: Path, scheme: str) -> None:
    """The second wall, under the URL check: git asked for a non-https URL refuses."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        listener.setblocking(False)
        port = listener.getsockname()[1]
        repos = Repos(tmp_path, tmp_path)
        commit = repos.make("private", {"secret.txt": MARKER})
        url = f"file://{tmp_path}/private" if scheme == "file" else f"ssh://127.0.0.1:{port}/x"
        work = tmp_path / "work"
        (work / "home").mkdir(parents=True)
        pin = Pin("dep", "0.1.0", "git", "git+https://h/x#" + commit, "https://h/x", rev=commit)
        runner = git._Git(pin, tmp_path / "Cargo.lock", tmp_path, time.monotonic() + 30, work)
        with pytest.raises(errors.PackageSourceUnreachable) as unreachable:
            runner.fetch(url, commit, None)
        assert "transport" in unreachable.value.why and "not allowed" in unreachable.value.why
        with pytest.raises(BlockingIOError):
            listener.accept()
        assert subprocess.run(["git", "--git-dir", str(work / "repository-1"), "cat-file", "-e",
                               commit], env=_git_env(tmp_path), capture_output=True,
                              check=False).returncode != 0


# -- (d) the control: https submodules are fetched into place, recursively ----------------


def test_https_submodules_are_fetched_into_place(host: Host) -> None:
    inner = host.repos.make("inner.git", {"inner.txt": "inner\n"})
    sub = host.repos.make("sub.git", {
        "sub.txt": "sub\n",
        ".gitmodules": f'[submodule "i"]\n\tpath = deep/inner\n\turl = {host.url("inner.git")}\n'},
        gitlinks={"deep/inner": inner})
    commit = host.repos.make("dep.git", {
        "Cargo.toml": "[package]\nname = 'dep'\n",
        ".gitmodules": '[submodule "s"]\n\tpath = vendor/sub\n\turl = ../sub.git\n'},
        gitlinks={"vendor/sub": sub})
    checkout = host.fetch(host.pin("dep.git", commit))
    files = _files(checkout)
    assert files["vendor/sub/sub.txt"] == b"sub\n"
    assert files["vendor/sub/deep/inner/inner.txt"] == b"inner\n"
    sealed = store.git_checkout(host.pin("dep.git", commit))
    assert sealed is not None and "vendor/sub/deep/inner/inner.txt" in sealed[1]
    _no_git_anywhere(store.packages_root())


@pytest.mark.parametrize("gitmodules", [
    None, '[submodule "o"]\n\tpath = elsewhere\n\turl = ../other.git\n',
    '[submodule "o"]\n\tpath = vendor/o\n'])
def test_a_gitlink_without_a_gitmodules_entry_is_refused(host: Host, gitmodules: str | None) -> None:
    other = host.repos.make("other.git", {"o": "o\n"})
    files = {"a": "a\n"} if gitmodules is None else {"a": "a\n", ".gitmodules": gitmodules}
    commit = host.repos.make("dep.git", files, gitlinks={"vendor/o": other})
    with pytest.raises(errors.PackageRefused) as refused:
        host.fetch(host.pin("dep.git", commit))
    assert "'vendor/o'" in refused.value.why
    assert host.requested("other.git") == []


@pytest.mark.parametrize(("parent", "url", "resolved"), [
    ("https://h/org/repo.git", "../sub.git", "https://h/org/sub.git"),
    ("https://h/org/repo.git/", "./sub", "https://h/org/repo.git/sub"),
    ("https://h/org/repo", "../../x/y", "https://h/x/y"),
    ("https://h/repo", "../../x", None),  # above the host
    ("https://h/repo", "https://user:pw@h/x", None),
    ("https://h/repo", "git@github.com:org/x.git", None),
    ("https://h/repo", "-u./payload", None),
    ("https://h/repo", "http://h/x", None),
])
def test_submodule_urls_resolve_as_git_resolves_them_and_only_https_passes(
        parent: str, url: str, resolved: str | None) -> None:
    assert git.submodule_url(parent, url) == resolved


# -- (e) the user's git configuration has no effect -----------------------------------


def _user_configuration(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, config: str) -> dict[str, str]:
    """`config` as the user's git configuration in every place git looks for it; returns
    the environment a user's own git would run with."""
    user_home = tmp_path / "user-home"
    (user_home / ".config/git").mkdir(parents=True)
    for place in (user_home / ".gitconfig", user_home / ".config/git/config"):
        place.write_text(config)
    monkeypatch.setenv("HOME", str(user_home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(user_home / ".config"))
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(user_home / ".gitconfig"))
    return {**_git_env(user_home), "GIT_CONFIG_GLOBAL": str(user_home / ".gitconfig"),
            "GIT_SSL_CAINFO": os.environ["CARGO_HTTP_CAINFO"], "GIT_TERMINAL_PROMPT": "0"}


def test_the_users_url_rewrites_are_not_read(host: Host, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    commit = host.repos.make("dep.git", {"a": "a\n"})
    host.repos.make("other.git", {"b": "b\n"})
    rewrite = f'[url "{host.url("other.git")}"]\n\tinsteadOf = {host.url("dep.git")}\n'
    user_git = _user_configuration(tmp_path, monkeypatch, rewrite)
    monkeypatch.setenv("GIT_CONFIG_COUNT", "1")
    monkeypatch.setenv("GIT_CONFIG_KEY_0", f"url.{host.url('other.git')}.insteadOf")
    monkeypatch.setenv("GIT_CONFIG_VALUE_0", host.url("dep.git"))
    assert _files(host.fetch(host.pin("dep.git", commit))) == {"a": b"a\n"}
    assert host.requested("other.git") == [] and host.requested("dep.git")
    # Control: the user's own git, with that configuration, goes to the other repository.
    subprocess.run(["git", "ls-remote", host.url("dep.git")], env=user_git, capture_output=True,
                   check=True, cwd=tmp_path)
    assert host.requested("other.git")


def test_the_users_credential_helper_is_not_run(host: Host, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    ran = tmp_path / "credential-helper-ran"
    user_git = _user_configuration(tmp_path, monkeypatch,
                                   f'[credential]\n\thelper = "!touch {ran}; true"\n')
    pin = pin_of(tmp_path / "Cargo.lock", "dep", "0.1.0",
                 f"git+{host.server.url}/auth/x.git#{'1' * 40}", None)
    with pytest.raises(errors.PackageSourceUnreachable) as unreachable:
        host.fetch(pin)
    assert "/auth/x.git" in unreachable.value.where
    assert not ran.exists()
    # Control: the user's own git, asked for credentials by that host, runs the helper.
    subprocess.run(["git", "ls-remote", f"{host.server.url}/auth/x.git"], env=user_git,
                   capture_output=True, check=False, cwd=tmp_path)
    assert ran.exists()


# -- (f) the tar reader refuses what would leave the checkout ---------------------------


def _tar(*members: tuple[str, str, bytes | str]) -> io.BytesIO:
    """A tar of (name, kind, data or link target): kind file, dir, link, hard, fifo."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, kind, data in members:
            info = tarfile.TarInfo(name)
            info.type = {"file": tarfile.REGTYPE, "dir": tarfile.DIRTYPE, "link": tarfile.SYMTYPE,
                         "hard": tarfile.LNKTYPE, "fifo": tarfile.FIFOTYPE,
                         "char": tarfile.CHRTYPE}[kind]
            payload = data if isinstance(data, bytes) else b""
            if kind in ("link", "hard"):
                info.linkname = str(data)
            info.size = len(payload) if kind == "file" else 0
            tar.addfile(info, io.BytesIO(payload) if kind == "file" else None)
    buffer.seek(0)
    return buffer


@pytest.mark.parametrize(("members", "why"), [
    ([("../escape", "file", b"x")], "`..`"),
    ([("/abs/escape", "file", b"x")], "absolute"),
    ([("a/./b", "file", b"x")], "`.`"),
    ([(".git/config", "file", b"x")], "`.git`"),
    ([("out", "link", "../../escape")], "outside the checkout"),
    ([("out", "link", "/etc/passwd")], "outside the checkout"),
    ([("d", "link", "sub/../.."), ("sub/f", "file", b"x")], "outside the checkout"),
    ([("l", "link", "."), ("l/x", "file", b"x")], "below a file or a link"),
    ([("loop", "link", "loop")], "loops"),
    ([("self", "link", ".")], "holding it"),
    ([("gone", "link", "missing")], "not in the checkout"),
    ([("h", "hard", "/etc/passwd")], "hard link"),
    ([("f", "fifo", b"")], "FIFO"),
    ([("c", "char", b"")], "device"),
    ([("same", "file", b"1"), ("same", "file", b"2")], "appears twice"),
])
def test_hostile_archive_members_are_refused(tmp_path: Path, members: list[tuple[str, str, bytes | str]],
                                            why: str) -> None:
    staging = tmp_path / "staging"
    staging.mkdir()
    checkout = git.Checkout(staging)
    with pytest.raises(git.ArchiveRefused, match=None) as refused:
        checkout.unpack(_tar(*members))
        checkout.seal()
    assert why in str(refused.value)
    assert not (tmp_path / "escape").exists() and not (tmp_path.parent / "escape").exists()
    assert not [p for p in staging.rglob("*") if p.is_symlink()]


def test_links_inside_the_checkout_become_copies(tmp_path: Path) -> None:
    """The control arm: links that stay inside are kept, as the files they name."""
    checkout = git.Checkout(tmp_path)
    checkout.unpack(_tar(("LICENSE", "file", b"MIT\n"), ("crates/a/LICENSE", "link", "../../LICENSE"),
                         ("shared/x.rs", "file", b"x\n"), ("shared/l", "link", "x.rs"),
                         ("crates/a/shared", "link", "../../shared")))
    files = checkout.seal()
    assert _files(tmp_path) == {"LICENSE": b"MIT\n", "crates/a/LICENSE": b"MIT\n",
                                "crates/a/shared/l": b"x\n", "crates/a/shared/x.rs": b"x\n",
                                "shared/l": b"x\n", "shared/x.rs": b"x\n"}
    assert set(files) == set(_files(tmp_path))
    assert not [p for p in tmp_path.rglob("*") if p.is_symlink()]


def test_the_bounds_are_enforced_and_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("a", "b", "c"):
        (tmp_path / name).mkdir()
    monkeypatch.setattr(git, "MAX_CHECKOUT_FILES", 2)
    with pytest.raises(git.ArchiveRefused, match="more than 2 files"):
        git.Checkout(tmp_path / "a").unpack(_tar(*[(f"f{i}", "file", b"x") for i in range(3)]))
    monkeypatch.setattr(git, "MAX_CHECKOUT_BYTES", 10)
    with pytest.raises(git.ArchiveRefused, match="more than 10 bytes"):
        git.Checkout(tmp_path / "b").unpack(_tar(("big", "file", b"x" * 11)))
    with pytest.raises(git.ArchiveRefused, match="more than 64 deep"):
        git.Checkout(tmp_path / "c").unpack(_tar(("/".join(["d"] * 65), "file", b"x")))


# -- (g) the package in a checkout, and the manifest cargo vendor writes -------------------

WORKSPACE = {
    "Cargo.toml": """[workspace]
members = ["crates/*"]
resolver = "2"

[workspace.package]
version = "0.3.1"
edition = "2021"
license = "MIT"
readme = "README.md"
description = "from the workspace"

[workspace.dependencies]
helper = { path = "crates/helper", version = "0.3.1", default-features = false }

[workspace.lints.rust]
unsafe_code = "forbid"
""",
    "README.md": "# readme\n",
    "crates/dep/Cargo.toml": """[package]
name = "dep"
version.workspace = true
edition.workspace = true
license.workspace = true
readme.workspace = true
description.workspace = true

[dependencies]
helper = { workspace = true, features = ["extra"] }

[target.'cfg(unix)'.dependencies]
other = { path = "../other" }

[lints]
workspace = true
""",
    "crates/dep/src/lib.rs": "pub fn f() -> u32 { helper::h() }\n",
    "crates/helper/Cargo.toml": ('[package]\nname = "helper"\nversion = "0.3.1"\nedition = "2021"\n'
                                 '[features]\ndefault = []\nextra = []\n'),
    "crates/helper/src/lib.rs": "pub fn h() -> u32 { 1 }\n",
    "crates/other/Cargo.toml": '[package]\nname = "other"\nversion = "0.9.0"\nedition = "2021"\n',
    "crates/other/src/lib.rs": "",
    "old/dep/Cargo.toml": '[package]\nname = "dep"\nversion = "0.0.1"\n',
    "target/dep/Cargo.toml": '[package]\nname = "dep"\nversion = "0.3.1"\n',
}


def _checkout(root: Path, files: dict[str, str]) -> Path:
    for path, text in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
    return root


def _pin(name: str, version: str) -> Pin:
    commit = "ab" * 20
    return Pin(name, version, "git", f"git+https://127.0.0.1:1/ws.git#{commit}",
               "https://127.0.0.1:1/ws.git", rev=commit)


def test_package_dir_finds_the_package_as_cargo_does(tmp_path: Path) -> None:
    checkout = _checkout(tmp_path / "co", WORKSPACE)
    lock = tmp_path / "Cargo.lock"
    assert git.package_dir(checkout, _pin("dep", "0.3.1"), lockfile=lock) == checkout / "crates/dep"
    assert git.package_dir(checkout, _pin("helper", "0.3.1"), lockfile=lock) == checkout / "crates/helper"
    with pytest.raises(errors.PackageRefused, match="no manifest"):
        git.package_dir(checkout, _pin("absent", "1.0.0"), lockfile=lock)
    (checkout / "copy/dep").mkdir(parents=True)
    shutil.copy(checkout / "crates/dep/Cargo.toml", checkout / "copy/dep/Cargo.toml")
    with pytest.raises(errors.PackageRefused, match="several manifests"):
        git.package_dir(checkout, _pin("dep", "0.3.1"), lockfile=lock)


def test_a_manifest_without_inheritance_needs_no_normalizing(tmp_path: Path) -> None:
    checkout = _checkout(tmp_path / "co", WORKSPACE)
    assert git.normalized_manifest(checkout, checkout / "crates/other", _pin("other", "0.9.0"),
                                   lockfile=tmp_path / "Cargo.lock") is None


def _vendored_app(tmp_path: Path, checkout: Path, dep_manifest: bytes) -> Path:
    """An app pinning dep from the git source, the source replaced by a vendored directory
    holding dep (with `dep_manifest`), helper and other as the guest gets them."""
    url = "https://127.0.0.1:1/ws.git"
    commit = "ab" * 20
    vendor = tmp_path / "app/vendor"
    for name in ("dep", "helper", "other"):
        shutil.copytree(checkout / "crates" / name, vendor / name)
        (vendor / name / ".cargo-checksum.json").write_text(json.dumps({"files": {}, "package": None}))
    (vendor / "dep/Cargo.toml").write_bytes(dep_manifest)
    app = tmp_path / "app"
    (app / "src").mkdir()
    (app / "src/main.rs").write_text("fn main() {}\n")
    (app / "Cargo.toml").write_text('[package]\nname = "app"\nversion = "0.1.0"\nedition = "2021"\n'
                                    f'[dependencies]\ndep = {{ git = "{url}" }}\n')
    source = f"git+{url}#{commit}"
    (app / "Cargo.lock").write_text(
        "version = 4\n\n[[package]]\nname = \"app\"\nversion = \"0.1.0\"\ndependencies = [\"dep\"]\n\n"
        f"[[package]]\nname = \"dep\"\nversion = \"0.3.1\"\nsource = \"{source}\"\n"
        "dependencies = [\"helper\", \"other\"]\n\n"
        f"[[package]]\nname = \"helper\"\nversion = \"0.3.1\"\nsource = \"{source}\"\n\n"
        f"[[package]]\nname = \"other\"\nversion = \"0.9.0\"\nsource = \"{source}\"\n")
    (app / ".cargo").mkdir()
    (app / ".cargo/config.toml").write_text(
        f'[source."git+{url}"]\ngit = "{url}"\nreplace-with = "vendored"\n'
        '[source.vendored]\ndirectory = "vendor"\n')
    return app


def _cargo_metadata(app: Path, cargo_home: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CARGO_")}
    env["CARGO_HOME"] = str(cargo_home)
    return subprocess.run(["cargo", "metadata", "--offline", "--locked", "--format-version", "1"],
                          cwd=app, env=env, capture_output=True, text=True, timeout=120, check=False)


def test_the_normalized_manifest_is_what_cargo_accepts_in_a_vendored_source(tmp_path: Path) -> None:
    checkout = _checkout(tmp_path / "co", WORKSPACE)
    pin = _pin("dep", "0.3.1")
    directory = git.package_dir(checkout, pin, lockfile=tmp_path / "Cargo.lock")
    normalized = git.normalized_manifest(checkout, directory, pin, lockfile=tmp_path / "Cargo.lock")
    assert normalized is not None
    import tomllib
    data = tomllib.loads(normalized.decode())
    assert data["package"] == {"name": "dep", "version": "0.3.1", "edition": "2021",
                               "license": "MIT", "readme": "../../README.md",
                               "description": "from the workspace"}
    assert data["dependencies"]["helper"] == {"path": "../helper", "version": "0.3.1",
                                              "default-features": False, "features": ["extra"]}
    assert data["target"]["cfg(unix)"]["dependencies"]["other"] == {"path": "../other"}
    assert data["lints"] == {"rust": {"unsafe_code": "forbid"}}
    app = _vendored_app(tmp_path, checkout, normalized)
    done = _cargo_metadata(app, tmp_path / "cargo-home")
    assert done.returncode == 0, done.stderr
    resolved = {p["name"]: p for p in json.loads(done.stdout)["packages"]}
    assert resolved["dep"]["version"] == "0.3.1" and resolved["dep"]["license"] == "MIT"
    assert {d["name"] for d in resolved["dep"]["dependencies"]} == {"helper", "other"}
    # Control: the checkout's own manifest, as it is, is not accepted there.
    shutil.rmtree(app)
    app = _vendored_app(tmp_path, checkout, (directory / "Cargo.toml").read_bytes())
    done = _cargo_metadata(app, tmp_path / "cargo-home")
    assert done.returncode != 0 and "workspace" in done.stderr


@pytest.mark.parametrize(("files", "why"), [
    ({"crates/dep/Cargo.toml": '[package]\nname = "dep"\nversion.workspace = true\n'},
     "no Cargo.toml with [workspace]"),
    ({"Cargo.toml": "[workspace]\n", "crates/dep/Cargo.toml":
      '[package]\nname = "dep"\nversion = "1.0.0"\n[dependencies]\nx = { workspace = true }\n'},
     "does not have"),
    ({"Cargo.toml": '[workspace]\n[workspace.package]\nreadme = "../../outside.md"\n',
      "crates/dep/Cargo.toml": '[package]\nname = "dep"\nreadme.workspace = true\n'},
     "leaves its repository"),
    ({"crates/dep/Cargo.toml": '[package]\nname = "dep"\n[dependencies]\nx = { path = "../../../x" }\n'},
     "leaves its repository"),
])
def test_what_cannot_be_normalized_is_refused_by_name(tmp_path: Path, files: dict[str, str],
                                                     why: str) -> None:
    checkout = _checkout(tmp_path / "co", files)
    with pytest.raises(errors.PackageRefused) as refused:
        git.normalized_manifest(checkout, checkout / "crates/dep", _pin("dep", "1.0.0"),
                                lockfile=tmp_path / "Cargo.lock")
    assert why in refused.value.why and refused.value.package.startswith("dep 1.0.0 (git abab")


def test_a_deadline_already_passed_fetches_nothing(host: Host) -> None:
    commit = host.repos.make("dep.git", {"a": "a\n"})
    with pytest.raises(errors.PackageSourceUnreachable, match="time allowed"):
        git.fetch_checkout(host.pin("dep.git", commit), lockfile=host.tmp / "Cargo.lock",
                           tree=host.tmp, until=time.monotonic() - 1)
    assert host.requested("dep.git") == []
    assert list((store.packages_root() / "git").iterdir()) == []


def _link_doubling(levels: int) -> dict[str, str]:
    """`a<k>/x` and `a<k>/y` both name `a<k-1>`: materialized, `a<levels>` holds 2^levels
    copies of `a0/f`, from a tree of 2 * levels + 1 entries."""
    return {f"a{k}/{n}": f"../a{k - 1}" for k in range(1, levels + 1) for n in "xy"}


def test_links_multiplying_directories_are_bounded_in_time(host: Host, monkeypatch: pytest.MonkeyPatch) -> None:
    """Review of issue 20: a git dependency of one file and 32 links (each level two links
    to the level below) made `seal` copy 2^16 files and 2^17 directories, each copy scanning
    every path made so far, with no deadline checked: 12 levels took 85 s, 16 would take
    hours past FETCH_TIMEOUT_S. Now the deadline holds while links are materialized.
    The count bounds are lifted here, so that only the deadline can stop it (with them, a
    fast idle host reached MAX_CHECKOUT_DIRS first, a refusal of another kind: that bound
    has its own test below), and 18 levels are asked for: materialized whole they took
    19 s at 16 levels on an idle host, so at 18 the 8 s deadline fires long before the end
    on any host, and without the deadline the test runs out pytest's timeout."""
    monkeypatch.setattr(git, "MAX_CHECKOUT_DIRS", 10**9)
    monkeypatch.setattr(git, "MAX_CHECKOUT_FILES", 10**9)
    commit = host.repos.make("bomb.git", {"a0/f": "x"}, links=_link_doubling(18))
    started = time.monotonic()
    with pytest.raises(errors.PackageSourceUnreachable, match="time allowed"):
        git.fetch_checkout(host.pin("bomb.git", commit), lockfile=host.tmp / "Cargo.lock",
                           tree=host.tmp, until=time.monotonic() + 8)
    assert time.monotonic() - started < 60
    assert [p.name for p in (store.packages_root() / "git").iterdir()] == []
    # control: a few levels fit the deadline and are copied whole
    commit = host.repos.make("small.git", {"a0/f": "x"}, links=_link_doubling(3))
    files = store.git_checkout(host.pin("small.git", commit)) if host.fetch(
        host.pin("small.git", commit)) else None
    assert files is not None and len([f for f in files[1] if f.endswith("/f")]) == 1 + 2 + 4 + 8


def test_directories_made_by_links_are_counted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A directory costs no byte and no file, so links to directories made any number of
    them; MAX_CHECKOUT_DIRS bounds them (the control: within it, the same tree seals)."""
    members = [("a0/f", "file", b"x"), *((p, "link", t) for p, t in _link_doubling(6).items())]
    monkeypatch.setattr(git, "MAX_CHECKOUT_DIRS", 100)
    (tmp_path / "a").mkdir()
    checkout = git.Checkout(tmp_path / "a")
    checkout.unpack(_tar(*members))
    with pytest.raises(git.ArchiveRefused, match="more than 100 directories"):
        checkout.seal()
    monkeypatch.setattr(git, "MAX_CHECKOUT_DIRS", 300)
    (tmp_path / "b").mkdir()
    checkout = git.Checkout(tmp_path / "b")
    checkout.unpack(_tar(*members))
    assert len(checkout.seal()) == 127


def test_a_pack_larger_than_any_checkout_is_cut_off(host: Host, monkeypatch: pytest.MonkeyPatch) -> None:
    """Review of issue 20: what a git host sends for the pinned commit was bounded only by
    the fetch's time (FETCH_TIMEOUT_S, 30 min at line rate: tens of GiB into the store's
    tmp/). Now one repository's pack may not exceed MAX_PACK_BYTES (git keeps it as one
    pack file, whose size the kernel bounds: RLIMIT_FSIZE)."""
    commit = host.repos.make("big.git", {"blob": os.urandom(1 << 20).hex()})  # 2 MiB, 1 MiB packed
    monkeypatch.setattr(git, "MAX_PACK_BYTES", 512 * 1024, raising=False)
    with pytest.raises(errors.PackageRefused, match="larger than 524288 bytes"):
        host.fetch(host.pin("big.git", commit))
    assert list((store.packages_root() / "git").iterdir()) == []
    assert list((store.packages_root() / "tmp").iterdir()) == []
    monkeypatch.setattr(git, "MAX_PACK_BYTES", 4 << 20)  # control: within the bound
    assert (host.fetch(host.pin("big.git", commit)) / "blob").stat().st_size == 2 << 20


def test_a_workspace_path_holding_a_nul_is_refused(tmp_path: Path) -> None:
    """Review of issue 20: a git dependency's `package.workspace = "..\\u0000x"` (TOML
    allows the escape) reached os.open as a path: ValueError, exit 4 on every lint of a
    lockfile pinning it. Control: the same manifest naming its real workspace normalizes."""
    files = {"Cargo.toml": '[workspace]\n[workspace.package]\nversion = "1.0.0"\n',
             "crates/dep/Cargo.toml": '[package]\nname = "dep"\nworkspace = "../\\u0000x"\n'
                                      'version.workspace = true\n'}
    checkout = _checkout(tmp_path / "co", files)
    with pytest.raises(errors.PackageRefused, match="workspace"):
        git.normalized_manifest(checkout, checkout / "crates/dep", _pin("dep", "1.0.0"),
                                lockfile=tmp_path / "Cargo.lock")
    (checkout / "crates/dep/Cargo.toml").write_text(
        files["crates/dep/Cargo.toml"].replace("../\\u0000x", "../.."))
    normalized = git.normalized_manifest(checkout, checkout / "crates/dep", _pin("dep", "1.0.0"),
                                         lockfile=tmp_path / "Cargo.lock")
    assert normalized is not None and b'version = "1.0.0"' in normalized


@pytest.mark.parametrize("other", [
    '[package]\nname = "dep"\nversion = "1.0.0"\n',  # no [workspace] where `a` says it is
    '[package]\nname = "dep"\nversion = "1.0.0"\n[workspace]\npackage = 1\n',
    '[workspace]\npackage = { version = 2 }\n[package]\nname = "dep"\nversion = "1.0.0"\n',
])
def test_a_package_named_twice_with_a_broken_workspace_is_resolved_or_refused(
        tmp_path: Path, other: str) -> None:
    """Review of issue 20: with two manifests naming the pinned package, `_version` read the
    inherited version as `_manifest(root)["workspace"]["package"]["version"]`: a workspace
    root without [workspace], or with a `package` that is not a table, raised KeyError or
    AttributeError (exit 4 on every lint). Now such a version is unknown, and the package
    found by its own version (control) or refused by name."""
    checkout = _checkout(tmp_path / "co", {
        "a/Cargo.toml": '[package]\nname = "dep"\nworkspace = "../b"\nversion.workspace = true\n',
        "b/Cargo.toml": other})
    found = git.package_dir(checkout, _pin("dep", "1.0.0"), lockfile=tmp_path / "Cargo.lock")
    assert found == checkout / "b"
    with pytest.raises(errors.PackageRefused, match="no manifest"):
        git.package_dir(checkout, _pin("dep", "9.0.0"), lockfile=tmp_path / "Cargo.lock")


@pytest.mark.parametrize("inherits", [False, True])
def test_deeply_nested_metadata_is_normalized_or_refused(tmp_path: Path, inherits: bool) -> None:
    """Review of issue 20: a git dependency's manifest with `[package.metadata] x` nested
    400 arrays deep (tomllib reads it) made `_uses_workspace` recurse past Python's limit:
    RecursionError, exit 4 on every lint. Now it is walked without recursion; written out
    (when the manifest inherits) it is refused by name if tomli_w cannot, else kept."""
    deep = "[" * 400 + "]" * 400
    version = "version.workspace = true" if inherits else 'version = "1.0.0"'
    checkout = _checkout(tmp_path / "co", {
        "Cargo.toml": '[workspace]\n[workspace.package]\nversion = "1.0.0"\n',
        "crates/dep/Cargo.toml": f'[package]\nname = "dep"\n{version}\n[package.metadata]\nx = {deep}\n'})
    try:
        normalized = git.normalized_manifest(checkout, checkout / "crates/dep",
                                             _pin("dep", "1.0.0"), lockfile=tmp_path / "Cargo.lock")
    except errors.PackageRefused as refused:
        assert inherits and "could not be written" in refused.why
    else:
        assert (normalized is None) != inherits


@pytest.mark.parametrize("named_by", ["relative CARGO_HTTP_CAINFO", "http.cainfo"])
def test_git_trusts_the_ca_named_the_ways_registry_downloads_do(
        host: Host, monkeypatch: pytest.MonkeyPatch, cargo_home: Path, named_by: str) -> None:
    """Review of issue 20: registry downloads honour cargo's `[http] cainfo` and a relative
    CARGO_HTTP_CAINFO (cargo/registry.py), but git was given CARGO_HTTP_CAINFO verbatim (a
    relative path then named a file in git's own working directory) and never the config
    file's: behind a corporate CA, registry pins fetched and git pins failed TLS."""
    commit = host.repos.make("dep.git", {"a": "a\n"})
    ca = Path(os.environ["CARGO_HTTP_CAINFO"])
    if named_by == "http.cainfo":
        monkeypatch.delenv("CARGO_HTTP_CAINFO")
        (cargo_home / "config.toml").write_text(f"[http]\ncainfo = {json.dumps(str(ca))}\n")
    else:
        monkeypatch.chdir(ca.parent)
        monkeypatch.setenv("CARGO_HTTP_CAINFO", ca.name)
    assert (host.fetch(host.pin("dep.git", commit)) / "a").read_text() == "a\n"
