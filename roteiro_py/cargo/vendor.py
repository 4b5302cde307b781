"""The guest's only view of dependencies: a vendored directory source per lockfile.

Why: what host cargo leaves in `$CARGO_HOME` is not the guest's to see (a git checkout
there can hold a submodule's `.git` with every branch of a private host repository), and
the unpacked sources there are never checked (issue 20). So the view is made here, from
the package store alone (cargo/store.py, filled by `fetch-deps` from the lockfile alone):

- each registry package is unpacked in Python from its `.crate`, which is hashed again
  and must equal the lockfile's checksum; each git package is copied from its sealed
  checkout, every file hashed against the seal as it is copied (a git package whose
  manifest inherits from its repository's workspace gets the normalized manifest that
  `cargo vendor` writes, cargo/git.py);
- nothing else is written but, per package, cargo's own `.cargo-checksum.json`
  (`files`: every file's sha256; `package`: the lockfile's checksum, null for git), so
  the guest's cargo verifies every file of every package before it builds it;
- regular files and directories only: no link, no device, no `..`, bounded in bytes,
  files and depth per package (UNPACK_MAX_*) and for the view (VIEW_MAX_*).

Layout, one directory source per source the lockfile pins from, built under
`$ROTEIRO_HOME/cache/cargo-views/<key>` (key: the set of pins) and shared read-only:
`registry/<n>/<name>-<version>/` and `git/<n>/<name>-<version>/`, mapped by vm/mounts.py
to `/cargo-home/registry` and `/cargo-home/git`, and `registry/sources.toml`, the guest
cargo's `[source]` tables: each origin (crates.io by name, another registry by its URL, a
git repository by URL and reference) `replace-with` its directory. The guest is given
that file by its absolute path (`--config /cargo-home/registry/sources.toml`), a path in
a read-only share no tree file can stand in for, and `--config` outranks the tree's own
`.cargo/config.toml`.

The host seals a view when it is made: `<key>.json` beside it records the pins and every
entry's (size, inode, ctime). A view whose entries differ when a lint uses it (a byte
written since, a file added or removed: each changes a ctime or the set) is discarded and
made again from the store, before any VM sees it.

What the guest saw before: docs/DESIGN_NOTES.md, section `roteiro_py/cargo/vendor.py`.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import io
import json
import os
import re
import shutil
import stat
import tarfile
import tempfile
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO

from roteiro_py import errors
from roteiro_py.cargo import git as cargo_git
from roteiro_py.cargo import store
from roteiro_py.cargo.lockfile import Lockfile, Pin
from roteiro_py.cargo.registry import HostCargo
from roteiro_py.eviction import record_use, used_record
from roteiro_py.locks import acquire_within, held_shared, taken_if_free
from roteiro_py.paths import replace_file
from roteiro_py.vm.mounts import GUEST_CARGO_HOME, cargo_views_root
from roteiro_py.vocabulary import MAX_TIMEOUT_S

#: The most bytes one package may unpack to (the largest crates on crates.io unpack to
#: ~100 MiB: generated bindings).
UNPACK_MAX_BYTES = 512 * 1024**2
#: The most files and directories one package may hold.
UNPACK_MAX_ENTRIES = 100_000
#: The deepest path inside one package.
UNPACK_MAX_DEPTH = 64
#: The most bytes one view may hold, all packages together.
VIEW_MAX_BYTES = 8 * 1024**3
#: The most distinct sources (registries and git repositories) one lockfile may pin from.
MAX_SOURCES = 256
#: The file of `[source]` tables given to the guest's cargo, inside the view's registry/.
SOURCES_FILE = "sources.toml"
#: Its path in the guest.
GUEST_SOURCES = f"{GUEST_CARGO_HOME}/registry/{SOURCES_FILE}"
#: cargo's name for crates.io as a source to replace.
CRATES_IO = "crates-io"
_CRATES_IO_SOURCE = "registry+https://github.com/rust-lang/crates.io-index"
_CHECKSUM_FILE = ".cargo-checksum.json"
_VIEW_KEY = re.compile(r"[0-9a-f]{32}")
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
#: A view not used for this long is removed when another view is next used: every
#: distinct pinned set is a full copy, and a stream of pull requests each changing one
#: pin would otherwise fill the disk. Longer than any run.
VIEW_STALE_SECONDS = MAX_TIMEOUT_S + 24 * 3600


@dataclass(frozen=True)
class GuestCargo:
    """What the guest's cargo is given: the view's registry/ and git/ (None when the
    lockfile pins nothing from there), and the `--config` arguments naming the view's
    `[source]` tables (empty without a view)."""

    registry: Path | None
    git: Path | None
    config_args: tuple[str, ...] = ()


def view_key(pins: tuple[Pin, ...], names: dict[str, str] | None = None) -> str:
    """The view's name: the pinned set, and the host's names of its other registries
    (they are written into its `sources.toml`)."""
    material = json.dumps([sorted([p.name, p.version, p.source, p.checksum, p.rev] for p in pins),
                           sorted((names or {}).items())])
    return hashlib.sha256(material.encode()).hexdigest()[:32]


#: A registry name the guest may be given as a bare TOML key (cargo's own rule is looser).
_REGISTRY_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


def registry_names(pins: tuple[Pin, ...]) -> dict[str, str]:
    """The host's name (`[registries.<name>] index` in `$CARGO_HOME/config.toml`) of each
    registry other than crates.io that `pins` come from, by the URL cargo names it with.

    A manifest names such a registry by name (`registry = "corp"`), and the guest's cargo
    must resolve that name to the URL whose source the view replaces: the tree's own
    `.cargo/config.toml` may define it, the user's configuration otherwise, which the guest
    never reads. Only the name and the index URL are given, never a token."""
    others = {pin.source: _origin_url(pin) for pin in pins
              if pin.kind == "registry" and pin.source != _CRATES_IO_SOURCE}
    if not others:
        return {}
    host = HostCargo.read()
    found: dict[str, str] = {}
    for url in sorted(set(others.values())):
        name = host.name_of(url)
        if name is not None and _REGISTRY_NAME.fullmatch(name) and name != CRATES_IO:
            found[url] = name
    return found


def missing_from_store(pins: tuple[Pin, ...]) -> list[Pin]:
    """The pins the package store lacks (a `.crate` under its checksum, a sealed git
    checkout), in the lockfile's order; what `fetch-deps` fills."""
    return [pin for pin in pins
            if not (store.has_crate(pin.checksum) if pin.kind == "registry" and pin.checksum
                    else store.git_checkout(pin) is not None)]


def refuse_missing(lock: Lockfile, tree: Path) -> None:
    """errors.NoPackageCache naming the first pins the store lacks, if any."""
    missing = missing_from_store(lock.pins)
    if missing:
        labels = list(dict.fromkeys(pin.described() for pin in missing))
        raise errors.NoPackageCache(store.packages_root(), tree, labels[:errors.MISSING_NAMED],
                                    len(labels))


@contextlib.contextmanager
def vendored_in_use(lock: Lockfile, tree: Path, *, until: float | None = None,
                    seconds: float = 0.0) -> Iterator[GuestCargo]:
    """The vendored view of `lock`'s pins (made now unless a sealed one exists), held for
    the block: its lock held shared from the check that finds it until the block ends
    (locks.held_shared), so no prune removes it while a VM reads it. A lockfile that pins
    nothing from a registry or git gets no view. Pins the store lacks are
    errors.NoPackageCache naming them, before anything is unpacked or booted; a stored
    package that no longer hashes to its pin is dropped from the store and named alike."""
    if not lock.pins:
        yield GuestCargo(None, None)
        return
    refuse_missing(lock, tree)
    names = registry_names(lock.pins)
    root = cargo_views_root()
    key = view_key(lock.pins, names)
    view = root / key
    root.mkdir(parents=True, exist_ok=True)
    _sweep_unused(root, keep=key)
    budget = _Budget(lock.path, until, seconds)

    def there() -> Path | None:
        if not view.is_dir():
            return None
        if not _seal_holds(view, key):
            return None  # `build` discards it and makes it again, under the lock
        os.utime(view)  # in use: the sweep measures from a view's last use
        record_use(used_record(view))  # and `cache prune` (eviction.py)
        return view

    def build() -> None:
        lock_file = acquire_within(root / f"{key}.lock", until=until, seconds=seconds,
                                   waiting_for="another run making or using the same vendored view")
        try:
            if view.is_dir() and _seal_holds(view, key):
                return
            if view.is_dir():
                discard(view)
            for leftover in root.glob(f".{key[:12]}-*"):  # a build of this key killed midway
                shutil.rmtree(leftover, ignore_errors=True)
            staging = Path(tempfile.mkdtemp(prefix=f".{key[:12]}-", dir=root))
            try:
                _build(lock, tree, staging, budget, names)
                os.chmod(staging, 0o755)
                os.replace(staging, view)
                _seal(view, key)
            finally:
                shutil.rmtree(staging, ignore_errors=True)
        finally:
            lock_file.release()

    with held_shared(root / f"{key}.lock", until=until, seconds=seconds,
                     waiting_for="another run making the same vendored view", check=there,
                     build=build, what="vendored view", where=view) as held:
        registry, git = held / "registry", held / "git"
        yield GuestCargo(registry if registry.is_dir() else None, git if git.is_dir() else None,
                         ("--config", GUEST_SOURCES))


def vendored(lock: Lockfile, tree: Path) -> GuestCargo:
    """`vendored_in_use`, its lock let go at once: for what boots no VM on it."""
    with vendored_in_use(lock, tree) as made:
        return made


# -- making a view ---------------------------------------------------------------------


class _Budget:
    def __init__(self, lockfile: Path, until: float | None, seconds: float) -> None:
        self.bytes = 0
        self.lockfile = lockfile
        self.until = until
        self.seconds = seconds

    def take(self, what: str, size: int) -> None:
        self.bytes += size
        if self.bytes > VIEW_MAX_BYTES:
            raise errors.PackageRefused(self.lockfile, what, f"with it, the packages the lockfile "
                                        f"pins unpack to more than {VIEW_MAX_BYTES} bytes, the "
                                        "most one view holds")

    def in_time(self) -> None:
        if self.until is not None and time.monotonic() > self.until:
            raise errors.DeadlineExceeded("unpacking the packages the lockfile pins", self.seconds,
                                          stopped="the VM was not started")


def _sources(pins: tuple[Pin, ...]) -> dict[tuple[str, str, tuple[str, str] | None], int]:
    """Each distinct origin (kind, URL as cargo names it, git reference) and its number."""
    origins: dict[tuple[str, str, tuple[str, str] | None], int] = {}
    for pin in pins:
        origin = (pin.kind, _origin_url(pin), pin.reference)
        if origin not in origins:
            origins[origin] = sum(1 for o in origins if o[0] == pin.kind)
    if len(origins) > MAX_SOURCES:
        raise errors.TreeFileRefused(Path("Cargo.lock"), f"it pins packages from more than "
                                     f"{MAX_SOURCES} sources")
    return origins


def _origin_url(pin: Pin) -> str:
    """The URL cargo's `[source.X] registry`/`git` must hold to name the pin's source."""
    if pin.kind == "git":
        return pin.url
    if pin.source == _CRATES_IO_SOURCE:
        return CRATES_IO
    kind, _, rest = pin.source.partition("+")
    return pin.source if kind == "sparse" else rest


def sources_toml(pins: tuple[Pin, ...], names: dict[str, str] | None = None) -> str:
    """The guest cargo's `[source]` tables: every origin replaced by its directory, and
    `[registries.<name>] index` for each registry the host names (`registry_names`).

    Every value was checked by cargo/lockfile.py (printable ASCII, no quote, no
    backslash), and is written as a JSON string, which TOML reads the same."""
    lines: list[str] = []
    for url, name in sorted((names or {}).items()):
        lines += [f"[registries.{name}]", f"index = {json.dumps(url)}", ""]
    for (kind, url, reference), number in _sources(pins).items():
        directory = f"roteiro-{kind}-dir-{number}"
        if url == CRATES_IO:
            lines += [f"[source.{CRATES_IO}]"]
        elif kind == "registry":
            lines += [f"[source.roteiro-registry-{number}]", f"registry = {json.dumps(url)}"]
        else:
            lines += [f"[source.roteiro-git-{number}]", f"git = {json.dumps(url)}"]
            if reference is not None:
                lines += [f"{reference[0]} = {json.dumps(reference[1])}"]
        lines += [f'replace-with = "{directory}"', "",
                  f"[source.{directory}]",
                  f"directory = {json.dumps(f'{GUEST_CARGO_HOME}/{kind}/{number}')}", ""]
    return "\n".join(lines)


def _build(lock: Lockfile, tree: Path, view: Path, budget: _Budget, names: dict[str, str]) -> None:
    origins = _sources(lock.pins)
    for kind in sorted({pin.kind for pin in lock.pins}):
        (view / kind).mkdir(mode=0o755)
    (view / "registry").mkdir(mode=0o755, exist_ok=True)
    (view / "registry" / SOURCES_FILE).write_text(sources_toml(lock.pins, names))
    for pin in lock.pins:
        budget.in_time()
        number = origins[(pin.kind, _origin_url(pin), pin.reference)]
        directory = view / pin.kind / str(number) / f"{pin.name}-{pin.version}"
        if directory.exists():  # the same name and version twice from one source
            continue
        directory.parent.mkdir(mode=0o755, exist_ok=True)
        if pin.kind == "registry":
            _unpack_crate(lock, pin, tree, directory, budget)
        else:
            _copy_git(lock, pin, tree, directory, budget)
    for directory_name, subdirs, _ in os.walk(view):
        for sub in subdirs:
            os.chmod(os.path.join(directory_name, sub), 0o755)


def _unpack_crate(lock: Lockfile, pin: Pin, tree: Path, directory: Path, budget: _Budget) -> None:
    """Unpack the stored `.crate` of `pin` into `directory`, which it must hash to."""
    assert pin.checksum is not None
    path = store.crate_path(pin.checksum)
    try:
        data = _read_crate(path)
    except OSError:
        data = None
    if data is None or hashlib.sha256(data).hexdigest() != pin.checksum:
        with contextlib.suppress(OSError):
            path.unlink()  # damaged: fetch-deps fetches it again
        raise errors.NoPackageCache(store.packages_root(), tree, [pin.described()], 1)
    files = unpack_crate(data, f"{pin.name}-{pin.version}", directory, pin.described(), lock.path,
                         budget)
    _write_checksums(directory, files, pin.checksum)


def _read_crate(path: Path) -> bytes | None:
    fd = os.open(path, _FILE_FLAGS)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > store.MAX_CRATE_BYTES:
            return None
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def unpack_crate(data: bytes, top: str, directory: Path, label: str, lockfile: Path,
                 budget: _Budget | None = None) -> dict[str, str]:
    """Unpack a `.crate` (a gzip tar whose every member is under `top/`) into the new
    `directory`, regular files and directories only, within UNPACK_MAX_*; returns each
    file's path (relative, `/`-separated) and sha256. A member that is a link, a device,
    absolute, holds `..` or lies outside `top/` is errors.PackageRefused naming the package."""

    def refuse(why: str) -> errors.PackageRefused:
        return errors.PackageRefused(lockfile, label, f"its .crate {why}")

    files: dict[str, str] = {}
    total = 0
    entries = 0
    directory.mkdir(mode=0o755)
    try:
        with tarfile.open(fileobj=gzip.GzipFile(fileobj=io.BytesIO(data)), mode="r|") as archive:
            for member in archive:
                entries += 1
                if entries > UNPACK_MAX_ENTRIES:
                    raise refuse(f"holds more than {UNPACK_MAX_ENTRIES} entries")
                relative = _member_path(member.name, top)
                if relative is None:
                    raise refuse(f"holds {member.name[:200]!r}, outside {top}/")
                if len(relative.parts) > UNPACK_MAX_DEPTH:
                    raise refuse(f"nests deeper than {UNPACK_MAX_DEPTH} directories")
                if not relative.parts:
                    continue  # the top directory itself
                if relative.parts[0] == _CHECKSUM_FILE and (member.isdir()
                                                           or len(relative.parts) > 1):
                    raise refuse(f"holds a directory {_CHECKSUM_FILE}, where cargo's own "
                                 "checksum file goes")
                target = directory.joinpath(*relative.parts)
                if member.isdir():
                    target.mkdir(mode=0o755, parents=True, exist_ok=True)
                    continue
                if not member.isreg():
                    raise refuse(f"holds {member.name[:200]!r}, which is not a regular file "
                                 "or a directory")
                if str(relative) == _CHECKSUM_FILE:
                    continue  # ours is written from what was unpacked
                total += member.size
                if total > UNPACK_MAX_BYTES:
                    raise refuse(f"unpacks to more than {UNPACK_MAX_BYTES} bytes")
                if budget is not None:
                    budget.take(label, member.size)
                source = archive.extractfile(member)
                assert source is not None
                target.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
                files[str(relative)] = _write_new(target, source, member.size,
                                                  executable=bool(member.mode & 0o100))
    except (tarfile.TarError, EOFError, gzip.BadGzipFile, OSError, zlib.error) as error:
        raise refuse(f"cannot be unpacked ({error})") from None
    return files


def _member_path(name: str, top: str) -> PurePosixPath | None:
    """`name` relative to `top/`, or None when it is absolute, holds `..` or `.` parts
    that escape, or is not under `top`."""
    path = PurePosixPath(name)
    if path.is_absolute() or ".." in path.parts or "\\" in name or "\0" in name:
        return None
    parts = [part for part in path.parts if part != "."]
    if not parts or parts[0] != top:
        return None
    return PurePosixPath(*parts[1:]) if len(parts) > 1 else PurePosixPath()


def _write_new(target: Path, source: IO[bytes], size: int, *,
               executable: bool) -> str:
    """Write `size` bytes from `source` to the new file `target` (never through a link or
    over an existing file); returns their sha256."""
    digest = hashlib.sha256()
    out = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                  0o755 if executable else 0o644)
    try:
        left = size
        while left > 0:
            chunk = source.read(min(1 << 20, left))
            if not chunk:
                raise EOFError(f"{target.name} is cut short")
            digest.update(chunk)
            view = memoryview(chunk)
            while view:
                view = view[os.write(out, view):]
            left -= len(chunk)
    finally:
        os.close(out)
    return digest.hexdigest()


def _write_checksums(directory: Path, files: dict[str, str], package: str | None) -> None:
    (directory / _CHECKSUM_FILE).write_text(
        json.dumps({"files": dict(sorted(files.items())), "package": package}, sort_keys=True))


def _copy_git(lock: Lockfile, pin: Pin, tree: Path, directory: Path, budget: _Budget) -> None:
    """Copy `pin`'s package out of its sealed checkout, every file hashed against the
    seal; a manifest inheriting from the repository's workspace is replaced by the
    normalized one (the original kept as Cargo.toml.orig, as `cargo vendor` does)."""
    found = store.git_checkout(pin)
    if found is None:
        raise errors.NoPackageCache(store.packages_root(), tree, [pin.described()], 1)
    checkout, sealed = found
    package = cargo_git.package_dir(checkout, pin, lockfile=lock.path, tree=tree)
    normalized = cargo_git.normalized_manifest(checkout, package, pin, lockfile=lock.path, tree=tree)
    prefix = PurePosixPath(package.relative_to(checkout).as_posix())
    files: dict[str, str] = {}
    directory.mkdir(mode=0o755)
    for relative, digest in sorted(sealed.items()):
        inside = PurePosixPath(relative)
        if inside.is_absolute() or ".." in inside.parts or not isinstance(digest, str):
            raise errors.NoPackageCache(store.packages_root(), tree, [pin.described()], 1)
        if prefix.parts and inside.parts[:len(prefix.parts)] != prefix.parts:
            continue
        own = PurePosixPath(*inside.parts[len(prefix.parts):])
        if _is_nested_package(own, sealed, prefix) or str(own) == _CHECKSUM_FILE:
            continue
        written_here = (_CHECKSUM_FILE, *(("Cargo.toml.orig",) if normalized is not None else ()))
        if len(own.parts) > 1 and own.parts[0] in written_here:
            raise errors.PackageRefused(lock.path, pin.described(), f"its repository holds a "
                                        f"directory {own.parts[0]}, where the view writes a file "
                                        "of that name", tree)
        source = checkout.joinpath(*inside.parts)
        fd = os.open(source, _FILE_FLAGS)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise errors.NoPackageCache(store.packages_root(), tree, [pin.described()], 1)
            budget.take(pin.described(), st.st_size)
            target = directory.joinpath(*own.parts)
            target.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
            with os.fdopen(os.dup(fd), "rb") as handle:
                written = _write_new(target, handle, st.st_size,
                                     executable=bool(st.st_mode & stat.S_IXUSR))
        finally:
            os.close(fd)
        if written != digest:  # changed since it was fetched: fetch it again
            shutil.rmtree(checkout, ignore_errors=True)
            raise errors.NoPackageCache(store.packages_root(), tree, [pin.described()], 1)
        files[str(own)] = written
    if normalized is not None:
        manifest = directory / "Cargo.toml"
        os.replace(manifest, directory / "Cargo.toml.orig")
        files["Cargo.toml.orig"] = files["Cargo.toml"]
        manifest.write_bytes(normalized)
        files["Cargo.toml"] = hashlib.sha256(normalized).hexdigest()
    _write_checksums(directory, files, None)


def _is_nested_package(own: PurePosixPath, sealed: dict[str, str], prefix: PurePosixPath) -> bool:
    """Whether `own` lies in a sub-directory holding a Cargo.toml of its own (another
    package of the repository, which cargo leaves out of this one's files)."""
    for depth in range(1, len(own.parts)):
        manifest = PurePosixPath(*prefix.parts, *own.parts[:depth], "Cargo.toml")
        if str(manifest) in sealed:
            return True
    return False


# -- the seal ------------------------------------------------------------------------


def _entries(view: Path) -> dict[str, list[int]]:
    """Every entry of the view (no link followed): relative path -> [mode, size, inode,
    ctime_ns]. Any write to a file changes its ctime; adding or removing one changes the set."""
    found: dict[str, list[int]] = {}
    for directory, subdirs, names in os.walk(view):
        for name in [*subdirs, *names]:
            path = os.path.join(directory, name)
            st = os.lstat(path)
            found[os.path.relpath(path, view)] = [st.st_mode, st.st_size, st.st_ino, st.st_ctime_ns]
    return found


def _seal_path(view: Path) -> Path:
    return view.with_name(f"{view.name}.json")


def _seal(view: Path, key: str) -> None:
    replace_file(_seal_path(view), json.dumps({"key": key, "entries": _entries(view)},
                                              sort_keys=True).encode(), 0o644)


def _seal_holds(view: Path, key: str) -> bool:
    """Whether `view` is exactly what was sealed under `key` (lstat of every entry)."""
    try:
        record = json.loads(_seal_path(view).read_text())
        return (isinstance(record, dict) and record.get("key") == key
                and record.get("entries") == _entries(view))
    except (OSError, ValueError):
        return False


# -- keeping the views' directory small ----------------------------------------------


def _sweep_unused(root: Path, keep: str, now: float | None = None) -> None:
    """Remove views unused for VIEW_STALE_SECONDS whose lock is free right now."""
    now = time.time() if now is None else now
    with os.scandir(root) as entries:
        names = [e.name for e in entries if _VIEW_KEY.fullmatch(e.name) and e.name != keep
                 and e.is_dir(follow_symlinks=False)]
    for name in names:
        if now - os.lstat(root / name).st_mtime <= VIEW_STALE_SECONDS:
            continue
        with taken_if_free(root / f"{name}.lock") as free:
            if free:
                discard(root / name)


def discard(view: Path) -> None:
    """Remove a view and its seal, renamed aside first: a run that takes its lock next,
    or one killed midway through this, never sees half a view where a whole one was.
    The caller holds its lock exclusive."""
    with contextlib.suppress(FileNotFoundError):
        _seal_path(view).unlink()
    aside = view.with_name(f".{view.name}.{os.getpid()}.gone")
    os.rename(view, aside)
    shutil.rmtree(aside, ignore_errors=True)
    with contextlib.suppress(FileNotFoundError):
        used_record(view).unlink()
