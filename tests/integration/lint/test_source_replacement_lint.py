"""A host whose cargo replaces crates.io with a mirror: fetch-deps and the lint agree.

Self-contained: the mirror is a sparse registry served on loopback from a directory made
here (config.json, one index file, and a `.crate` made by real `cargo package` from a
tiny crate). The host's CARGO_HOME (private, tmp) has `[source.crates-io] replace-with =
"mirror"`; the tree's lockfile pins the crate from crates.io, as cargo writes it behind a
replacement. Before cargo_sources.py the guest, which never sees the host's config,
looked in `index.crates.io-*` and every lint said "cold cache" however often fetch-deps
ran. The cargo-level test is the guest's view and command line given to real offline
cargo on the host; the last test is a real lint in a VM (TCG).
"""

from __future__ import annotations

import errno
import hashlib
import http.server
import json
import os
import shutil
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from lint_support import Image, cli

from roteiro_py import lint
from roteiro_py.cargo_view import index_path

CRATE = "roteiro-mirror-probe"


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 (the base's name)
        pass


@pytest.fixture(scope="module")
def mirror(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """(the sparse URL, a directory of cargo homes); served on 127.0.0.1 until the module ends."""
    base = tmp_path_factory.mktemp("mirror")
    crate = base / "crate"
    (crate / "src").mkdir(parents=True)
    (crate / "Cargo.toml").write_text(f'[package]\nname = "{CRATE}"\nversion = "0.1.0"\n'
                                      'edition = "2021"\nlicense = "MIT"\ndescription = "probe"\n')
    (crate / "src" / "lib.rs").write_text("pub fn probe() -> u64 { 7 }\n")
    env = {**os.environ, "CARGO_HOME": str(base / "packaging-home")}
    done = subprocess.run(["cargo", "package", "--no-verify", "--allow-dirty", "-q"], cwd=crate,
                          env=env, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    packaged = crate / "target" / "package" / f"{CRATE}-0.1.0.crate"
    served = base / "served"
    (served / "crates").mkdir(parents=True)
    shutil.copy(packaged, served / "crates" / packaged.name)
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), lambda *a: _Quiet(*a, directory=str(served)))  # type: ignore[misc]
    port = server.server_address[1]
    entry = {"name": CRATE, "vers": "0.1.0", "deps": [], "features": {}, "yanked": False,
             "cksum": hashlib.sha256(packaged.read_bytes()).hexdigest()}
    index = served / "index"
    (index / index_path(CRATE)).parent.mkdir(parents=True)
    (index / index_path(CRATE)).write_text(json.dumps(entry) + "\n")
    (index / "config.json").write_text(json.dumps(
        {"dl": f"http://127.0.0.1:{port}/crates/{{crate}}-{{version}}.crate"}))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"sparse+http://127.0.0.1:{port}/index/", base
    finally:
        server.shutdown()
        thread.join(timeout=10)
        server.server_close()


def _mirrored_home(base: Path, url: str, name: str) -> Path:
    home = base / name
    home.mkdir()
    (home / "config.toml").write_text(f'[source.crates-io]\nreplace-with = "mirror"\n'
                                      f'[source.mirror]\nregistry = "{url}"\n')
    return home


def _tree(path: Path, home: Path) -> Path:
    (path / "src").mkdir(parents=True)
    (path / "Cargo.toml").write_text(f'[package]\nname = "mirrored"\nversion = "0.1.0"\n'
                                     f'edition = "2021"\n[dependencies]\n{CRATE} = "0.1"\n')
    (path / "src" / "lib.rs").write_text("pub fn seven() -> u64 {\n    return roteiro_mirror_probe::probe();\n}\n")
    done = subprocess.run(["cargo", "generate-lockfile", "-q"], cwd=path, capture_output=True,
                          text=True, env={**os.environ, "CARGO_HOME": str(home)}, timeout=300,
                          check=False)
    assert done.returncode == 0, done.stderr
    assert 'source = "registry+https://github.com/rust-lang/crates.io-index"' in (path / "Cargo.lock").read_text()
    return path


def _fetched(tmp_path: Path, url: str, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """A cargo home mirrored to `url` and a tree whose packages the real `fetch-deps` put
    in it; this process's CARGO_HOME and ROTEIRO_HOME are theirs for the test."""
    home = _mirrored_home(tmp_path, url, "host-home")
    tree = _tree(tmp_path / "tree", home)
    monkeypatch.setenv("CARGO_HOME", str(home))
    monkeypatch.setenv("ROTEIRO_HOME", str(tmp_path / "roteiro"))
    done = cli("fetch-deps", str(tree), env={"CARGO_HOME": str(home), "ROTEIRO_HOME": str(tmp_path / "roteiro")})
    assert done.returncode == 0, done.stderr
    return home, tree


@pytest.mark.timeout(600)
def test_fetch_deps_through_a_mirror_gives_a_view_offline_cargo_builds_from(
        mirror: tuple[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url, base = mirror
    home, tree = _fetched(tmp_path, url, monkeypatch)
    assert list(home.glob(f"registry/cache/127.0.0.1-*/{CRATE}-0.1.0.crate"))
    assert not list(home.glob("registry/cache/index.crates.io-*"))
    got = lint.guest_cargo(lint.locate(tree))
    assert got.registry is not None
    assert tuple(a.rstrip() for a in got.config_args) == (
        "--config", 'source.crates-io.replace-with="mirror"', "--config", f'source.mirror.registry="{url}"')

    # What the guest's cargo has: a cargo home holding only the view's registry/, offline.
    guest_home = tmp_path / "guest-home"
    guest_home.mkdir()
    (guest_home / "registry").symlink_to(got.registry)
    check = ["cargo", "check", "--offline", "--locked", "-q"]
    env = {**os.environ, "CARGO_HOME": str(guest_home), "CARGO_TARGET_DIR": str(tmp_path / "target")}
    without = subprocess.run(check, cwd=tree, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert without.returncode != 0  # control: the guest without the replacement is the old cold cache
    given = subprocess.run([*check, *got.config_args], cwd=tree, env=env, capture_output=True,
                           text=True, timeout=300, check=False)
    assert given.returncode == 0, given.stderr


@pytest.mark.timeout(1800)
def test_a_lint_through_a_host_mirror_succeeds_in_the_vm(
        mirror: tuple[str, Path], clippy_image: Image, tmp_path: Path) -> None:
    url, base = mirror
    home = _mirrored_home(tmp_path, url, "host-home")
    tree = _tree(tmp_path / "tree", home)
    done = cli("fetch-deps", str(tree), env={"CARGO_HOME": str(home)})
    assert done.returncode == 0, done.stderr
    done = cli("lint", "clippy", str(tree), "--image", clippy_image.reference, "--format", "json",
               env={"CARGO_HOME": str(home)})
    assert done.returncode == 1, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["summary"]["build_succeeded"] is True
    assert any(f["code"] == "clippy::needless_return" for f in report["findings"]), report["findings"]


def _offline(tree: Path, registry: Path, config_args: tuple[str, ...],
             tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """Real offline cargo as the guest runs it: a cargo home holding only the view's
    registry/, the working directory the tree, the guest's --config arguments."""
    guest_home = tmp_path / "guest-home"
    guest_home.mkdir(exist_ok=True)
    if not (guest_home / "registry").is_symlink():
        (guest_home / "registry").symlink_to(registry)
    env = {**os.environ, "CARGO_HOME": str(guest_home), "CARGO_TARGET_DIR": str(tmp_path / "target")}
    return subprocess.run(["cargo", "check", "--offline", "--locked", "-q", *config_args], cwd=tree,
                          env=env, capture_output=True, text=True, timeout=300, check=False)


@pytest.mark.timeout(600)
def test_a_tree_file_named_like_a_config_argument_is_not_read_in_its_place(
        mirror: tuple[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """cargo reads `--config X` as a configuration FILE when `X` exists relative to its
    working directory, which in the guest is the tree: a tree holding a file named like
    the printed argument replaced the host's tables with its own at --config rank."""
    url, _ = mirror
    home, tree = _fetched(tmp_path, url, monkeypatch)
    got = lint.guest_cargo(lint.locate(tree))
    assert got.registry is not None
    assert _offline(tree, got.registry, got.config_args, tmp_path).returncode == 0  # control
    planted = 0
    for arg in got.config_args[1::2]:
        hostile = tree / arg
        try:
            hostile.parent.mkdir(parents=True, exist_ok=True)
            hostile.write_text('[source.crates-io]\nreplace-with = "planted"\n'
                               '[source.planted]\ndirectory = "/nonexistent"\n')
            planted += 1
        except OSError as error:  # the name cannot exist: cargo cannot read it as a file either
            assert error.errno == errno.ENAMETOOLONG, error
    given = _offline(tree, got.registry, got.config_args, tmp_path)
    assert given.returncode == 0, (planted, given.stderr)


@pytest.mark.timeout(600)
def test_a_chain_of_replacements_is_given_as_the_guest_can_read_it(
        mirror: tuple[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """crates-io -> relay -> mirror: cargo wants every [source] table it is given to name
    a location, so the guest given `source.relay.replace-with` alone refused them all
    ("no source location specified for `source.relay`") after boot."""
    url, _ = mirror
    home = tmp_path / "host-home"
    home.mkdir()
    (home / "config.toml").write_text(
        '[source.crates-io]\nreplace-with = "relay"\n'
        '[source.relay]\nregistry = "sparse+https://relay.invalid/"\nreplace-with = "mirror"\n'
        f'[source.mirror]\nregistry = "{url}"\n')
    tree = _tree(tmp_path / "tree", home)
    monkeypatch.setenv("CARGO_HOME", str(home))
    monkeypatch.setenv("ROTEIRO_HOME", str(tmp_path / "roteiro"))
    done = cli("fetch-deps", str(tree), env={"CARGO_HOME": str(home), "ROTEIRO_HOME": str(tmp_path / "roteiro")})
    assert done.returncode == 0, done.stderr
    got = lint.guest_cargo(lint.locate(tree))
    assert got.registry is not None
    assert not any("relay.invalid" in arg for arg in got.config_args)  # only what the guest needs
    given = _offline(tree, got.registry, got.config_args, tmp_path)
    assert given.returncode == 0, (got.config_args, given.stderr)
