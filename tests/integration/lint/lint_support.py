"""Helpers for the real-lint tests: the linter image built by `pylint-sandbox image build`
and provisioned into the store, the VM assets provisioned, and the real CLI run under TCG
(the only accelerator that boots a guest on these machines; the tests opt in to it as a
user would, with ROTEIRO_VM_ACCEL). Everything is provisioned once into a ROTEIRO_HOME
shared across runs (/var/tmp/roteiro-test-home, or $ROTEIRO_TEST_HOME), as the VM tests do.

`LocalRegistry` stands in for crates.io: a sparse registry served over TLS on loopback
(tests/support), its CA given the documented way (CARGO_HTTP_CAINFO), named `local` in a
cargo home of its own, so nothing a lint test depends on needs the internet (issue 20).
The package store is HOME's, shared across runs: a test that needs a package the store
lacks publishes one of its own (`publish(..., nonce=...)` gives it bytes, so a checksum,
no earlier run had).
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.git_server import git_route
from tests.support.https_server import HttpsServer, Tls
from tests.support.registry import build_registry, make_crate

ROOT = Path(__file__).resolve().parents[3]
EXE = Path(sys.executable).with_name("pylint-sandbox")
HOME = Path(os.environ.get("ROTEIRO_TEST_HOME", "/var/tmp/roteiro-test-home"))


@dataclass(frozen=True)
class Image:
    reference: str
    layout: Path


def build_image(name: str, *extra: str) -> Image:
    """`pylint-sandbox image build` into HOME (its layout cached there across runs by its
    inputs, under cache/images/NAME, and provisioned into HOME's store)."""
    # --no-set-image: HOME is shared by the tests, and a configured image would change
    # what the ones that configure none see
    done = cli("image", "build", "--no-set-image", *extra, timeout=1500)
    assert done.returncode == 0, done.stderr[-3000:]
    return Image(done.stdout.strip().splitlines()[-1], HOME / "cache" / "images" / name)


def cli(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None,
        timeout: float = 900) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, "ROTEIRO_HOME": str(HOME), "ROTEIRO_VM_ACCEL": "tcg", **(env or {})}
    return subprocess.run([str(EXE), *args], capture_output=True, text=True, env=full, cwd=cwd,
                          timeout=timeout, check=False)


def provision_vm_assets() -> Path:
    """The VM assets in HOME (downloaded once; a no-op when they are intact)."""
    HOME.mkdir(parents=True, exist_ok=True)
    done = cli("prefetch", "--vm-assets", "--allow-download", timeout=1500)
    assert done.returncode == 0, done.stderr
    return HOME


def provision(image: Image) -> Image:
    """`image` in HOME's store, from its OCI layout (a no-op when it is there)."""
    done = cli("prefetch", "--analyzer", "clippy", "--from", f"oci:{image.layout}", "--image",
               image.reference, timeout=1500)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == image.reference
    return image


#: What the local registry's crates hold: enough of an API for a lint to find something in
#: the tree using it (a needless `return`), and nothing clippy flags in the crate itself.
FMT_LIB = """pub struct Buffer(String);

impl Buffer {
    pub fn new() -> Buffer {
        Buffer(String::new())
    }

    pub fn format(&mut self, n: u64) -> &str {
        self.0 = n.to_string();
        &self.0
    }
}
"""


@dataclass
class LocalRegistry:
    """A sparse registry over TLS on 127.0.0.1, named `local` in `cargo_home`'s config.toml
    (how a user names a registry their manifests use: `registry = "local"`; the lint gives
    the guest the same name, cargo/vendor.py registry_names)."""

    server: HttpsServer
    root: Path
    tls: Tls
    cargo_home: Path
    crates: dict[tuple[str, str], bytes] = field(default_factory=dict)
    checksums: dict[tuple[str, str], str] = field(default_factory=dict)

    @property
    def source(self) -> str:
        """The lockfile's `source` of a package from here."""
        return f"sparse+{self.server.url}/"

    @property
    def env(self) -> dict[str, str]:
        """What fetch-deps and a lint are given: this cargo home, this CA."""
        return {"CARGO_HOME": str(self.cargo_home), "CARGO_HTTP_CAINFO": str(self.tls.ca_pem)}

    def publish(self, name: str, version: str = "1.0.0", nonce: str = "") -> str:
        """Serve `name` `version` (FMT_LIB, and `nonce` in a comment); returns its checksum."""
        files = {"Cargo.toml": (f'[package]\nname = "{name}"\nversion = "{version}"\n'
                                'edition = "2021"\n').encode(),
                 "src/lib.rs": (FMT_LIB + (f"// {nonce}\n" if nonce else "")).encode()}
        self.crates[(name, version)] = make_crate(name, version, files)
        self.checksums = build_registry(self.root, self.server.url,
                                        [(n, v, data) for (n, v), data in self.crates.items()])
        return self.checksums[(name, version)]

    def dependency(self, name: str, version: str = "1.0.0") -> str:
        """The manifest's line for `name` from here."""
        return f'{name} = {{ version = "={version}", registry = "local" }}\n'

    def lock_entry(self, name: str, version: str = "1.0.0") -> str:
        return (f'[[package]]\nname = "{name}"\nversion = "{version}"\nsource = "{self.source}"\n'
                f'checksum = "{self.checksums[(name, version)]}"\n\n')

    def crate_requests(self, name: str, version: str = "1.0.0") -> int:
        """How many times the `.crate` of `name` `version` was asked for."""
        return len(self.server.requests(f"/crates/{name}/{name}-{version}.crate"))

    def git_repository(self, name: str, lib: str, version: str = "0.1.0") -> tuple[str, str]:
        """A git repository of the crate `name` served by the same host at `/git/<name>.git`
        (git's own smart-HTTP CGI, tests/support/git_server.py); returns (URL, commit)."""
        repositories = self.root.parent / "git"
        if "/git/" not in self.server.routes:
            self.server.route("/git/", git_route(repositories))
        work = self.root.parent / "git-work" / name
        (work / "src").mkdir(parents=True)
        (work / "Cargo.toml").write_text(f'[package]\nname = "{name}"\nversion = "{version}"\n'
                                         'edition = "2021"\n')
        (work / "src" / "lib.rs").write_text(lib)
        git(work, "init", "-q", "-b", "main")
        git(work, "add", "-A")
        git(work, "commit", "-q", "-m", name)
        repositories.mkdir(exist_ok=True)
        git(repositories, "clone", "-q", "--bare", str(work), f"{name}.git")
        return f"{self.server.url}/git/{name}.git", git(work, "rev-parse", "HEAD")


#: git for the tests' own repositories: no configuration of the developer's.
GIT_ENV = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_AUTHOR_NAME": "t",
           "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, env={**os.environ, **GIT_ENV}, capture_output=True,
                          text=True, timeout=60, check=True).stdout.strip()


def git_lock_entry(name: str, url: str, commit: str, version: str = "0.1.0") -> str:
    """A lockfile's pin of `name` from the git repository at `url` (its default branch)."""
    return f'[[package]]\nname = "{name}"\nversion = "{version}"\nsource = "git+{url}#{commit}"\n\n'


def crate_tree(path: Path, registry: LocalRegistry, deps: list[str], lib: str,
               name: str | None = None) -> Path:
    """A crate at `path` (named `name`, else the directory's name) depending on `deps`
    (published in `registry`), its lockfile written as cargo writes one (no cargo runs
    here: a lockfile is the tree's, as committed)."""
    (path / "src").mkdir(parents=True)
    (path / "Cargo.toml").write_text(
        f'[package]\nname = "{name or path.name}"\nversion = "0.1.0"\nedition = "2021"\n'
        "[dependencies]\n" + "".join(registry.dependency(d) for d in deps))
    (path / "src" / "lib.rs").write_text(lib)
    write_lockfile(path, registry, deps, name)
    return path


def write_lockfile(path: Path, registry: LocalRegistry, deps: list[str],
                   name: str | None = None) -> None:
    """`path`'s Cargo.lock: its package (`name`, else the directory's name) pinning `deps`
    from `registry`."""
    (path / "Cargo.lock").write_text(
        "version = 4\n\n" + "".join(registry.lock_entry(d) for d in sorted(deps))
        + f'[[package]]\nname = "{name or path.name}"\nversion = "0.1.0"\ndependencies = ['
        + ", ".join(f'"{d}"' for d in sorted(deps)) + "]\n")


#: A lib using `loopfmt` whose one finding is clippy::needless_return at line 3.
USES_FMT = ("pub fn render(n: u64) -> String {\n    let mut buffer = loopfmt::Buffer::new();\n"
            "    return buffer.format(n).to_string();\n}\n")
