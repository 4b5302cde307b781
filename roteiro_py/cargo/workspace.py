"""The tree's cargo files as the host reads them: data, through the one door, never acted on.

The host reads the lockfile and, where it must, a manifest of the tree; nothing else of
the tree's cargo files, and never through a tool that acts on them (host cargo would
follow the tree's `.cargo/config.toml`, its sources and its submodules: the review of
issue 20). Every read is bounded and refuses links, FIFOs and devices
(untrusted.read_bounded); every parse ends in errors.TreeFileRefused, never exit 4.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from roteiro_py.errors import TreeFileRefused, UsageError
from roteiro_py.guidance import printable
from roteiro_py.untrusted import FileRefused, parse_toml, read_bounded

#: The largest manifest (Cargo.toml) the host reads. The largest on crates.io are tens of
#: KiB (generated feature tables); a member `Cargo.toml -> /dev/zero` wrote 2.4 GB in 8 s.
MANIFEST_MAX_BYTES = 1024 * 1024
#: The largest Cargo.lock the host reads: ~150 bytes a package, so ~100,000 packages.
LOCKFILE_MAX_BYTES = 16 * 1024 * 1024
#: The most member manifests read to check a package or feature selection (more than
#: any workspace we know of: rust-lang/rust has ~400); past it the check is cargo's.
MAX_MEMBERS = 2000
#: The most bytes of member manifests read for that check, in all: MAX_MEMBERS manifests of
#: MANIFEST_MAX_BYTES would be 2 GiB of TOML parsed before any VM starts. 64 MiB is ~100x
#: the manifests of rust-lang/rust's ~400 members; past it the check is cargo's.
MAX_MEMBER_BYTES = 64 * 1024 * 1024
#: The most `[[package]]` entries of a Cargo.lock looked at (LOCKFILE_MAX_BYTES holds ~100,000).
MAX_LOCKED_PACKAGES = 200_000
#: Characters that make a workspace `members` entry a glob (cargo uses the glob crate).
_GLOB = frozenset("*?[")
#: The most directory entries one `members` glob's walk looks at; past it the members
#: are cargo's to expand.
MAX_GLOB_ENTRIES = 20_000


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


def locked_names(workspace: Path) -> frozenset[str] | None:
    """The package names the workspace's Cargo.lock pins (members, path and registry
    packages alike), at most MAX_LOCKED_PACKAGES entries; None when there is no lockfile
    or it is not one the host reads (the lint refuses that in its own place)."""
    lock = workspace / "Cargo.lock"
    if not lock.is_file():
        return None
    try:
        packages = read_lockfile(lock).get("package")
    except TreeFileRefused:
        return None
    if not isinstance(packages, list):
        return None
    return frozenset(entry["name"] for entry in packages[:MAX_LOCKED_PACKAGES]
                     if isinstance(entry, dict) and isinstance(entry.get("name"), str))


@dataclass(frozen=True)
class Member:
    """A workspace member as `--features` sees it: `features` are the [features] keys and
    the optional dependencies no `dep:` entry hides (cargo's implicit features)."""

    name: str
    features: frozenset[str]


@dataclass(frozen=True)
class Members:
    """The workspace's members by name, and those cargo selects at the root with no flag
    (`default-members`, else the root package, else every member)."""

    all: dict[str, Member]
    default: tuple[str, ...]
    #: Whether `--features` applies to the packages selected (resolver 2 and later), as
    #: opposed to the package of the current directory (resolver 1); False when not certain.
    per_package_features: bool = False
    #: Per member, its dependency names (the keys of its dependency tables) that are not
    #: the member of that name: a rename (`a = { package = "x" }`), a registry or git
    #: package, a path elsewhere. cargo reads `--features a/f` as the feature f of such a
    #: dependency `a` of a selected member before the member `a`.
    foreign: dict[str, frozenset[str]] = field(default_factory=dict)


def workspace_members(workspace: Path) -> Members | None:
    """The members of the workspace rooted at `workspace`, read as data: the root
    manifest's `members` (globs expanded inside the workspace, `exclude` left out), the
    root package, and the path dependencies inside the workspace (cargo makes those
    members too), at most MAX_MEMBERS manifests. None whenever the answer is not certain
    (a manifest the host does not read, an entry leading outside the workspace, too many
    members): the selection is then cargo's to judge in the guest."""
    try:
        return _members(workspace)
    except (TreeFileRefused, _Undecidable, OSError):
        return None


class _Undecidable(Exception):
    """The workspace's members cannot be told for certain from its files."""


def _members(workspace: Path) -> Members:
    root = read_manifest(workspace / "Cargo.toml")
    table = root.get("workspace")
    if not isinstance(table, dict):
        if "workspace" in root or not isinstance(root.get("package"), dict):
            raise _Undecidable
        member = _member(root)
        # one package: the current directory's package is the one selected, either resolver
        return Members({member.name: member}, (member.name,), True)
    inherited = table.get("dependencies")
    shared: dict[str, Any] = inherited if isinstance(inherited, dict) else {}
    excluded = [_inside(workspace, entry) for entry in _strings(table.get("exclude", []))]
    listed = _strings(table.get("members", []))
    # cargo's WorkspaceRootConfig::is_excluded: under an `exclude` entry and under no
    # `members` entry (as written: a glob's text is under nothing), components compared
    explicit = [Path(os.path.normpath(workspace / entry)) for entry in listed]

    def is_excluded(directory: Path) -> bool:
        manifest = directory / "Cargo.toml"
        return any(manifest.is_relative_to(entry) for entry in excluded) and \
            not any(manifest.is_relative_to(entry) for entry in explicit)

    pending = [workspace] if isinstance(root.get("package"), dict) else []
    for entry in listed:
        if _GLOB & set(entry):
            if "**" in entry:  # a walk of the whole tree: bounded by nothing we can name
                raise _Undecidable
            _inside(workspace, entry)
            found = [path for path in _glob(workspace, entry) if (path / "Cargo.toml").is_file()]
            if len(found) > MAX_MEMBERS:
                raise _Undecidable
            pending += found
        else:
            pending.append(_inside(workspace, entry))
    by_dir: dict[Path, Member] = {}
    budget = MAX_MEMBER_BYTES
    dependencies: dict[Path, list[tuple[str, Path | None]]] = {}  # None: not the member of its name
    while pending:
        directory = pending.pop(0)
        if directory in by_dir or is_excluded(directory):
            continue
        if len(by_dir) >= MAX_MEMBERS:
            raise _Undecidable
        if directory == workspace:
            manifest = root
        else:
            manifest_path = _unlinked(workspace, directory) / "Cargo.toml"
            data = read_tree_file(manifest_path, MANIFEST_MAX_BYTES)
            budget -= len(data)
            if budget < 0:
                raise _Undecidable
            manifest = parse_tree_toml(manifest_path, data)
        by_dir[directory] = _member(manifest)
        dependencies[directory] = []
        for key, from_root, path, renamed in _dependencies(manifest, shared):
            resolved = None if path is None else \
                Path(os.path.normpath((workspace if from_root else directory) / path))
            dependencies[directory].append((key, None if renamed else resolved))
            if resolved is not None and resolved.is_relative_to(workspace):
                pending.append(resolved)
    names = {member.name: member for member in by_dir.values()}
    if len(names) != len(by_dir):
        raise _Undecidable
    defaults = table.get("default-members")
    if defaults is not None:
        chosen = [by_dir.get(_inside(workspace, entry)) for entry in _strings(defaults)]
        if any(member is None for member in chosen):
            raise _Undecidable
        default = tuple(member.name for member in chosen if member is not None)
    elif workspace in by_dir:
        default = (by_dir[workspace].name,)
    else:
        default = tuple(names)
    foreign = {by_dir[directory].name: frozenset(
        key for key, resolved in found
        if resolved is None or resolved not in by_dir or by_dir[resolved].name != key)
        for directory, found in dependencies.items()}
    return Members(names, default, _resolver(root, table) >= 2, foreign)


def _resolver(root: dict[str, Any], workspace: dict[str, Any]) -> int:
    """The feature resolver cargo uses for the workspace of `root` (its [workspace] table
    `workspace`), as cargo decides it: `workspace.resolver`, else the root package's
    `resolver`, else its edition (2021: 2, 2024: 3, earlier: 1), a virtual workspace 1.
    0 when the files do not say for certain."""
    package = root.get("package")
    chosen = workspace.get("resolver")
    if chosen is None and isinstance(package, dict):
        chosen = package.get("resolver")
    if chosen is not None:
        return {"1": 1, "2": 2, "3": 3}.get(chosen, 0) if isinstance(chosen, str) else 0
    if not isinstance(package, dict):
        return 1
    edition = package.get("edition", "2015")
    if isinstance(edition, dict) and edition.get("workspace") is True:
        shared = workspace.get("package")
        edition = shared.get("edition") if isinstance(shared, dict) else None
    return {"2015": 1, "2018": 1, "2021": 2, "2024": 3}.get(edition, 0) if isinstance(edition, str) else 0


def _unlinked(workspace: Path, directory: Path) -> Path:
    """`directory` (inside `workspace`) when no directory on the way to it is a link;
    _Undecidable otherwise. read_manifest refuses a linked Cargo.toml, not a linked
    directory holding one: `crates/x -> /elsewhere` made a host manifest a member, and its
    features the text of a refusal."""
    current = workspace
    for part in directory.relative_to(workspace).parts:
        current = current / part
        if current.is_symlink():
            raise _Undecidable
    return directory


def _glob(workspace: Path, entry: str) -> list[Path]:
    """The directories `entry` (a `members` glob, relative, no `**`) matches, sorted, by a
    walk that follows no link and looks at most MAX_GLOB_ENTRIES entries. Path.glob follows
    linked directories, so `l/*/*/*` with `l -> /` walked the host's file system; a link
    that a part of the glob reaches is _Undecidable (cargo's glob would follow it)."""
    current = [workspace]
    seen = 0
    for part in PurePosixPath(entry).parts:
        matched: list[Path] = []
        for directory in current:
            if not _GLOB & set(part):
                names = [part]
            else:
                with os.scandir(directory) as entries:
                    names = []
                    for found in entries:
                        seen += 1
                        if seen > MAX_GLOB_ENTRIES:
                            raise _Undecidable
                        if fnmatch.fnmatchcase(found.name, part):
                            names.append(found.name)
            for name in names:
                path = directory / name
                if path.is_symlink():
                    raise _Undecidable
                if path.is_dir():
                    matched.append(path)
        current = matched
    return sorted(current)


def _strings(value: Any) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(entry, str) for entry in value):
        raise _Undecidable
    return value


def _inside(workspace: Path, entry: str) -> Path:
    """`entry` of the root manifest as a directory of the workspace; _Undecidable when
    it is absolute or climbs out (cargo would read outside the tree: its business)."""
    relative = PurePosixPath(entry)
    if relative.is_absolute() or ".." in relative.parts:
        raise _Undecidable
    return Path(os.path.normpath(workspace / relative))


def _dependency_tables(manifest: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(kind, table) for every dependency table, the `[target.<cfg>]` ones included."""
    owners = [manifest]
    targets = manifest.get("target")
    if isinstance(targets, dict):
        owners += [table for table in targets.values() if isinstance(table, dict)]
    for owner in owners:
        for kind in ("dependencies", "dev-dependencies", "dev_dependencies",
                     "build-dependencies", "build_dependencies"):
            table = owner.get(kind)
            if isinstance(table, dict):
                yield kind, table


def _dependencies(manifest: dict[str, Any], shared: dict[str, Any]) -> Iterator[tuple[str, bool, str | None, bool]]:
    """(name, relative to the root?, path, renamed?) of each dependency, path None unless
    it is a path dependency: one inherited from [workspace.dependencies] is relative to
    the root, any other to its own manifest; renamed: its `package` is another name."""
    for _, table in _dependency_tables(manifest):
        for name, spec in table.items():
            from_root = isinstance(spec, dict) and spec.get("workspace") is True
            if from_root:
                spec = shared.get(name)
            path = spec.get("path") if isinstance(spec, dict) else None
            renamed = isinstance(spec, dict) and spec.get("package", name) != name
            yield name, from_root, path if isinstance(path, str) else None, renamed


def _member(manifest: dict[str, Any]) -> Member:
    package = manifest.get("package")
    name = package.get("name") if isinstance(package, dict) else None
    if not isinstance(name, str):
        raise _Undecidable
    table = manifest.get("features", {})
    if not isinstance(table, dict):
        raise _Undecidable
    hidden = {value[4:] for values in table.values() if isinstance(values, list)
              for value in values if isinstance(value, str) and value.startswith("dep:")}
    optional = {name for kind, deps in _dependency_tables(manifest) if not kind.startswith("dev")
                for name, spec in deps.items()
                if isinstance(spec, dict) and spec.get("optional") is True}
    return Member(name, frozenset(table) | (optional - hidden))
