"""The skeleton of a workspace: what cargo needs to build the tree's dependencies, and
none of the tree's own code.

Why: the dependency cache (issue 12) is written by a VM run of its own, and a cache the
tree's code wrote could carry lies into every later lint of the same lockfile. So that run
builds a skeleton: the workspace's real `Cargo.lock`, every `Cargo.toml` and every
`.cargo/config.toml` / `.cargo/config` (cargo's `[env]`, `[target.<triple>.<links>]`
overrides and profiles shape how dependencies build), with each path package's targets
replaced by stubs. The only code that runs there is the pinned dependencies' (their build
scripts and proc macros), which a lint of that lockfile runs anyway.

What it guarantees:
- The same unit graph as the tree: the same packages with the same targets (name and
  kind) at the same relative paths, so cargo resolves the same features and builds the
  same dependency units, and a later lint finds them fresh. The layout is mirrored path
  for path because cargo hashes a path package's id from its path relative to the
  workspace root. A target is stubbed where cargo would find one (tests prove it against
  `cargo metadata`): `src/lib.rs`, `src/main.rs`, `build.rs`, `<dir>/*.rs` and
  `<dir>/*/main.rs` for `<dir>` in src/bin, examples, tests and benches, and every
  explicit `path` of `[lib]`, `[[bin]]`, `[[example]]`, `[[test]]`, `[[bench]]` and
  `package.build`, when the tree holds that file. Only target roots are stubbed, not
  every `.rs`: adding or renaming a module (`src/parse.rs`) is editing code, and must
  not change the key; a target root added or removed changes the unit graph, and does.
- No byte of the tree's code: every stub is STUB, whatever the tree's file held; the
  tree's `.rs` files are never opened, only their names are seen.
- `digest` covers exactly the skeleton (each file's relative path, mode and bytes): a
  changed lockfile, manifest or cargo configuration is a new key, an edit to a member's
  source is not. That is the point: editing code reuses the cache.

What it never does, and what it refuses:
- Follows no link: the walk opens every directory O_NOFOLLOW through its parent's
  descriptor, and every file it copies through `deps.read_tree_file` (untrusted.
  read_bounded: O_NOFOLLOW, regular files only, bounded). A `Cargo.toml`, `Cargo.lock`,
  `.cargo` or `.cargo/config(.toml)` that is a link, a FIFO or a device is
  errors.TreeFileRefused, not left out: the guest's copy of the tree keeps links as
  links and its cargo follows them (shareimage.py), so a skeleton without that manifest
  or configuration would build another graph than the lint does, and copying what the
  link points at would read outside the tree (a link to ~/.ssh/id_ed25519 would be
  handed to a VM). fetch-deps (deps.make_clean_copy) refuses a linked manifest alike.
- A `.rs` target root that is a link is stubbed like a file (its name is all cargo's
  discovery looks at, and the guest resolves the link inside the tree); one that is a
  FIFO or a device is not (the guest's copy leaves it out).
- Reads nothing outside the workspace: an explicit target `path` that is absolute or
  whose `..` leaves the workspace is left out (cargo then fails over it in the skeleton's
  VM as it would in the lint), and every stub is created through descriptors opened in
  `dest`, O_EXCL|O_NOFOLLOW.
- Walks what the guest's copy of the worktree holds (vm/qemu/shareimage.py): no `.git`,
  no cargo target directory (a `target` holding CACHEDIR.TAG or .rustc_info.json), no
  directory on another filesystem; a directory it cannot read is left out, as there.
  Nothing else is copied: no rust-toolchain file (the image pins the toolchain), no
  `.cargo/credentials`, no lockfile but the workspace root's (cargo reads no other), no
  build output, no data files.
- Bounded: at most `max_files` entries walked and `max_depth` directories deep (the
  staging caps, so a tree the lint's copy accepts is accepted here), each manifest and
  configuration file at most `max_manifest_bytes`, the lockfile at most
  `max_lockfile_bytes`, all of them together at most `max_bytes`; each refusal
  (errors.TreeTooLarge) names the `[vm]` setting. The walk is iterative.
- A manifest that is not TOML is copied as it is, and its directory is no package here:
  test fixtures hold such files, cargo reads them only for a member, and then fails in
  both VMs alike. The lockfile must parse (its path packages are part of the result).

Known divergences, left to the caller:
- A target reached through a directory link (`src/bin -> ../tools`) is not stubbed: at
  worst another feature unification of dev-dependencies, i.e. cache misses.
- A dependency's build script that reads a workspace file (named through `[env]` or a
  `links` override) finds it absent in the skeleton; unless it declares the file with
  `rerun-if-changed`, cargo will not see that the lint's tree differs.
- A `.cargo/config.toml` between the repository root the lint shares and the workspace
  root is read by the lint's cargo and is not in the skeleton (it mirrors the workspace
  only): a caller that finds one should not use the cache, or key it too.

`dest` is filled in place: on a refusal it holds part of a skeleton, and the caller
removes it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import posixpath
import stat
import struct
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from roteiro_py import errors
from roteiro_py.cargo_view import path_packages_in
from roteiro_py.deps import LOCKFILE_MAX_BYTES, MANIFEST_MAX_BYTES, parse_tree_toml, read_tree_file
from roteiro_py.vm.qemu.shareimage import CARGO_TARGET_MARKERS

if TYPE_CHECKING:
    from roteiro_py.config import VmSettings

#: Every target's stub. It is a valid crate root for every kind cargo builds: a bin, a
#: build script and a `harness = false` test need a `main`; a lib, a proc macro and a
#: harnessed test compile with an unused private fn (a dead-code warning, nothing more;
#: `pub fn main` would be an error in a proc-macro crate, which may export only macros).
STUB = b"fn main() {}\n"
#: Framing of `Skeleton.digest`; a change to how the digest is computed changes this.
DIGEST_FORMAT = b"roteiro-depcache-skeleton-1"
#: Framing of `cache_key`; a change to what a key covers changes this, so old caches miss.
KEY_FORMAT = "roteiro-depcache-key-1"
#: The mode of every file in the skeleton: cargo executes none of them.
FILE_MODE = 0o644
#: Directories where cargo discovers targets by name: `<dir>/*.rs` and `<dir>/*/main.rs`.
AUTO_TARGET_DIRS = ("src/bin", "examples", "tests", "benches")
#: Files cargo takes as a target when they exist, relative to the package directory.
AUTO_TARGET_FILES = ("src/lib.rs", "src/main.rs", "build.rs")
#: Manifest tables whose entries may name a target's `path`.
_TARGET_TABLES = ("lib", "bin", "example", "test", "bench")
#: The cargo configuration files read in a `.cargo` directory (both, when both exist).
CONFIG_NAMES = ("config.toml", "config")

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_MIB = 1024 * 1024


@dataclass(frozen=True)
class SkeletonLimits:
    """The bounds of one skeleton; each refusal names the setting behind it.

    max_files and max_depth are the staging caps ([vm] stage_max_files, stage_max_depth):
    the skeleton walks the tree the lint's copy walks, and a tree one accepts the other
    must accept. max_bytes ([vm] stage_max_mib) bounds what all copied files add up to:
    without it 200,000 sparse 1 MiB manifests would be 200 GB of skeleton.
    """

    #: Entries walked in the workspace ([vm] stage_max_files).
    max_files: int
    #: How deep directories nest below the workspace root ([vm] stage_max_depth).
    max_depth: int
    #: One Cargo.toml or cargo configuration file: deps.MANIFEST_MAX_BYTES, the bound of
    #: every other reader of the tree's manifests (the largest on crates.io are tens of KiB).
    max_manifest_bytes: int = MANIFEST_MAX_BYTES
    #: The lockfile: deps.LOCKFILE_MAX_BYTES (16 MiB, ~150 bytes a package: ~100,000
    #: packages), the bound the lint's own lockfile readers use, so a lockfile the lint
    #: accepts is never refused here.
    max_lockfile_bytes: int = LOCKFILE_MAX_BYTES
    #: Every copied file together ([vm] stage_max_mib, in bytes; its default here).
    max_bytes: int = 2048 * _MIB

    @classmethod
    def of(cls, vm: VmSettings) -> SkeletonLimits:
        return cls(max_files=vm.stage_max_files, max_depth=vm.stage_max_depth,
                   max_bytes=vm.stage_max_mib * _MIB)


@dataclass(frozen=True)
class Skeleton:
    """A skeleton built in `root` (the `dest` given to build_skeleton)."""

    #: The skeleton workspace: the same relative layout as the tree's workspace.
    root: Path
    #: "sha256:<hex>" over every file it holds (relative path, mode, bytes): the cache key's
    #: view of the tree.
    digest: str
    #: Sorted names of the lockfile's packages without a `source` (workspace members, path
    #: and path-[patch] dependencies): stubbed here, so the VM side removes their build
    #: state (fingerprints) after the build, and a lint rebuilds them from the real sources.
    path_packages: tuple[str, ...]
    #: How many files it holds.
    files: int


@dataclass
class _Walk:
    """What the walk found: the copied files, the tree's other file names, the packages."""

    workspace: Path
    dest_fd: int
    limits: SkeletonLimits
    #: Relative path -> (sha256 of the bytes written, their length), for the digest.
    written: dict[str, tuple[bytes, int]] = field(default_factory=dict)
    #: Relative paths of the tree's regular files and links (never opened): stub candidates.
    names: set[str] = field(default_factory=set)
    #: Package directory ("" or "dir/") -> the target paths its manifest names.
    packages: dict[str, list[str]] = field(default_factory=dict)
    entries: int = 0
    copied_bytes: int = 0

    def copy(self, rel: str, data: bytes) -> None:
        self.copied_bytes += len(data)
        if self.copied_bytes > self.limits.max_bytes:
            mib = self.limits.max_bytes // _MIB
            raise errors.TreeTooLarge(self.workspace, f"more than {mib} MiB of manifests, lockfile "
                                      "and cargo configuration", "stage_max_mib", mib)
        self.place(rel, data)

    def place(self, rel: str, data: bytes) -> None:
        try:
            _write_at(self.dest_fd, rel.split("/"), data)
        except OSError as error:
            raise errors.TreeFileRefused(self.workspace / rel, "it cannot be placed in the skeleton "
                                         f"({error.strerror or error})") from None
        self.written[rel] = (hashlib.sha256(data).digest(), len(data))


def build_skeleton(workspace: Path, dest: Path, limits: SkeletonLimits) -> Skeleton:
    """Fill the empty directory `dest` with the skeleton of `workspace` (the directory
    holding its Cargo.lock), under the rules in the module docstring.

    Refuses: errors.LockfileWouldBeWritten without a Cargo.lock, errors.TreeFileRefused
    for a lockfile, manifest or configuration file that is a link, not a regular file, too
    large, or (the lockfile) not TOML, errors.TreeTooLarge past a cap of `limits`.
    """
    # The root is the directory the lint names: followed if it is a link, as staging does.
    root_fd = os.open(workspace, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        dest_fd = os.open(dest, _DIR_FLAGS)
        try:
            walk = _Walk(workspace, dest_fd, limits)
            path_packages = _copy_lockfile(walk, root_fd)
            _walk_tree(walk, root_fd)
            for rel in sorted(_stubs(walk)):
                if rel not in walk.written:  # never over a manifest a target path names
                    walk.place(rel, STUB)
        finally:
            os.close(dest_fd)
    finally:
        os.close(root_fd)
    return Skeleton(root=dest, digest=_digest(walk.written), path_packages=tuple(path_packages),
                    files=len(walk.written))


def _copy_lockfile(walk: _Walk, root_fd: int) -> list[str]:
    lockfile = walk.workspace / "Cargo.lock"
    try:
        os.stat("Cargo.lock", dir_fd=root_fd, follow_symlinks=False)
    except FileNotFoundError:
        raise errors.LockfileWouldBeWritten(walk.workspace, f"{lockfile} does not exist") from None
    except OSError:
        pass  # read_tree_file below names what is wrong with it
    data = read_tree_file(lockfile, walk.limits.max_lockfile_bytes, dir_fd=root_fd)
    packages = path_packages_in(lockfile, parse_tree_toml(lockfile, data))
    walk.copy("Cargo.lock", data)
    return packages


@dataclass
class _Dir:
    fd: int
    rel: str  # "" for the root, else "a/b/"
    depth: int
    entries: Iterator[os.DirEntry[str]]
    listing: contextlib.AbstractContextManager[object]  # what `entries` draws from


def _open_frame(fd: int, rel: str, depth: int) -> _Dir:
    try:
        listing = os.scandir(fd)
    except OSError:
        os.close(fd)
        raise
    return _Dir(fd, rel, depth, iter(listing), listing)


def _close_frame(frame: _Dir) -> None:
    frame.listing.__exit__(None, None, None)
    os.close(frame.fd)


def _walk_tree(walk: _Walk, root_fd: int) -> None:
    """Every entry of the workspace, iteratively, through descriptors opened O_NOFOLLOW."""
    limits = walk.limits
    device = os.fstat(root_fd).st_dev
    stack = [_open_frame(os.dup(root_fd), "", 0)]
    try:
        while stack:
            top = stack[-1]
            try:
                entry = next(top.entries, None)
            except OSError:
                entry = None  # a listing that fails midway: the rest is left out, as staging does
            if entry is None:
                _close_frame(stack.pop())
                continue
            walk.entries += 1
            if walk.entries > limits.max_files:
                raise errors.TreeTooLarge(walk.workspace, f"more than {limits.max_files} files and "
                                          "directories", "stage_max_files", limits.max_files)
            child = _visit(walk, top, entry.name, device)
            if child is not None:
                stack.append(child)
    finally:
        for frame in stack:
            _close_frame(frame)


def _visit(walk: _Walk, top: _Dir, name: str, device: int) -> _Dir | None:
    """Look at one entry of `top`: a directory to walk is returned, opened."""
    rel = top.rel + name
    try:
        mode = os.stat(name, dir_fd=top.fd, follow_symlinks=False).st_mode
    except OSError:
        return None  # gone since the listing, or unreadable: the guest's copy lacks it too
    if name == ".git":
        return None
    in_cargo_dir = top.rel == ".cargo/" or top.rel.endswith("/.cargo/")
    if (name == "Cargo.toml" or (in_cargo_dir and name in CONFIG_NAMES)) and not stat.S_ISDIR(mode):
        # A link, a FIFO or a device is refused by the reader, naming it (module docstring).
        data = read_tree_file(walk.workspace / rel, walk.limits.max_manifest_bytes, dir_fd=top.fd)
        walk.copy(rel, data)
        if name == "Cargo.toml":
            _note_package(walk, top.rel, data)
        return None
    if stat.S_ISLNK(mode):
        if name == ".cargo":
            raise errors.TreeFileRefused(walk.workspace / rel, "it is a symbolic link, and cargo reads "
                                         "its configuration from this directory")
        walk.names.add(rel)
        return None
    if stat.S_ISREG(mode):
        walk.names.add(rel)
        return None
    if not stat.S_ISDIR(mode):
        return None  # FIFOs, sockets, devices: the guest's copy leaves them out
    return _enter(walk, top, name, device)


def _enter(walk: _Walk, top: _Dir, name: str, device: int) -> _Dir | None:
    try:
        fd = os.open(name, _DIR_FLAGS, dir_fd=top.fd)
    except OSError:
        return None  # unreadable, or swapped for a link since the stat: left out
    try:
        left_out = os.fstat(fd).st_dev != device or _is_cargo_target(fd, name)
    except OSError:
        left_out = True
    if left_out:  # another filesystem, or a cargo target directory: staging leaves it out
        os.close(fd)
        return None
    if top.depth + 1 > walk.limits.max_depth:
        os.close(fd)
        raise errors.TreeTooLarge(walk.workspace, f"directories nested more than "
                                  f"{walk.limits.max_depth} deep", "stage_max_depth",
                                  walk.limits.max_depth)
    try:
        return _open_frame(fd, f"{top.rel}{name}/", top.depth + 1)
    except OSError:
        return None  # _open_frame closed it: an unreadable directory is left out


def _is_cargo_target(fd: int, name: str) -> bool:
    """A cargo target directory, as staging decides (shareimage.CARGO_TARGET_MARKERS): a
    source directory merely named `target` (src/target/) holds neither marker."""
    if name != "target":
        return False
    for marker in CARGO_TARGET_MARKERS:
        try:
            os.stat(marker, dir_fd=fd, follow_symlinks=False)
            return True
        except OSError:
            continue
    return False


def _note_package(walk: _Walk, directory: str, data: bytes) -> None:
    """Record `directory` as a package with the target paths its manifest names."""
    try:
        manifest = parse_tree_toml(walk.workspace / directory / "Cargo.toml", data)
    except errors.TreeFileRefused:
        return  # not TOML: no package here (module docstring)
    if isinstance(manifest.get("package"), dict):
        walk.packages[directory] = _explicit_paths(manifest)


def _explicit_paths(manifest: dict[str, Any]) -> list[str]:
    """The `path` of every target table, and `package.build` when it names files."""
    found: list[str] = []
    for table in _TARGET_TABLES:
        entries = manifest.get(table)
        for entry in entries if isinstance(entries, list) else [entries]:
            if isinstance(entry, dict) and isinstance(entry.get("path"), str):
                found.append(entry["path"])
    build = manifest["package"].get("build")
    # A string, or (cargo's unstable multiple build scripts) a list of them.
    for script in build if isinstance(build, list) else [build]:
        if isinstance(script, str):
            found.append(script)
    return found


def _inside(directory: str, path: str) -> str | None:
    """`directory + path` as a relative path of the workspace, or None when `path` is
    absolute or its `..` leaves the workspace."""
    if posixpath.isabs(path):
        return None
    joined = posixpath.normpath(directory + path)
    return None if joined == ".." or joined.startswith("../") else joined


def _stubs(walk: _Walk) -> set[str]:
    """The tree's files cargo would take as a target root (module docstring)."""
    wanted: set[str] = set()
    for directory, explicit in walk.packages.items():
        wanted.update(directory + name for name in AUTO_TARGET_FILES)
        wanted.update(rel for path in explicit if (rel := _inside(directory, path)) is not None)
    for rel in walk.names:
        if not rel.endswith(".rs"):
            continue
        parent = posixpath.dirname(rel)
        owners = [parent] + ([posixpath.dirname(parent)] if posixpath.basename(rel) == "main.rs" else [])
        for owner in owners:
            for auto in AUTO_TARGET_DIRS:
                if (owner == auto or owner.endswith("/" + auto)) \
                        and owner[: len(owner) - len(auto)] in walk.packages:
                    wanted.add(rel)
    return wanted & walk.names


def _write_at(dest_fd: int, parts: list[str], data: bytes) -> None:
    """Create the file `parts` below `dest_fd`, its directories as needed, following no link."""
    fd = dest_fd
    try:
        for part in parts[:-1]:
            with contextlib.suppress(FileExistsError):
                os.mkdir(part, 0o755, dir_fd=fd)
            child = os.open(part, _DIR_FLAGS, dir_fd=fd)
            if fd != dest_fd:
                os.close(fd)
            fd = child
        out = os.open(parts[-1], os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                      FILE_MODE, dir_fd=fd)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(out, view):]
            os.fchmod(out, FILE_MODE)  # the open's mode passed through the umask
        finally:
            os.close(out)
    finally:
        if fd != dest_fd:
            os.close(fd)


def _digest(written: Mapping[str, tuple[bytes, int]]) -> str:
    """sha256 over the files sorted by path bytes, each framed by lengths: (len, path,
    executable?, len, sha256 of the bytes), so no two skeletons frame to the same input."""
    digest = hashlib.sha256(DIGEST_FORMAT + b"\0")
    for path, (content, size) in sorted((os.fsencode(rel), value) for rel, value in written.items()):
        executable = b"\1" if FILE_MODE & stat.S_IXUSR else b"\0"
        digest.update(struct.pack(">Q", len(path)) + path + executable + struct.pack(">Q", size) + content)
    return "sha256:" + digest.hexdigest()


def cache_key(*, image_digest: str, skeleton_digest: str, argv: Sequence[str],
              env: Mapping[str, str], disk_mib: int) -> str:
    """The dependency cache's key (64 hex): everything that shapes the dependencies' build.

    The image (toolchain and system libraries), the skeleton (lockfile, manifests, cargo
    configuration), the cargo command line (profile, features, targets) and environment
    (RUSTFLAGS and kin), and the cache disk's size. Framed by json.dumps of one list, so
    no two different inputs give the same text (["a b"] is not ["a", "b"]).
    """
    material = json.dumps([KEY_FORMAT, image_digest, skeleton_digest, list(argv),
                           sorted([name, value] for name, value in env.items()), disk_mib])
    return hashlib.sha256(material.encode("ascii")).hexdigest()
