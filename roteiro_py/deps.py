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
from roteiro_py.errors import (
    FetchFailed,
    LockfileWouldBeWritten,
    SpawnFailed,
    TreeFileRefused,
    UsageError,
)
from roteiro_py.guidance import printable
from roteiro_py.untrusted import FileRefused, read_bounded

#: Directories never searched for manifests: build output and version-control data.
_SKIP_DIRS = {"target", ".git", ".hg", ".svn", "node_modules"}
_TARGET_TABLES = ("lib", "bin", "example", "test", "bench")
#: The largest manifest (Cargo.toml) the host reads. The largest on crates.io are tens of
#: KiB (generated feature tables); a member `Cargo.toml -> /dev/zero` wrote 2.4 GB in 8 s.
MANIFEST_MAX_BYTES = 1024 * 1024
#: The largest Cargo.lock the host reads: ~150 bytes a package, so ~100,000 packages.
LOCKFILE_MAX_BYTES = 16 * 1024 * 1024
#: At most this many member manifests are copied for fetch-deps (the largest workspaces
#: have a few hundred members).
MAX_MANIFESTS = 2000
#: Directories deeper than this below the workspace root are not searched for manifests.
MAX_WALK_DEPTH = 32



def read_tree_file(path: Path, limit: int, *, dir_fd: int | None = None) -> bytes:
    """The bytes of the tree's regular file `path`, at most `limit` of them, or
    errors.TreeFileRefused naming it (untrusted.read_bounded: no link, no FIFO, bounded).

    `dir_fd`: the directory holding it, opened by a walk that followed no link; then only
    `path.name` is opened, in that directory, and `path` names it in a refusal."""
    try:
        return read_bounded(path.name if dir_fd is not None else path, limit, dir_fd=dir_fd)
    except FileNotFoundError:
        raise TreeFileRefused(path, "it does not exist") from None
    except FileRefused as refused:
        raise TreeFileRefused(path, refused.reason) from None


def parse_tree_toml(path: Path, data: bytes) -> dict[str, Any]:
    """`data` (the bytes of the tree's `path`) as TOML, or errors.TreeFileRefused.

    tomllib recurses once per nesting level: `a = [[[[...` a few thousand deep raised
    RecursionError (exit 4, "a bug"), and a 5,000-digit integer a bare ValueError. Every
    TOML file of a tree goes through here.
    """
    try:
        return tomllib.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise TreeFileRefused(path, "it is not UTF-8") from None
    except tomllib.TOMLDecodeError as error:
        raise TreeFileRefused(path, f"it is not valid TOML ({error})") from None
    except RecursionError:
        raise TreeFileRefused(path, "its TOML is nested too deeply to parse") from None
    except ValueError:
        # an integer past Python's int-to-str digit limit (4300) raised a bare ValueError
        # from inside tomllib: exit 4 for a tree whose Cargo.toml holds one
        raise TreeFileRefused(path, "it holds a number too long to read") from None


def read_lockfile(path: Path) -> dict[str, Any]:
    """The tree's Cargo.lock, bounded by LOCKFILE_MAX_BYTES, or errors.TreeFileRefused."""
    return parse_tree_toml(path, read_tree_file(path, LOCKFILE_MAX_BYTES))


def read_manifest(path: Path) -> dict[str, Any]:
    """A Cargo.toml of the tree, bounded by MANIFEST_MAX_BYTES, or errors.TreeFileRefused."""
    return parse_tree_toml(path, read_tree_file(path, MANIFEST_MAX_BYTES))


def find_workspace_root(path: Path) -> Path:
    """The directory holding the Cargo.lock that `path` is built with.

    Walks up from `path` to the nearest directory with a Cargo.lock, or else the
    outermost Cargo.toml with a [workspace] table, or else the nearest Cargo.toml.
    """
    start = path.resolve()
    try:
        if start.is_file():
            start = start.parent
    except OSError as error:
        raise UsageError(f"{printable(str(start))} cannot be read: {error.strerror}.",
                         hint="Point fetch-deps (or lint) at a tree this user can read.") from None
    nearest_manifest: Path | None = None
    workspace: Path | None = None
    for directory in (start, *start.parents):
        if (directory / "Cargo.lock").is_file():
            return directory
        manifest = directory / "Cargo.toml"
        if manifest.is_file():
            nearest_manifest = nearest_manifest or directory
            if "workspace" in _lenient_manifest(manifest):
                workspace = directory
    root = workspace or nearest_manifest
    if root is None:
        raise UsageError(f"No Cargo.toml at or above {printable(str(start))}.",
                         hint="Point fetch-deps (or lint) at a Rust crate or workspace.")
    return root


def _lenient_manifest(path: Path) -> dict[str, Any]:
    """A manifest above the workspace, read only to find a [workspace] table: one that is
    not readable TOML has none (cargo, which reads it in the guest, says what is wrong)."""
    try:
        return read_manifest(path)
    except TreeFileRefused:
        return {}


def _manifests(root: Path) -> Iterator[Path]:
    """Every Cargo.toml under `root`, at most MAX_WALK_DEPTH directories down and at most
    MAX_MANIFESTS of them (past either bound: errors.TreeFileRefused naming where)."""
    count = 0
    for directory, subdirs, files in os.walk(root, followlinks=False):
        here = Path(directory)
        depth = len(here.relative_to(root).parts)
        subdirs[:] = sorted(d for d in subdirs if d not in _SKIP_DIRS and not d.startswith("."))
        if subdirs and depth >= MAX_WALK_DEPTH:
            raise TreeFileRefused(here / subdirs[0], f"it is more than {MAX_WALK_DEPTH} directories "
                                  "below the workspace root, the deepest searched for manifests")
        if "Cargo.toml" in files:
            count += 1
            if count > MAX_MANIFESTS:
                raise TreeFileRefused(here / "Cargo.toml", f"the workspace has more than "
                                      f"{MAX_MANIFESTS} manifests, the most fetch-deps copies")
            yield here / "Cargo.toml"


def _inside(base: Path, relative: str) -> Path | None:
    """`base / relative` when that stays inside `base` (no absolute paths, no `..` escape).

    Resolved in the clean copy, which holds only directories and files made here (no
    links), so resolving cannot be steered by the tree.
    """
    try:
        candidate = (base / relative).resolve()
    except (OSError, ValueError, RuntimeError):  # too long, a NUL byte, a loop
        return None
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
    """Copy only manifests and the lockfile of `root` into `destination`; returns manifests copied.

    Every file is read through `read_tree_file` (regular files only, no links, bounded);
    what is written is the bytes that were checked, never a second read. The manifests
    and the lockfile are all placed before any empty target file, and a target is
    placed only where nothing exists yet, so a target path such as
    `../other/Cargo.toml/x.rs` can neither replace a manifest nor block one.
    """
    members: list[tuple[Path, dict[str, Any]]] = []
    for manifest in _manifests(root):
        data = read_tree_file(manifest, MANIFEST_MAX_BYTES)
        parsed = parse_tree_toml(manifest, data)
        target_dir = destination / manifest.parent.relative_to(root)
        target_dir.mkdir(parents=True, exist_ok=True)
        (target_dir / "Cargo.toml").write_bytes(data)
        members.append((target_dir, parsed))
    lock = root / "Cargo.lock"
    if os.path.lexists(lock):
        (destination / "Cargo.lock").write_bytes(read_tree_file(lock, LOCKFILE_MAX_BYTES))
    for target_dir, parsed in members:
        if "package" not in parsed:
            continue
        for source in _declared_targets(parsed):
            placed = _inside(target_dir, source)
            if placed is None or os.path.lexists(placed):
                continue
            try:
                placed.parent.mkdir(parents=True, exist_ok=True)
                placed.write_text("fn main() {}\n" if source.endswith("main.rs") else "")
            except OSError:
                continue  # a path that cannot exist here: cargo names it if it matters
    return len(members)


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
    A lockfile that cannot be read is errors.TreeFileRefused naming it.
    """
    return unsafe_sources_in(read_lockfile(lockfile))


def unsafe_sources_in(data: dict[str, Any]) -> list[str]:
    """`unsafe_sources` of an already parsed lockfile.

    Every `source` key anywhere in the lockfile counts, not only those of `[[package]]`:
    a `[patch]` no package uses is written as `[[patch.unused]]` with its source, and
    `cargo fetch --locked` clones it (a `git+file://` there copied a host repository
    into the cache). The walk is iterative and visits the parsed document once.
    """
    found: list[str] = []
    pending: list[object] = [data]
    while pending:
        node = pending.pop()
        if isinstance(node, dict):
            source = node.get("source")
            if isinstance(source, str):
                _, _, url = source.partition("+")
                if not url.startswith("https://"):
                    found.append(source)
            pending.extend(value for key, value in node.items() if key != "source")
        elif isinstance(node, list):
            pending.extend(node)
    return sorted(set(found))


_DEPENDENCY_TABLES = ("dependencies", "dev-dependencies", "build-dependencies")


def unsafe_manifest_sources(manifest: dict[str, Any]) -> list[str]:
    """`git` and `registry-index` URLs other than https in a manifest's dependency tables.

    `cargo fetch --locked` resolves every declared dependency before it compares the
    result with the lockfile, so a `git = "file:///home/x/private"` that the lockfile
    does not pin is fetched by host cargo (into the host cache) before --locked refuses.
    Looked at: [dependencies] and its dev-/build- kin at the top, under [target.*] and
    under [workspace]; every entry of [patch.*] and [replace].
    """
    tables: list[object] = [manifest.get(name) for name in _DEPENDENCY_TABLES]
    workspace = manifest.get("workspace")
    if isinstance(workspace, dict):
        tables += [workspace.get(name) for name in _DEPENDENCY_TABLES]
    targets = manifest.get("target")
    for platform in targets.values() if isinstance(targets, dict) else []:
        if isinstance(platform, dict):
            tables += [platform.get(name) for name in _DEPENDENCY_TABLES]
    patches = manifest.get("patch")
    tables += list(patches.values()) if isinstance(patches, dict) else []
    tables.append(manifest.get("replace"))
    found: list[str] = []
    for table in tables:
        for dependency in table.values() if isinstance(table, dict) else []:
            if not isinstance(dependency, dict):
                continue
            for key in ("git", "registry-index"):
                url = dependency.get(key)
                if url is not None and not (isinstance(url, str) and url.startswith("https://")):
                    found.append(f"{key} = {url!r}")
    return found


def _follows_host_sources(root: Path, lockfile: dict[str, Any]) -> None:
    """Refuse, before cargo runs, a host `[source]` replacement the lint could not give
    the guest (cargo_sources.py): fetching through it would fill a cache no lint can use,
    and the lint's "fetch the dependencies" would send the user back here."""
    from roteiro_py.cargo_sources import host_sources
    from roteiro_py.cargo_view import pins_in, replaced_sources

    replaced_sources(pins_in(root / "Cargo.lock", lockfile), host_sources(), root)


def fetch_deps(path: Path) -> tuple[Path, int]:
    """Fetch what `path`'s lockfile pins into the host cache; returns (workspace root, manifests)."""
    root = find_workspace_root(path)
    if not os.path.lexists(root / "Cargo.lock"):
        raise LockfileWouldBeWritten(root, f"{root / 'Cargo.lock'} does not exist")
    lockfile = read_lockfile(root / "Cargo.lock")
    refused = unsafe_sources_in(lockfile)
    if refused:
        raise FetchFailed(root, f"the lockfile pins sources other than https: {', '.join(refused[:3])}; "
                          "fetch-deps fetches only over https", before_cargo=True)
    _follows_host_sources(root, lockfile)
    scratch_parent = paths.roteiro_home() / "tmp"
    scratch_parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="fetch-deps-", dir=scratch_parent) as scratch:
        copy = Path(scratch) / "tree"
        copy.mkdir()
        manifests = make_clean_copy(root, copy)  # refuses what it will not read, before cargo
        declared = [f"{manifest.relative_to(copy)}: {source}"
                    for manifest in sorted(copy.rglob("Cargo.toml"))
                    for source in unsafe_manifest_sources(read_manifest(manifest))]
        if declared:
            raise FetchFailed(root, "the manifests declare sources other than https: "
                              f"{'; '.join(declared[:3])}; fetch-deps fetches only over https "
                              "(cargo resolves a manifest's sources before --locked can refuse)",
                              before_cargo=True)
        cargo = shutil.which("cargo")
        if cargo is None:
            raise SpawnFailed("cargo", "not found on PATH; fetch-deps runs the host's cargo to "
                              "download crates")
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
