"""Real lints in a VM (TCG) of trees whose dependencies came from the lockfile alone
(issue 20): `fetch-deps` read nothing but Cargo.lock, and the guest saw only the vendored
view of the package store, whose every file its cargo checked.

- A workspace pinning `serde` (with derive) and `serde_json` from crates.io and one
  https git dependency (a local git host over TLS, its CA given the documented way) gives
  the same findings as host `cargo clippy` on the same tree, and its dependency cache is
  built from the same vendored view. crates.io is the one remote here: the registry
  itself, as a user's lint would use it (the property tests use the loopback registry).
- A crate declaring explicit `[[bench]]` (harness = false), `[[test]]` and `[[example]]`
  targets, as published crates do, fetches and lints: host cargo in a clean copy of the
  manifests refused such a manifest ("failed to parse manifest"), so every lint of it was
  refused for a cold cache. Its registry dependency comes from the loopback registry.
"""

from __future__ import annotations

import json
import os
import ssl
import subprocess
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

import pytest

from roteiro_py.clippy.command import ClippyOptions, clippy_argv
from roteiro_py.clippy.parse import PathLayout, parse_messages
from tests.integration.lint.lint_support import Image, cli
from tests.support.git_server import git_route
from tests.support.https_server import Tls, make_tls, serve
from tests.support.registry import build_registry, make_crate

GIT_ENV = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_AUTHOR_NAME": "t",
           "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
Finding = tuple[str | None, str | None, int | None]


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> Tls:
    """The loopback hosts' CA, in a bundle with this machine's own CAs (crates.io is
    reached too): what a user behind a corporate CA gives cargo, and us, as CARGO_HTTP_CAINFO."""
    made = make_tls(tmp_path_factory.mktemp("tls"))
    system = Path(os.environ.get("SSL_CERT_FILE") or ssl.get_default_verify_paths().cafile or "")
    bundle = made.ca_pem.with_name("bundle.pem")
    bundle.write_bytes((system.read_bytes() if system.is_file() else b"") + made.ca_pem.read_bytes())
    return Tls(bundle, made.cert_pem, made.key_pem)


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, env={**os.environ, **GIT_ENV}, capture_output=True,
                          text=True, timeout=60, check=True).stdout.strip()


def _host_cargo_env(tmp: Path, tls: Tls) -> dict[str, str]:
    """Host cargo for the reference run: a cargo home of the test's, the test CA."""
    return {**os.environ, "CARGO_HOME": str(tmp / "host-cargo-home"), "CARGO_HTTP_CAINFO": str(tls.ca_pem),
            "CARGO_TARGET_DIR": str(tmp / "host-target")}


def host_findings(tree: Path, env: dict[str, str], all_targets: bool) -> set[Finding]:
    """The same clippy on the host (a fixture tree of this test's): the reference."""
    fetched = subprocess.run(["cargo", "fetch", "--locked"], cwd=tree, env=env, capture_output=True,
                             text=True, timeout=900, check=False)
    assert fetched.returncode == 0, fetched.stderr[-3000:]
    argv = clippy_argv(ClippyOptions(all_targets=all_targets))
    done = subprocess.run(argv, cwd=tree, env=env, capture_output=True, timeout=900, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    stream = parse_messages(done.stdout, PathLayout(PurePosixPath(".")))
    return {(f.code, f.path, f.line) for f in stream.findings}


def lint(tree: Path, image: Image, tls: Tls, *extra: str, cargo_home: Path | None = None) -> dict[str, object]:
    env = {"CARGO_HTTP_CAINFO": str(tls.ca_pem)} | ({"CARGO_HOME": str(cargo_home)} if cargo_home else {})
    fetched = cli("fetch-deps", str(tree), env=env, timeout=900)
    assert fetched.returncode == 0, fetched.stderr
    done = cli("lint", "clippy", str(tree), "--image", image.reference, "--format", "json",
               "--fail-on", "never", *extra, env=env, timeout=2400)
    assert done.returncode == 0, done.stderr[-3000:]
    report: dict[str, object] = json.loads(done.stdout)
    return report


def findings(report: dict[str, object]) -> set[Finding]:
    found = report["findings"]
    assert isinstance(found, list)
    return {(f["code"], f["path"], f["line"]) for f in found}


@pytest.fixture(scope="module")
def git_host(tmp_path_factory: pytest.TempPathFactory, tls: Tls) -> Iterator[str]:
    """A git host over TLS on loopback serving `gdep.git`; yields its URL."""
    base = tmp_path_factory.mktemp("git-host")
    work = base / "gdep"
    (work / "src").mkdir(parents=True)
    (work / "Cargo.toml").write_text('[package]\nname = "gdep"\nversion = "0.3.0"\nedition = "2021"\n')
    (work / "src" / "lib.rs").write_text("pub fn answer() -> u64 { 42 }\n")
    _git(work, "init", "-q", "-b", "main")
    _git(work, "add", "-A")
    _git(work, "commit", "-q", "-m", "gdep")
    repos = base / "repos"
    repos.mkdir()
    _git(repos, "clone", "-q", "--bare", str(work), "gdep.git")
    with serve(base / "empty", tls, {"/git/": git_route(repos)}) as server:
        yield f"{server.url}/git/gdep.git"


SERDE_LIB = """use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Debug)]
pub struct Point {
    pub x: i64,
    pub y: i64,
}

pub fn roundtrip(p: &Point) -> Point {
    let text = serde_json::to_string(p).unwrap();
    let back: Point = serde_json::from_str(&text).unwrap();
    return back;
}

pub fn from_git() -> u64 {
    let v = gdep::answer();
    v
}
"""


@pytest.mark.timeout(3600)
def test_serde_and_a_git_dependency_lint_as_host_clippy_does(tmp_path: Path, clippy_image: Image,
                                                              tls: Tls, git_host: str) -> None:
    tree = tmp_path / "app"
    (tree / "src").mkdir(parents=True)
    (tree / "Cargo.toml").write_text(
        '[package]\nname = "app"\nversion = "0.1.0"\nedition = "2021"\n[dependencies]\n'
        'serde = { version = "=1.0.219", features = ["derive"] }\nserde_json = "=1.0.140"\n'
        f'gdep = {{ git = "{git_host}", branch = "main" }}\n')
    (tree / "src" / "lib.rs").write_text(SERDE_LIB)
    env = _host_cargo_env(tmp_path, tls)
    made = subprocess.run(["cargo", "generate-lockfile"], cwd=tree, env=env, capture_output=True,
                          text=True, timeout=600, check=False)
    assert made.returncode == 0, made.stderr
    expected = host_findings(tree, env, all_targets=False)
    assert {code for code, _, _ in expected} >= {"clippy::needless_return", "clippy::let_and_return"}
    report = lint(tree, clippy_image, tls)
    assert findings(report) == expected
    deps = report["dependency_cache"]
    assert isinstance(deps, dict) and deps["state"] == "built", deps  # from the same vendored view


BENCH_CRATE = {
    "Cargo.toml": """[package]
name = "hexlike"
version = "0.4.3"
edition = "2018"
autobenches = false
autotests = false
autoexamples = false

[dependencies]
tiny = { version = "1", registry = "local" }

[[bench]]
name = "hex"
harness = false

[[test]]
name = "version-number"
path = "tests/version-number.rs"

[[example]]
name = "hexdump"
""",
    "src/lib.rs": "pub fn encode(data: &[u8]) -> usize {\n    return data.len() * 2 + tiny::tiny() as usize;\n}\n",
    "benches/hex.rs": ("fn f() -> usize {\n    let n = hexlike::encode(b\"x\");\n    n\n}\n\n"
                       "fn main() {\n    println!(\"{}\", f());\n}\n"),
    "tests/version-number.rs": "#[test]\nfn it() { assert!(hexlike::encode(b\"\") == 2); }\n",
    "examples/hexdump.rs": ("fn main() {\n    let v = hexlike::encode(b\"ab\");\n"
                            "    return println!(\"{}\", v);\n}\n"),
}


@pytest.mark.timeout(1800)
def test_a_crate_with_explicit_bench_test_and_example_targets_fetches_and_lints(
        tmp_path: Path, clippy_image: Image, tls: Tls) -> None:
    root = tmp_path / "registry"
    with serve(root, tls) as server:
        checksums = build_registry(root, server.url, [("tiny", "1.0.0", make_crate("tiny", "1.0.0"))])
        tree = tmp_path / "hexlike"
        for name, text in BENCH_CRATE.items():
            (tree / name).parent.mkdir(parents=True, exist_ok=True)
            (tree / name).write_text(text)
        (tree / "Cargo.lock").write_text(
            'version = 4\n[[package]]\nname = "hexlike"\nversion = "0.4.3"\ndependencies = ["tiny"]\n'
            f'[[package]]\nname = "tiny"\nversion = "1.0.0"\nsource = "sparse+{server.url}/"\n'
            f'checksum = "{checksums[("tiny", "1.0.0")]}"\n')
        # the registry's name is the user's (their cargo configuration), which the guest never
        # reads: the view's sources.toml names it for the guest
        env = _host_cargo_env(tmp_path, tls)
        home = Path(env["CARGO_HOME"])
        home.mkdir()
        (home / "config.toml").write_text(f'[registries.local]\nindex = "sparse+{server.url}/"\n')
        expected = host_findings(tree, env, all_targets=True)
        assert {path for _, path, _ in expected} >= {"src/lib.rs", "benches/hex.rs", "examples/hexdump.rs"}
        report = lint(tree, clippy_image, tls, "--all-targets", "--no-dep-cache", cargo_home=home)
    assert findings(report) == expected
