"""`pylint-sandbox fetch-deps`: fill the host's cargo package cache without running the tree.

The VM has no network, so the crates a tree depends on come from the host's cargo cache
(`$CARGO_HOME/registry` and `$CARGO_HOME/git`, mounted read-only in the guest). Filling
it naively, with `cargo fetch` in the tree, would run the tree's configuration on the
host: cargo reads the tree's `.cargo/config.toml` (`build.rustc`, `build.rustc-wrapper`,
`[env]`, `[target.*.runner]`, registry replacements), and rustup honours a
`rust-toolchain(.toml)` that can name a toolchain path, i.e. run any program. Linting a
branch you review must not execute its author's code outside the VM.

So the fetch runs in a clean copy made here, under $ROTEIRO_HOME: only the manifests
(`Cargo.toml`, every one under the workspace root) and the lockfile are copied; every
target a manifest declares gets an empty source file so cargo can load the workspace;
nothing else from the tree exists in the copy (no `.cargo/`, no toolchain file, no
build script bodies). cargo runs there with `--locked`, so the lockfile is not rewritten
and nothing outside what it pins is fetched, and with RUSTUP_TOOLCHAIN fixed to the
host's own toolchain so no toolchain file anywhere is consulted.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from roteiro_py import paths
from roteiro_py.errors import FetchFailed, LockfileWouldBeWritten, SpawnFailed, UsageError
from roteiro_py.guidance import printable

#: Directories never searched for manifests: build output and version-control data.
_SKIP_DIRS = {"target", ".git", ".hg", ".svn", "node_modules"}
_TARGET_TABLES = ("lib", "bin", "example", "test", "bench")


def find_workspace_root(path: Path) -> Path:
    """The directory holding the Cargo.lock that `path` is built with.

    Walks up from `path` to the nearest directory with a Cargo.lock, or else the
    outermost Cargo.toml with a [workspace] table, or else the nearest Cargo.toml.
    """
    start = path.resolve()
    if start.is_file():
        start = start.parent
    nearest_manifest: Path | None = None
    workspace: Path | None = None
    for directory in (start, *start.parents):
        if (directory / "Cargo.lock").is_file():
            return directory
        manifest = directory / "Cargo.toml"
        if manifest.is_file():
            nearest_manifest = nearest_manifest or directory
            if "workspace" in _read_manifest(manifest):
                workspace = directory
    root = workspace or nearest_manifest
    if root is None:
        raise UsageError(f"No Cargo.toml at or above {printable(str(start))}.",
                         hint="Point fetch-deps (or lint) at a Rust crate or workspace.")
    return root


def _read_manifest(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return {}


def _manifests(root: Path) -> Iterator[Path]:
    for directory, subdirs, files in os.walk(root, followlinks=False):
        subdirs[:] = sorted(d for d in subdirs if d not in _SKIP_DIRS and not d.startswith("."))
        if "Cargo.toml" in files:
            yield Path(directory) / "Cargo.toml"


def _inside(base: Path, relative: str) -> Path | None:
    """`base / relative` when that stays inside `base` (no absolute paths, no `..` escape)."""
    candidate = (base / relative).resolve()
    return candidate if candidate.is_relative_to(base.resolve()) else None


def _declared_targets(manifest: dict[str, Any]) -> list[str]:
    """Source files a manifest names or implies, relative to its directory."""
    wanted = ["src/lib.rs", "src/main.rs"]
    for table in _TARGET_TABLES:
        entries = manifest.get(table)
        for entry in entries if isinstance(entries, list) else [entries] if entries else []:
            if isinstance(entry, dict) and isinstance(entry.get("path"), str):
                wanted.append(entry["path"])
    return wanted


def make_clean_copy(root: Path, destination: Path) -> int:
    """Copy only manifests and the lockfile of `root` into `destination`; returns manifests copied."""
    count = 0
    for manifest in _manifests(root):
        relative = manifest.parent.relative_to(root)
        target_dir = destination / relative
        target_dir.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(manifest, target_dir / "Cargo.toml")
        data = _read_manifest(manifest)
        if "package" in data:
            for source in _declared_targets(data):
                placed = _inside(target_dir, source)
                if placed is not None and not placed.exists():
                    placed.parent.mkdir(parents=True, exist_ok=True)
                    placed.write_text("fn main() {}\n" if source.endswith("main.rs") else "")
        count += 1
    lock = root / "Cargo.lock"
    if lock.is_file():
        shutil.copyfile(lock, destination / "Cargo.lock")
    return count


def host_toolchain() -> str | None:
    """The host's own default rustup toolchain name, so no toolchain file is consulted."""
    rustup = shutil.which("rustup")
    if rustup is None:
        return None
    result = subprocess.run([rustup, "default"], capture_output=True, text=True, timeout=60,
                            cwd=paths.roteiro_home() if paths.roteiro_home().is_dir() else "/")
    if result.returncode != 0 or not result.stdout.strip():
        return None
    return result.stdout.split()[0]


def unsafe_sources(lockfile: Path) -> list[str]:
    """Sources in the lockfile that host cargo must not be sent to: anything but https.

    The tree chooses these URLs, and the host's cargo fetches them with the host's
    network, SSH agent and git credentials: `file://` reads host paths into the shared
    cache, `ssh://` and `git://` reach whatever the host can, `http://` is unauthenticated.
    """
    try:
        data = tomllib.loads(lockfile.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as error:
        return [f"(unreadable lockfile: {error})"]
    found: list[str] = []
    packages = data.get("package")
    for package in packages if isinstance(packages, list) else []:
        source = package.get("source") if isinstance(package, dict) else None
        if not isinstance(source, str):
            continue
        _, _, url = source.partition("+")
        if not url.startswith("https://"):
            found.append(source)
    return found


def fetch_deps(path: Path) -> tuple[Path, int]:
    """Fetch what `path`'s lockfile pins into the host cache; returns (workspace root, manifests)."""
    root = find_workspace_root(path)
    if not (root / "Cargo.lock").is_file():
        raise LockfileWouldBeWritten(root, f"{root / 'Cargo.lock'} does not exist")
    refused = unsafe_sources(root / "Cargo.lock")
    if refused:
        raise FetchFailed(root, f"the lockfile pins sources other than https: {', '.join(refused[:3])}; "
                          "fetch-deps fetches only over https")
    cargo = shutil.which("cargo")
    if cargo is None:
        raise SpawnFailed("cargo", "not found on PATH; fetch-deps runs the host's cargo to download crates")
    scratch_parent = paths.roteiro_home() / "tmp"
    scratch_parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="fetch-deps-", dir=scratch_parent) as scratch:
        copy = Path(scratch) / "tree"
        copy.mkdir()
        manifests = make_clean_copy(root, copy)
        env = dict(os.environ)
        toolchain = host_toolchain()
        if toolchain:
            env["RUSTUP_TOOLCHAIN"] = toolchain
        env.pop("RUSTC_WRAPPER", None)
        result = subprocess.run(
            [cargo, "fetch", "--locked", "--manifest-path", str(copy / "Cargo.toml")],
            cwd=copy, env=env, capture_output=True, text=True, timeout=1800,
        )
    if result.returncode != 0:
        stderr = result.stderr.replace(str(copy), str(root))
        lines = [line for line in stderr.splitlines() if line.strip()]
        first_error = next((line for line in lines if line.startswith("error")), lines[-1] if lines else "")
        if "--locked" in stderr or "needs to be updated" in stderr:
            raise LockfileWouldBeWritten(root, first_error)
        raise FetchFailed(root, first_error)
    return root, manifests


def run_fetch_deps(path: Path) -> int:
    root, manifests = fetch_deps(path)
    cache = paths.cargo_home() / "registry"
    sys.stdout.write(f"fetched the dependencies of {printable(str(root))} ({manifests} manifests) "
                     f"into {printable(str(cache))}\n")
    return 0
