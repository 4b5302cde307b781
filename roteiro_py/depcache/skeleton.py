"""The skeleton of a workspace: what cargo needs to build the tree's dependencies, and
none of the tree's own code.

Why: the dependency cache (issue 12) is written by a VM run of its own, and a cache the
tree's code wrote could carry lies into every later lint of the same lockfile. So that run
builds a skeleton: the workspace's real `Cargo.lock`, every `Cargo.toml` written back from
its parsed values, the `[profile]` table of the workspace's cargo configuration, and a stub
for each path package's target. The only code that runs there is the pinned dependencies'
(their build scripts and proc macros), which a lint of that lockfile runs anyway.

What it guarantees (each rule in full in the docstring of the function that keeps it):
- No byte of the tree's code, and no tree file cargo can compile: no tree file reaches
  the skeleton as it is but the lockfile (`_copy_lockfile`); a manifest is the TOML tomli_w
  writes from tomllib's parse of it, or INVALID_MANIFEST (`_take_manifest`); every target
  root is STUB (`_stubs`), and no explicit target path names a data file or leaves the
  workspace (`_check_targets`). `_verify` checks both after writing, from what is on disk.
- The same unit graph as the tree: the same packages with the same targets at the same
  relative paths, only target roots stubbed (`_stubs`), so a later lint finds the
  dependency units fresh.
- Only the workspace root's cargo configuration counts: every key of it in
  CONFIG_KEYS_ALLOWED, only its `[profile]` written; no profile anywhere sets
  PROFILE_KEYS_REFUSED (`_take_config`, `_check_profiles`).
- `digest` covers exactly the skeleton (`_digest`): a changed lockfile, manifest value or
  profile is a new key; an edit to a member's source, or to a manifest's comments, is
  not. That is the point: editing code reuses the cache.
- It follows no link, reads nothing outside the workspace, and walks what the guest's
  copy of the worktree holds (`_walk_tree`, `_visit`), within SkeletonLimits and the run's
  deadline. A breach of a rule is SkeletonUnsafe (the cache is skipped, never built from
  it); a tree past a bound is a refusal naming it. What a skeleton cannot mirror is in
  `build_skeleton`'s known divergences.

Why it is built this way: docs/DESIGN_NOTES.md, section `roteiro_py/depcache/skeleton.py`.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import posixpath
import stat
import struct
import time
import tomllib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import tomli_w

from roteiro_py import errors
from roteiro_py.cargo.lockfile import path_packages_in
from roteiro_py.cargo.workspace import LOCKFILE_MAX_BYTES, MANIFEST_MAX_BYTES, parse_tree_toml, read_tree_file
from roteiro_py.guidance import printable
from roteiro_py.vm.disks.share_image import excluded, other_filesystem

if TYPE_CHECKING:
    from _typeshed import ReadableBuffer

    from roteiro_py.config import VmSettings

_MIB = 1024 * 1024

#: Every target's stub. It is a valid crate root for every kind cargo builds: a bin, a
#: build script and a `harness = false` test need a `main`; a lib, a proc macro and a
#: harnessed test compile with an unused private fn (a dead-code warning, nothing more;
#: `pub fn main` would be an error in a proc-macro crate, which may export only macros).
STUB = b"fn main() {}\n"
#: Written in place of a manifest that is not UTF-8 TOML: an unclosed table header, so
#: cargo fails on it wherever it would fail on the tree's file, and none of that file's
#: bytes. (The tree's bytes still go into the digest: two broken files differ there.)
INVALID_MANIFEST = b"[roteiro: the tree's Cargo.toml here is not UTF-8 TOML, and is not copied\n"
#: Framing of `Skeleton.digest`; a change to how the digest is computed changes this.
DIGEST_FORMAT = b"roteiro-depcache-skeleton-2"
#: Framing of `cache_key`; a change to what a key covers changes this, so old caches miss.
#: 2: manifests written back rather than copied, only the configuration's [profile], and
#: the build's recipe.
KEY_FORMAT = "roteiro-depcache-key-2"
#: The mode of every file in the skeleton: cargo executes none of them.
FILE_MODE = 0o644
#: Directories where cargo discovers targets by name: `<dir>/*.rs` and `<dir>/*/main.rs`.
AUTO_TARGET_DIRS = ("src/bin", "examples", "tests", "benches")
#: Files cargo takes as a target when they exist, relative to the package directory.
AUTO_TARGET_FILES = ("src/lib.rs", "src/main.rs", "build.rs")
#: Manifest tables whose entries may name a target's `path`.
_TARGET_TABLES = ("lib", "bin", "example", "test", "bench")
#: A package's table: `[project]` is its legacy name, which cargo still reads (edition 2021
#: with a deprecation warning; measured with cargo 1.95).
PACKAGE_TABLES = ("package", "project")
#: The cargo configuration files read in a `.cargo` directory.
CONFIG_NAMES = ("config.toml", "config")
#: Where the skeleton's configuration (the tree's `[profile]`) is written.
CONFIG_OUT = ".cargo/config.toml"
#: TOML parsed on the host for one skeleton: the tree's manifests and configuration, and
#: what is written back from them (which `_verify` parses again). tomllib takes 0.2 s a MiB
#: of dependency tables (measured here) to 0.6-0.7 s (the worst case found), so this is
#: ~11 s of host CPU at most; without it, only [vm] stage_max_mib would bound it (2048 MiB
#: of manifests: ~25 minutes a lint). Workspaces hold far less: cargo's own repository has
#: 659 manifests, 122 KiB in all.
MAX_PARSED_BYTES = 16 * _MIB

#: Top-level keys of the tree's cargo configuration that cannot run code or change what
#: the dependencies' build compiles (checked against cargo's configuration reference,
#: doc/book/src/reference/config.md, cargo at af373f7, 2026-08). The skeleton writes only
#: `profile`; the others are left out, and the lint's cargo still reads them. Every key not
#: here (build, env, target, source, paths, patch, include, resolver, unstable, and any
#: key a later cargo adds) is SkeletonUnsafe: rustc wrappers and flags, linkers, runners,
#: `links` overrides, environment for build scripts (LD_PRELOAD, PERL5OPT, BASH_ENV), other
#: sources or configuration files, and target or build directories all reach the build.
CONFIG_KEYS_ALLOWED = frozenset({
    "profile",  # the same options as a manifest's profiles; the code-loading ones are PROFILE_KEYS_REFUSED
    "alias",  # expands a subcommand typed by name; the lint runs cargo-clippy, which runs the
              # built-in `cargo check`, and a built-in cannot be aliased (test_lint_e2e.py's
              # forged `clippy` and `check` aliases)
    "term",  # cargo's own output: quiet, verbose, color, progress
    "cargo-new",  # `cargo new` only
    "net",  # retries, offline, git-fetch-with-cli, ssh known hosts: fetching; both builds are --offline
    "http",  # proxy, timeouts, TLS for fetching
    "registries",  # index URLs, tokens, credential providers: fetching and publishing, and
                   # --locked pins every package's source
    "registry",  # the same for crates.io and the default registry of `cargo publish`
    "credential-alias",  # names for credential providers, which run only to authenticate to a registry
    "doc",  # doc.browser, run only by `cargo doc --open`
    "future-incompat-report",  # how often the report's notice is shown
    "cache",  # when cargo cleans CARGO_HOME's caches (never in an --offline build)
    "install",  # `cargo install`'s root only
})
#: Profile options that load code into, or pass flags to, every rustc of the build: a
#: codegen backend (a shared library rustc loads), rustc flags (`-C linker=`,
#: `-Z codegen-backend=`), and path remapping. All unstable (cargo 1.95: nightly only),
#: refused in a manifest's or the configuration's profile, at any depth (`package.<spec>`,
#: `build-override`).
PROFILE_KEYS_REFUSED = ("codegen-backend", "rustflags", "trim-paths")

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
#: What a file of the skeleton is, framed into the digest.
_LOCKFILE, _TOML, _INVALID, _STUB = b"l", b"t", b"x", b"s"


class SkeletonUnsafe(Exception):
    """The tree holds something that would let its own bytes, or code it names, reach the
    dependency cache's build (or the skeleton broke its own rule). Not a Refusal: the lint
    itself can still run, without the cache. `reason` is printable (tree values pass
    through guidance.printable)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class SkeletonLimits:
    """The bounds of one skeleton; each refusal names the setting behind it.

    At most `max_files` entries walked and `max_depth` directories deep (the staging caps,
    [vm] stage_max_files and stage_max_depth: the skeleton walks the tree the lint's copy
    walks, so a tree the lint's copy accepts is accepted here), each manifest and
    configuration file at most `max_manifest_bytes`, the lockfile at most
    `max_lockfile_bytes`, everything written at most `max_bytes` ([vm] stage_max_mib:
    without it 200,000 sparse 1 MiB manifests would be 200 GB of skeleton); each refusal
    (errors.TreeTooLarge) names the `[vm]` setting. TOML parsed on the host (manifests, the
    configuration, and what is written back, which `_verify` parses again) at most
    `max_parsed_bytes` (MAX_PARSED_BYTES) in all: SkeletonUnsafe past it. Past `until` (the
    run's deadline), errors.DeadlineExceeded. The walk is iterative.
    """

    #: Entries walked in the workspace ([vm] stage_max_files).
    max_files: int
    #: How deep directories nest below the workspace root ([vm] stage_max_depth).
    max_depth: int
    #: One Cargo.toml or cargo configuration file: cargo/workspace.MANIFEST_MAX_BYTES, the bound of
    #: every other reader of the tree's manifests (the largest on crates.io are tens of KiB).
    max_manifest_bytes: int = MANIFEST_MAX_BYTES
    #: The lockfile: cargo/workspace.LOCKFILE_MAX_BYTES (16 MiB, ~150 bytes a package: ~100,000
    #: packages), the bound the lint's own lockfile readers use, so a lockfile the lint
    #: accepts is never refused here.
    max_lockfile_bytes: int = LOCKFILE_MAX_BYTES
    #: Every written manifest, configuration and lockfile together ([vm] stage_max_mib, in
    #: bytes; its default here).
    max_bytes: int = 2048 * _MIB
    #: TOML parsed, read and written back: MAX_PARSED_BYTES.
    max_parsed_bytes: int = MAX_PARSED_BYTES

    @classmethod
    def of(cls, vm: VmSettings) -> SkeletonLimits:
        return cls(max_files=vm.stage_max_files, max_depth=vm.stage_max_depth,
                   max_bytes=vm.stage_max_mib * _MIB)


@dataclass(frozen=True)
class Skeleton:
    """A skeleton built in `root` (the `dest` given to build_skeleton)."""

    #: The skeleton workspace: the same relative layout as the tree's workspace.
    root: Path
    #: "sha256:<hex>" over every file it holds (relative path, kind, bytes): the cache key's
    #: view of the tree.
    digest: str
    #: Sorted names of the lockfile's packages without a `source` (workspace members, path
    #: and path-[patch] dependencies): stubbed here, so the VM side removes their build
    #: state (fingerprints) after the build, and a lint rebuilds them from the real sources.
    path_packages: tuple[str, ...]
    #: How many files it holds.
    files: int


@dataclass(frozen=True)
class _Written:
    kind: bytes
    #: sha256 and length of the bytes the digest covers: those written, or for
    #: INVALID_MANIFEST the tree's.
    sha: bytes
    size: int


@dataclass
class _Walk:
    """What the walk found and wrote, and what it has spent."""

    workspace: Path
    dest_fd: int
    limits: SkeletonLimits
    until: float | None
    seconds: float
    #: Relative path -> what was written there, for the digest and _verify.
    written: dict[str, _Written] = field(default_factory=dict)
    #: Relative paths of the tree's regular files and links (never opened): stub candidates.
    names: set[str] = field(default_factory=set)
    #: Package directory ("" or "dir/") -> the target paths its manifest names.
    packages: dict[str, list[str]] = field(default_factory=dict)
    #: The workspace root's `.cargo/config(.toml)` by name, read but not yet judged.
    configs: dict[str, bytes] = field(default_factory=dict)
    entries: int = 0
    written_bytes: int = 0
    parsed_bytes: int = 0

    def tick(self) -> None:
        if self.until is not None and time.monotonic() > self.until:
            raise errors.DeadlineExceeded("making the dependency cache's skeleton", self.seconds,
                                          stopped="no VM was started")

    def parse(self, rel: str, size: int) -> None:
        """Spend `size` bytes of TOML parsing on `rel`, or SkeletonUnsafe past the cap."""
        if size > self.limits.max_parsed_bytes - self.parsed_bytes:
            raise SkeletonUnsafe(f"too many manifest bytes to parse: the tree's manifests and cargo "
                                 f"configuration, read and written back, pass {self.limits.max_parsed_bytes} "
                                 f"bytes at {printable(rel)}")
        self.parsed_bytes += size

    def write(self, rel: str, data: bytes, kind: bytes, digested: bytes | None = None) -> None:
        """Write a data file (not a stub): counted against max_bytes."""
        self.written_bytes += len(data)
        if self.written_bytes > self.limits.max_bytes:
            mib = self.limits.max_bytes // _MIB
            raise errors.TreeTooLarge(self.workspace, f"more than {mib} MiB of manifests, lockfile "
                                      "and cargo configuration", "stage_max_mib", mib)
        self.place(rel, data, kind, data if digested is None else digested)

    def place(self, rel: str, data: bytes, kind: bytes, digested: bytes) -> None:
        try:
            _write_at(self.dest_fd, rel.split("/"), data)
        except OSError as error:
            raise errors.TreeFileRefused(self.workspace / rel, "it cannot be placed in the skeleton "
                                         f"({error.strerror or error})") from None
        self.written[rel] = _Written(kind, hashlib.sha256(digested).digest(), len(digested))


def build_skeleton(workspace: Path, dest: Path, limits: SkeletonLimits, *, until: float | None = None,
                   seconds: float = 0.0) -> Skeleton:
    """Fill the empty directory `dest` with the skeleton of `workspace` (the directory
    holding its Cargo.lock), under the rules in the module docstring and the functions
    below. `until` is the run's deadline (time.monotonic()), `seconds` its length for the
    refusal.

    Raises SkeletonUnsafe for a tree whose skeleton could carry its code into the cache's
    build (the caller skips the cache). Refuses: errors.LockfileWouldBeWritten without a
    Cargo.lock, errors.TreeFileRefused for a lockfile, manifest or configuration file that
    is a link, not a regular file, too large, or (the lockfile) not TOML,
    errors.TreeTooLarge past a cap of `limits`, errors.DeadlineExceeded past `until`.

    `dest` is filled in place: on a refusal it holds part of a skeleton, and the caller
    removes it.

    Known divergences, left to the caller:
    - A target reached through a directory link (`src/bin -> ../tools`) is not stubbed: at
      worst another feature unification of dev-dependencies, i.e. cache misses.
    - A dependency's build script that reads a workspace file finds it absent in the
      skeleton; unless it declares the file with `rerun-if-changed`, cargo will not see
      that the lint's tree differs.
    - A `.cargo/config.toml` between the repository root the lint shares and the workspace
      root is read by the lint's cargo and is not in the skeleton (it mirrors the workspace
      only): a caller that finds one should not use the cache, or key it too.
    - tomllib reads TOML 1.0: a manifest only a newer TOML accepts is INVALID_MANIFEST here,
      so the cache's build fails where the lint's would not (a cache miss, never a lie).
    """
    # The root is the directory the lint names: followed if it is a link, as staging does.
    root_fd = os.open(workspace, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        dest_fd = os.open(dest, _DIR_FLAGS)
        try:
            walk = _Walk(workspace, dest_fd, limits, until, seconds)
            path_packages = _copy_lockfile(walk, root_fd)
            _walk_tree(walk, root_fd)
            _take_config(walk)
            _check_targets(walk)
            for rel in sorted(_stubs(walk)):
                walk.tick()
                walk.place(rel, STUB, _STUB, STUB)
        finally:
            os.close(dest_fd)
    finally:
        os.close(root_fd)
    _verify(walk, dest)
    return Skeleton(root=dest, digest=_digest(walk.written), path_packages=tuple(path_packages),
                    files=len(walk.written))


def _parse(path: Path, data: bytes) -> dict[str, Any]:
    """cargo/workspace.parse_tree_toml, and an integer tomllib cannot convert (more than Python's 4,300
    digits; cargo refuses anything past 64 bits) is not TOML either, not a ValueError."""
    try:
        return parse_tree_toml(path, data)
    except ValueError as error:
        raise errors.TreeFileRefused(path, f"it is not TOML that can be read ({error})") from None


def _copy_lockfile(walk: _Walk, root_fd: int) -> list[str]:
    """Copy the workspace root's lockfile byte for byte (`--locked` compares its text; cargo
    reads no lockfile but the workspace root's) and return its path packages. The lockfile
    must parse: its path packages are part of the result."""
    lockfile = walk.workspace / "Cargo.lock"
    try:
        os.stat("Cargo.lock", dir_fd=root_fd, follow_symlinks=False)
    except FileNotFoundError:
        raise errors.LockfileWouldBeWritten(walk.workspace, f"{lockfile} does not exist") from None
    except OSError:
        pass  # read_tree_file below names what is wrong with it
    data = read_tree_file(lockfile, walk.limits.max_lockfile_bytes, dir_fd=root_fd)
    packages = path_packages_in(lockfile, _parse(lockfile, data))
    walk.write("Cargo.lock", data, _LOCKFILE)  # byte for byte: cargo --locked compares its text
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
    """Every entry of the workspace, iteratively, through descriptors opened O_NOFOLLOW.

    It follows no link: every directory is opened O_NOFOLLOW through its parent's
    descriptor, and every file it reads goes through `cargo/workspace.read_tree_file`
    (untrusted.read_bounded: O_NOFOLLOW, regular files only, bounded). It walks what the
    guest's copy of the worktree holds, by the copy's own rules (vm/disks/share_image.py
    `excluded` and `other_filesystem`: no `.git`, no cargo target directory, nothing on
    another filesystem); a directory it cannot read is left out, as there. Nothing else is
    copied: no rust-toolchain file (the image pins the toolchain), no
    `.cargo/credentials`, no build output, no data files. Bounded by SkeletonLimits."""
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
            walk.tick()
            child = _visit(walk, top, entry.name, device)
            if child is not None:
                stack.append(child)
    finally:
        for frame in stack:
            _close_frame(frame)


def _visit(walk: _Walk, top: _Dir, name: str, device: int) -> _Dir | None:
    """Look at one entry of `top`: a directory to walk is returned, opened.

    A `Cargo.toml`, `Cargo.lock`, the root `.cargo` or its `config(.toml)` that is a link,
    a FIFO or a device is errors.TreeFileRefused, not left out: the guest's copy of the tree
    keeps links as links and its cargo follows them (share_image.py), so a skeleton without
    that manifest or configuration would build another graph than the lint does, and
    reading what the link points at would read outside the tree (a link to
    ~/.ssh/id_ed25519 would be handed to a VM). fetch-deps reads no manifest at all, and
    its lockfile through the same reader (commands/fetch_deps.py). Any other link is only
    a name, a candidate stub (`_stubs`); FIFOs, sockets and devices are left out."""
    rel = top.rel + name
    try:
        st = os.stat(name, dir_fd=top.fd, follow_symlinks=False)
    except OSError:
        return None  # gone since the listing, or unreadable: the guest's copy lacks it too
    if excluded(top.fd, name, st) or other_filesystem(st, device):
        return None  # the guest's copy leaves it out
    mode = st.st_mode
    is_config = top.rel == ".cargo/" and name in CONFIG_NAMES  # only the root's is read (_take_config)
    if (name == "Cargo.toml" or is_config) and not stat.S_ISDIR(mode):
        # A link, a FIFO or a device is refused by the reader, naming it (docstring above).
        data = read_tree_file(walk.workspace / rel, walk.limits.max_manifest_bytes, dir_fd=top.fd)
        if is_config:
            walk.configs[name] = data
        else:
            _take_manifest(walk, top.rel, data)
        return None
    if stat.S_ISLNK(mode):
        if rel == ".cargo":
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
        left_out = os.fstat(fd).st_dev != device  # swapped for a mount point since the lstat
    except OSError:
        left_out = True
    if left_out:
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


def _take_manifest(walk: _Walk, directory: str, data: bytes) -> None:
    """Write the manifest of `directory` back from its parsed values (INVALID_MANIFEST
    when it does not parse), and record it as a package with the target paths it names.

    Written back by tomli_w from tomllib's parse of the tree's file: no comment, no layout
    (what cargo hashes is the parsed values, and `cargo metadata` reads the same packages
    and targets from it, tests prove it). A package is a `[package]` table, or its legacy
    name `[project]`. A manifest that is not UTF-8 TOML is written as INVALID_MANIFEST and
    its directory is no package here: test fixtures hold such files, cargo reads them only
    for a member, and then fails in both VMs alike."""
    rel = directory + "Cargo.toml"
    walk.parse(rel, len(data))
    try:
        manifest = _parse(walk.workspace / rel, data)
    except errors.TreeFileRefused:
        walk.write(rel, INVALID_MANIFEST, _INVALID, digested=data)
        return  # not TOML: no package here (docstring above)
    _check_profiles(printable(rel), manifest.get("profile"))
    text = _write_back(walk, rel, manifest)
    if text is None:
        walk.write(rel, INVALID_MANIFEST, _INVALID, digested=data)
        return
    walk.write(rel, text, _TOML)
    if any(isinstance(manifest.get(table), dict) for table in PACKAGE_TABLES):
        walk.packages[directory] = _explicit_paths(manifest)


def _write_back(walk: _Walk, rel: str, document: dict[str, Any]) -> bytes | None:
    """`document` as tomli_w writes it, its bytes counted as parsed (_verify parses them
    again) as they are written, so the cap holds however much larger than the input they
    grow: each table is written under its full dotted name, and 5,000 array elements under
    a 100 KiB name (a 600 KiB manifest) would be 500 MB of headers. No indentation: an
    array's items would otherwise be indented 4 spaces a nesting level. None when it holds
    an integer tomli_w cannot write."""
    out = _Counted(walk, rel)
    try:
        tomli_w.dump(document, out, indent=0)
    except ValueError:  # an integer of more than 4,300 digits: past the 64 bits cargo reads
        return None
    except RecursionError:
        raise SkeletonUnsafe(f"{printable(rel)} nests too deeply to be written back") from None
    return out.getvalue()


class _Counted(io.BytesIO):
    """What tomli_w writes, each chunk spent from the walk's parse budget first."""

    def __init__(self, walk: _Walk, rel: str) -> None:
        super().__init__()
        self.walk = walk
        self.rel = rel

    def write(self, buffer: ReadableBuffer, /) -> int:
        self.walk.parse(self.rel, memoryview(buffer).nbytes)
        return super().write(buffer)


def _check_profiles(where: str, profiles: object) -> None:
    """SkeletonUnsafe when a profile sets one of PROFILE_KEYS_REFUSED, at any depth."""
    if not isinstance(profiles, dict):
        return  # no profiles, or not a table: cargo fails on it in both VMs alike
    stack: list[tuple[str, object]] = [(f"profile.{name}", table) for name, table in profiles.items()]
    while stack:  # each step goes one table deeper into a parsed document: it ends
        name, table = stack.pop()
        if not isinstance(table, dict):
            continue
        for key in PROFILE_KEYS_REFUSED:
            if key in table:
                raise SkeletonUnsafe(f"{where} sets [{printable(name)}] {key}, which would load code "
                                     "into, or pass flags to, the dependencies' build")
        stack.append((f"{name}.build-override", table.get("build-override")))
        specs = table.get("package")
        if isinstance(specs, dict):
            stack.extend((f"{name}.package.{spec}", nested) for spec, nested in specs.items())


def _take_config(walk: _Walk) -> None:
    """Judge the workspace root's cargo configuration, and write its `[profile]`.

    The cargo configuration the lint's cargo reads is the workspace root's
    `.cargo/config.toml` or `.cargo/config` (its working directory is the workspace root;
    the directories above are not shared with the guest, and cargo never reads the ones
    under members). Every top-level key of it must be in CONFIG_KEYS_ALLOWED (keys that
    cannot run code or change what is built), else SkeletonUnsafe naming the key; only its
    `[profile]` is written to the skeleton's `.cargo/config.toml` (CONFIG_OUT). No profile,
    in a manifest or the configuration, may set PROFILE_KEYS_REFUSED (unstable options that
    load a codegen backend or pass rustc flags): SkeletonUnsafe. Configurations below the
    root are ordinary files here: not copied, not in the digest."""
    if not walk.configs:
        return
    if len(walk.configs) > 1:
        # cargo reads `config` and ignores `config.toml` with a warning; the skeleton would
        # have to agree with the guest's cargo on which, and a tree with both is rare.
        raise SkeletonUnsafe("the tree has both .cargo/config and .cargo/config.toml, and cargo reads "
                             "only one of them: the skeleton does not guess which")
    [(name, data)] = walk.configs.items()
    rel = ".cargo/" + name
    walk.parse(rel, len(data))
    try:
        config = _parse(walk.workspace / rel, data)
    except errors.TreeFileRefused as refused:
        raise SkeletonUnsafe(f"the tree's {rel} cannot be read ({printable(refused.why)}); "
                             "the lint's cargo will say why") from None
    for key, value in config.items():
        if key not in CONFIG_KEYS_ALLOWED:
            shown = f"[{printable(key)}]" if isinstance(value, dict) else f"`{printable(key)}`"
            raise SkeletonUnsafe(f"the tree's {rel} sets {shown}, which would reach the dependencies' build")
    if "profile" not in config:
        return
    _check_profiles(f"the tree's {rel}", config["profile"])
    kept = {"profile": config["profile"]}
    text = _write_back(walk, CONFIG_OUT, kept)
    if text is None:
        raise SkeletonUnsafe(f"the tree's {rel} holds a profile value that cannot be written back")
    walk.write(CONFIG_OUT, text, _TOML)


def _explicit_paths(manifest: dict[str, Any]) -> list[str]:
    """The `path` of every target table, and `build` when it names files."""
    found: list[str] = []
    for table in _TARGET_TABLES:
        entries = manifest.get(table)
        for entry in entries if isinstance(entries, list) else [entries]:
            if isinstance(entry, dict) and isinstance(entry.get("path"), str):
                found.append(entry["path"])
    for name in PACKAGE_TABLES:
        package = manifest.get(name)
        build = package.get("build") if isinstance(package, dict) else None
        # A string, or (cargo's unstable multiple build scripts) a list of them.
        for script in build if isinstance(build, list) else [build]:
            if isinstance(script, str):
                found.append(script)
    return found


def _inside(directory: str, path: str) -> str | None:
    """`directory + path` as a relative path of the workspace, or None when `path` is
    absolute or its `..` leaves the workspace. Exact in the skeleton, which holds no link."""
    if posixpath.isabs(path):
        return None
    joined = posixpath.normpath(directory + path)
    return None if joined == ".." or joined.startswith("../") else joined


def _is_data(rel: str) -> bool:
    """A path the skeleton holds as data, or would if the tree put one there: a manifest, a
    lockfile, a cargo configuration (at any depth: naming one as a target is never innocent)."""
    parent, name = posixpath.split(rel)
    return name in ("Cargo.toml", "Cargo.lock") or (posixpath.basename(parent) == ".cargo"
                                                    and name in CONFIG_NAMES)


def _check_targets(walk: _Walk) -> None:
    """SkeletonUnsafe for an explicit target path naming anything a stub cannot stand in
    for: outside the workspace (whatever the cache's VM holds there), or a data file.

    Every target path cargo can take must be a stub: cargo's discovery only finds `.rs`
    names, and an explicit target path (`[lib]`, `[[bin]]`, `[[example]]`, `[[test]]`,
    `[[bench]]` `path`, `package.build`) that names a manifest, a lockfile or a cargo
    configuration, or leaves the workspace, is SkeletonUnsafe."""
    for directory, explicit in sorted(walk.packages.items()):
        manifest = printable(directory + "Cargo.toml")
        for path in explicit:
            rel = _inside(directory, path)
            if rel is None:
                raise SkeletonUnsafe(f"{manifest} names the target path {printable(path)}, outside the "
                                     "workspace: cargo would compile whatever the cache's VM holds there")
            if _is_data(rel) or rel in walk.written:
                raise SkeletonUnsafe(f"{manifest} names the target path {printable(path)}, a manifest, "
                                     "lockfile or cargo configuration: cargo would compile its bytes")


def _stubs(walk: _Walk) -> set[str]:
    """The tree's files cargo would take as a target root, each to be a STUB.

    The skeleton keeps the tree's unit graph: the same packages with the same targets (name
    and kind) at the same relative paths, so cargo resolves the same features and builds
    the same dependency units, and a later lint finds them fresh. The layout is mirrored
    path for path because cargo hashes a path package's id from its path relative to the
    workspace root. A target is stubbed where cargo would find one: `src/lib.rs`,
    `src/main.rs`, `build.rs`, `<dir>/*.rs` and `<dir>/*/main.rs` for `<dir>` in src/bin,
    examples, tests and benches, and every explicit target path, when the tree holds that
    file. Only target roots are stubbed, not every `.rs`: adding or renaming a module
    (`src/parse.rs`) is editing code, and must not change the key; a target root added or
    removed changes the unit graph, and does. The tree's `.rs` files are never opened,
    only their names are seen. A `.rs` target root that is a link is stubbed like a file
    (its name is all cargo's discovery looks at, and the guest resolves the link inside the
    tree); one that is a FIFO or a device is not (the guest's copy leaves it out)."""
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
    """Create the file `parts` below `dest_fd`, its directories as needed, following no link:
    every file (stubs too) through descriptors opened in `dest`, O_EXCL|O_NOFOLLOW."""
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


def _verify(walk: _Walk, dest: Path) -> None:
    """The module's rule, checked from what is on disk rather than from what the code above
    meant to write: every file is the lockfile, TOML exactly as tomli_w writes its own
    parse (or INVALID_MANIFEST), or STUB, and no explicit target path of a package in it
    leaves it or names a data file. A breach is a bug here; it is SkeletonUnsafe, so the
    lint goes on without a cache rather than build one from the tree's bytes."""
    found: dict[str, bytes] = {}
    documents: dict[str, dict[str, Any]] = {}
    for directory, dirs, files in os.walk(dest):
        for name in dirs + files:
            walk.tick()
            path = os.path.join(directory, name)
            rel = os.path.relpath(path, dest)
            mode = os.lstat(path).st_mode
            if stat.S_ISDIR(mode):
                continue
            if not stat.S_ISREG(mode) or stat.S_IMODE(mode) != FILE_MODE:
                _breach(rel, "it is not a regular file of mode 0644")
            data = Path(path).read_bytes()
            found[rel] = data
            kind = _kind_on_disk(rel, data, documents)
            record = walk.written.get(rel)
            if record is None or record.kind != kind \
                    or (kind != _INVALID and hashlib.sha256(data).digest() != record.sha):
                _breach(rel, "it is not what the skeleton wrote, and the digest covers, there")
    if sorted(found) != sorted(walk.written):
        _breach(", ".join(sorted(set(found) ^ set(walk.written)))[:200], "written and found differ")
    for rel, document in documents.items():
        if not any(isinstance(document.get(table), dict) for table in PACKAGE_TABLES):
            continue
        directory = rel[: -len("Cargo.toml")]
        for path in _explicit_paths(document):
            target = _inside(directory, path)
            if target is None or _is_data(target) or found.get(target, STUB) != STUB:
                _breach(rel, f"it names the target path {printable(path)}, not a stub")


def _kind_on_disk(rel: str, data: bytes, documents: dict[str, dict[str, Any]]) -> bytes:
    """What the file `rel` of the skeleton is, judged from its path and bytes alone."""
    name = posixpath.basename(rel)
    if rel == "Cargo.lock":
        return _LOCKFILE  # the tree's bytes: _verify compares them with what was read
    if name == "Cargo.toml" and data == INVALID_MANIFEST:
        return _INVALID
    if name == "Cargo.toml" or rel == CONFIG_OUT:
        try:
            document = tomllib.loads(data.decode("utf-8"))
            same = tomli_w.dumps(document, indent=0).encode() == data
        except (ValueError, RecursionError):
            same = False
        if not same:
            _breach(rel, "it is not TOML as tomli_w writes it")
        if rel == CONFIG_OUT and set(document) != {"profile"}:
            _breach(rel, "it holds more than [profile]")
        if name == "Cargo.toml":
            documents[rel] = document
        return _TOML
    if data != STUB:
        _breach(rel, "it is neither data nor the stub")
    return _STUB


def _breach(rel: str, what: str) -> NoReturn:
    raise SkeletonUnsafe(f"the skeleton broke its own rule at {printable(rel)}: {what} (a bug in "
                         "roteiro; the dependency cache is skipped)")


def _digest(written: Mapping[str, _Written]) -> str:
    """sha256 over the files sorted by path bytes, each framed by lengths: (len, path,
    kind, len, sha256 of the bytes), so no two skeletons frame to the same input.

    It covers exactly the skeleton: each file's relative path, kind and bytes, and the
    tree's bytes for a manifest that does not parse, so two different broken files still
    differ."""
    digest = hashlib.sha256(DIGEST_FORMAT + b"\0")
    for path, entry in sorted((os.fsencode(rel), entry) for rel, entry in written.items()):
        digest.update(struct.pack(">Q", len(path)) + path + entry.kind + struct.pack(">Q", entry.size)
                      + entry.sha)
    return "sha256:" + digest.hexdigest()


def cache_key(*, image_digest: str, skeleton_digest: str, argv: Sequence[str],
              env: Mapping[str, str], disk_mib: int, recipe: Sequence[str] = ()) -> str:
    """The dependency cache's key (64 hex): everything that shapes the dependencies' build.

    The image (toolchain and system libraries), the skeleton (lockfile, manifests, profiles),
    the cargo command line (profile, features, targets) and environment (RUSTFLAGS and
    kin), the cache disk's size, and the recipe (how the cache is built: the build's argv
    and cleanup script, so a change to either is a new key). Framed by json.dumps of one
    list, so no two different inputs give the same text (["a b"] is not ["a", "b"]).
    """
    material = json.dumps([KEY_FORMAT, image_digest, skeleton_digest, list(argv),
                           sorted([name, value] for name, value in env.items()), disk_mib, list(recipe)])
    return hashlib.sha256(material.encode("ascii")).hexdigest()
