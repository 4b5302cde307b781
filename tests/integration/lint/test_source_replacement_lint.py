"""A host whose cargo replaces crates.io with a mirror: fetch-deps downloads through the
mirror, and the lint's guest gets the vendored view whatever the host's tables say.

The mirror is a sparse registry served over TLS on loopback (tests/support), its CA
given as CARGO_HTTP_CAINFO; the host's cargo home (private, tmp) says `[source.crates-io]
replace-with = "mirror"`; the tree's lockfile pins the crate from crates.io, as cargo
writes it behind a replacement. The host's `[source]` tables are followed for downloads
only (cargo/sources.py, cargo/registry.py): the guest is given the view's own tables
(`--config /cargo-home/registry/sources.toml`, cargo/vendor.py), in which crates.io is
replaced by the view's directory. Every other request goes to a recording proxy
(HTTPS_PROXY, loopback exempt), so "crates.io was never contacted" is observed, with a
control arm where it is.

Gone with the design they tested (issue 20): the guest given the host's replacement as
`--config source...` values (and their padding), the view found under the mirror's
cache directory, and a chain of replacements given as the guest can read it. A chain is
still followed for downloads (the last test, no VM); what the guest reads no longer
depends on it.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from roteiro_py import lint
from roteiro_py.cargo.lockfile import CRATES_IO_SOURCE
from roteiro_py.cargo.vendor import GUEST_SOURCES
from roteiro_py.vm.mounts import GUEST_CARGO_HOME
from tests.integration.lint.lint_support import Image, LocalRegistry, cli
from tests.support.https_server import HttpsServer, serve
from tests.support.registry import build_registry, make_crate

CRATE = "roteiro-mirror-probe"
PLANTED = '[source.crates-io]\nreplace-with = "planted"\n[source.planted]\ndirectory = "/nonexistent"\n'


@dataclass
class Mirrored:
    tree: Path
    env: dict[str, str]
    crate_path: str


@dataclass
class Mirror:
    server: HttpsServer
    root: Path


@pytest.fixture(scope="module")
def mirror(tmp_path_factory: pytest.TempPathFactory, local_registry: LocalRegistry) -> Iterator[Mirror]:
    """An empty sparse registry on loopback, with the session's CA; each test serves its own crate."""
    root = tmp_path_factory.mktemp("mirror")
    with serve(root, local_registry.tls) as server:
        yield Mirror(server, root)


@contextlib.contextmanager
def recording_proxy() -> Iterator[tuple[int, list[str]]]:
    """A loopback listener standing in for every host but loopback (HTTPS_PROXY): it
    records each request's first line (`CONNECT index.crates.io:443 HTTP/1.1`) and closes."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.settimeout(0.1)
    seen: list[str] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                client, _ = listener.accept()
            except TimeoutError:
                continue
            with client, contextlib.suppress(OSError):
                client.settimeout(5)
                seen.append(client.recv(4096).split(b"\r\n")[0].decode("latin-1"))

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1], seen
    finally:
        stop.set()
        thread.join(5)
        listener.close()


def mirrored(tmp_path: Path, mirror: Mirror, local_registry: LocalRegistry, proxy: int) -> Mirrored:
    """A crate of bytes no earlier run had (so the shared store lacks it) on the mirror, a
    host cargo home replacing crates.io with the mirror, and a tree pinning the crate from
    crates.io."""
    nonce = uuid.uuid4().hex
    data = make_crate(CRATE, "0.1.0", {
        "Cargo.toml": f'[package]\nname = "{CRATE}"\nversion = "0.1.0"\nedition = "2021"\n'.encode(),
        "src/lib.rs": f"// {nonce}\npub fn probe() -> u64 {{ 7 }}\n".encode()})
    url = mirror.server.url
    checksum = build_registry(mirror.root, url, [(CRATE, "0.1.0", data)])[(CRATE, "0.1.0")]
    home = tmp_path / "host-cargo-home"
    home.mkdir()
    (home / "config.toml").write_text(f'[source.crates-io]\nreplace-with = "mirror"\n'
                                      f'[source.mirror]\nregistry = "sparse+{url}/"\n')
    tree = tmp_path / "tree"
    (tree / "src").mkdir(parents=True)
    (tree / "Cargo.toml").write_text(f'[package]\nname = "mirrored"\nversion = "0.1.0"\n'
                                     f'edition = "2021"\n[dependencies]\n{CRATE} = "0.1"\n')
    (tree / "src" / "lib.rs").write_text("pub fn seven() -> u64 {\n    return roteiro_mirror_probe::probe();\n}\n")
    (tree / "Cargo.lock").write_text(
        f'version = 4\n\n[[package]]\nname = "mirrored"\nversion = "0.1.0"\ndependencies = ["{CRATE}"]\n\n'
        f'[[package]]\nname = "{CRATE}"\nversion = "0.1.0"\nsource = "{CRATES_IO_SOURCE}"\n'
        f'checksum = "{checksum}"\n')
    env = {"CARGO_HOME": str(home), "CARGO_HTTP_CAINFO": str(local_registry.tls.ca_pem),
           "HTTPS_PROXY": f"http://127.0.0.1:{proxy}", "NO_PROXY": "127.0.0.1"}
    return Mirrored(tree, env, f"/crates/{CRATE}/{CRATE}-0.1.0.crate")


def lint_json(tree: Path, image: Image, env: dict[str, str]) -> dict:
    done = cli("lint", "clippy", str(tree), "--image", image.reference, "--format", "json", env=env,
               timeout=1500)
    assert done.returncode == 1, done.stdout + done.stderr[-3000:]
    report: dict = json.loads(done.stdout)
    assert report["summary"]["build_succeeded"] is True
    assert ("clippy::needless_return", "src/lib.rs", 2) in {
        (f["code"], f["path"], f["line"]) for f in report["findings"]}, report["findings"]
    return report


@pytest.mark.timeout(1800)
def test_fetch_deps_downloads_through_the_hosts_mirror_and_the_guest_lints_from_the_view(
        mirror: Mirror, local_registry: LocalRegistry, clippy_image: Image, tmp_path: Path) -> None:
    with recording_proxy() as (port, seen):
        case = mirrored(tmp_path, mirror, local_registry, port)
        fetched = cli("fetch-deps", str(case.tree), env=case.env)
        assert fetched.returncode == 0, fetched.stderr
        assert "1 downloaded" in fetched.stdout
        assert len(mirror.server.requests(case.crate_path)) == 1  # from the mirror...
        assert seen == []  # ... and from nowhere else: crates.io was never contacted

        # control: the same pin without the host's mirror goes for crates.io (the proxy
        # sees it, and ends it), so `seen` above could have seen it
        plain = tmp_path / "plain-cargo-home"
        plain.mkdir()
        cold = cli("fetch-deps", str(case.tree), env={**case.env, "CARGO_HOME": str(plain),
                                                      "ROTEIRO_HOME": str(tmp_path / "empty-store")})
        assert cold.returncode == 3, cold.stdout + cold.stderr
        assert any("index.crates.io:443" in line for line in seen), seen

    lint_json(case.tree, clippy_image, case.env)


@pytest.mark.timeout(1800)
def test_no_tree_file_stands_in_for_the_views_tables(
        mirror: Mirror, local_registry: LocalRegistry, clippy_image: Image, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """cargo reads `--config X` as a configuration FILE when X names one, a relative X from
    its working directory, which in the guest is the tree. The guest's X is an absolute
    path in a read-only share, so a tree file named like it (at the tree's root, or at
    the argument's path under it), or the tree's own `.cargo/config.toml`, replacing
    crates.io with a directory that lacks the crate, is not read in its place: the lint
    builds. Control (real host cargo, offline, the view's tables rebased onto the host as
    test_vendor.py's host_cargo does): the planted tables, read at `--config` rank, do
    break the build, so the lint building is not the planted file being harmless."""
    with recording_proxy() as (port, _):
        case = mirrored(tmp_path, mirror, local_registry, port)
        fetched = cli("fetch-deps", str(case.tree), env=case.env)
        assert fetched.returncode == 0, fetched.stderr
    planted = [case.tree / "sources.toml", case.tree / GUEST_SOURCES.lstrip("/"),
               case.tree / ".cargo" / "config.toml"]
    for path in planted:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(PLANTED)

    for name, value in case.env.items():
        monkeypatch.setenv(name, value)
    got = lint.guest_cargo(lint.locate(case.tree))
    assert got.config_args == ("--config", GUEST_SOURCES) and got.registry is not None
    view = got.registry.parent
    rebased = tmp_path / "rebased-sources.toml"
    rebased.write_text((got.registry / "sources.toml").read_text().replace(GUEST_CARGO_HOME, str(view)))
    env = {**os.environ, "CARGO_HOME": str(tmp_path / "guest-like-home"),
           "CARGO_TARGET_DIR": str(tmp_path / "host-target")}

    def host_check(*configs: Path) -> subprocess.CompletedProcess[str]:
        args = [item for config in configs for item in ("--config", str(config))]
        return subprocess.run(["cargo", "check", "--offline", "--locked", "-q", *args], cwd=case.tree,
                              env=env, capture_output=True, text=True, timeout=600, check=False)

    given = host_check(rebased)
    assert given.returncode == 0, given.stderr  # the view's tables outrank .cargo/config.toml
    overridden = host_check(rebased, planted[0])
    assert overridden.returncode != 0 and "nonexistent" in overridden.stderr, overridden.stderr

    lint_json(case.tree, clippy_image, case.env)


def test_a_chain_of_replacements_is_followed_for_the_download(
        mirror: Mirror, local_registry: LocalRegistry, tmp_path: Path) -> None:
    """crates-io -> relay -> mirror in the host's configuration: the .crate comes from the
    end of the chain, and neither crates.io nor the relay is contacted (no VM: what the
    guest reads does not depend on the host's tables)."""
    with recording_proxy() as (port, seen):
        case = mirrored(tmp_path, mirror, local_registry, port)
        home = Path(case.env["CARGO_HOME"])
        (home / "config.toml").write_text(
            '[source.crates-io]\nreplace-with = "relay"\n'
            '[source.relay]\nregistry = "sparse+https://relay.invalid/"\nreplace-with = "mirror"\n'
            f'[source.mirror]\nregistry = "sparse+{mirror.server.url}/"\n')
        before = len(mirror.server.requests(case.crate_path))  # the module's mirror is shared
        fetched = cli("fetch-deps", str(case.tree), env=case.env)
        assert fetched.returncode == 0, fetched.stderr
        assert "1 downloaded" in fetched.stdout
        assert len(mirror.server.requests(case.crate_path)) == before + 1
        assert seen == [], seen
