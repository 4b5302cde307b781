"""The tree's cargo files as the host reads them: data, through the one door, never acted on.

The host reads the lockfile and, where it must, a manifest of the tree; nothing else of
the tree's cargo files, and never through a tool that acts on them (host cargo would
follow the tree's `.cargo/config.toml`, its sources and its submodules: the review of
issue 20). Every read is bounded and refuses links, FIFOs and devices
(untrusted.read_bounded); every parse ends in errors.TreeFileRefused, never exit 4.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from roteiro_py.errors import TreeFileRefused, UsageError
from roteiro_py.guidance import printable
from roteiro_py.untrusted import FileRefused, parse_toml, read_bounded

#: The largest manifest (Cargo.toml) the host reads. The largest on crates.io are tens of
#: KiB (generated feature tables); a member `Cargo.toml -> /dev/zero` wrote 2.4 GB in 8 s.
MANIFEST_MAX_BYTES = 1024 * 1024
#: The largest Cargo.lock the host reads: ~150 bytes a package, so ~100,000 packages.
LOCKFILE_MAX_BYTES = 16 * 1024 * 1024


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
    """`data` (the bytes of the tree's `path`) as TOML (untrusted.parse_toml), or
    errors.TreeFileRefused. Every TOML file of a tree goes through here."""
    try:
        return parse_toml(data)
    except FileRefused as refused:
        raise TreeFileRefused(path, refused.reason) from None


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
