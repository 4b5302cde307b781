"""The guest's cargo cache: a read-only view holding exactly what the lockfile pins.

Why: the guest used to see the host's whole `$CARGO_HOME/registry` and `$CARGO_HOME/git`,
i.e. every crate and every git checkout any project on this host ever fetched, private
ones included; a tree with only path dependencies printed a constant from another
project's private checkout. Now a lint builds (once per pinned set, cached under
$ROTEIRO_HOME/cache/cargo-views/<key>) a directory shaped like a cargo home that holds,
for each package the lockfile pins, only:

- registry (sparse layout, measured with cargo 1.95 `--offline --locked`):
  `registry/index/<dir>/config.json` and `registry/index/<dir>/.cache/<prefix>/<name>`
  (offline resolution fails without either: "config.json not found in registry"),
  `registry/cache/<dir>/<name>-<version>.crate` (without it cargo "attempting to make an
  HTTP request"), whose sha256 must equal the lockfile's checksum, and the unpacked
  `registry/src/<dir>/<name>-<version>/` with its `.cargo-ok` (the guest cannot unpack:
  the view is read-only);
- git: `git/db/<ident>-<hash>/` (without it: "can't checkout ... you are in the offline
  mode"), when its FETCH_HEAD names the pinned URL, and `git/checkouts/<ident>-<hash>/<rev[:7]>/`
  of the pinned revision only, when its HEAD is that full commit id.

A tree whose lockfile pins nothing from a registry or git gets no view at all. A pinned
package the host cache lacks is errors.NoPackageCache naming it (every pin is looked up
before anything is copied, and the first few missing are named). A host whose cargo
configuration replaces crates.io (a mirror) keeps the packages under the mirror's
directories: cargo_sources.py follows the replacement and gives the guest the same
`[source]` tables. Files are copied
without following any link (O_NOFOLLOW on every open, directories walked through their
own descriptors), regular files only (a link inside a crate is stored as a link, which
the guest resolves inside its own filesystem), and within CARGO_VIEW_MAX_BYTES /
CARGO_VIEW_MAX_ENTRIES / CARGO_VIEW_MAX_DEPTH: the cache is the host's, but an unpacked
crate's contents came from a registry.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import stat
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from roteiro_py import errors
from roteiro_py.cargo_sources import HostSources, host_sources
from roteiro_py.config import MAX_TIMEOUT_S
from roteiro_py.deps import read_lockfile
from roteiro_py.vm.mounts import cargo_views_root

#: The most bytes of crates and checkouts one view may hold.
CARGO_VIEW_MAX_BYTES = 8 * 1024**3
#: The most files, directories and links one view may hold.
CARGO_VIEW_MAX_ENTRIES = 1_000_000
#: The deepest directory nesting copied from one crate or checkout.
CARGO_VIEW_MAX_DEPTH = 64
#: The lockfile `source` of crates.io; its cache directories are named `index.crates.io-*`.
CRATES_IO = "https://github.com/rust-lang/crates.io-index"

#: cargo's package names (ASCII alphanumerics, `-`, `_`) and semver versions; anything
#: else in a lockfile would become a host path component, so it is refused.
_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
_VERSION = re.compile(r"[0-9A-Za-z.+-]{1,128}")
_REV = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
_CHECKSUM = re.compile(r"[0-9a-f]{64}")
_HASHED_DIR = re.compile(r"(?P<prefix>.+)-[0-9a-f]{16}")
_CACHEDIR_TAG = (b"Signature: 8a477f597d28d172789f06886806bc55\n"
                 b"# This file is a cache directory tag created by cargo.\n"
                 b"# For information about cache directory tags see https://bford.info/cachedir/\n")
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


@dataclass(frozen=True)
class Pin:
    """One package the lockfile pins from a registry or git."""

    name: str
    version: str
    kind: str  # "registry" or "git"
    url: str
    checksum: str | None = None
    rev: str | None = None

    def label(self) -> str:
        return f"{self.name} {self.version}"


def pins(lockfile: Path) -> list[Pin]:
    """The registry and git packages `lockfile` pins, or errors.TreeFileRefused."""
    return pins_in(lockfile, read_lockfile(lockfile))


def pins_in(lockfile: Path, data: dict[str, Any]) -> list[Pin]:
    """`pins` of an already parsed lockfile; `lockfile` only names it in a refusal.

    Sources are those cargo documents: `registry+<url>`, `sparse+<url>`, `git+<url>#<rev>`.
    A package without a source is a path package (nothing to share).
    """
    found: list[Pin] = []
    packages = data.get("package")
    for package in packages if isinstance(packages, list) else []:
        if not isinstance(package, dict) or "source" not in package:
            continue
        source, name, version = package.get("source"), package.get("name"), package.get("version")
        if not (isinstance(source, str) and isinstance(name, str) and isinstance(version, str)):
            raise errors.TreeFileRefused(lockfile, "a package's name, version or source is not a string")
        if not (_NAME.fullmatch(name) and _VERSION.fullmatch(version)):
            raise errors.TreeFileRefused(lockfile, f"{name!r} {version!r} is not a cargo package "
                                         "name and version")
        kind, plus, rest = source.partition("+")
        if plus and kind in ("registry", "sparse") and rest:
            checksum = package.get("checksum")
            if checksum is not None and not (isinstance(checksum, str) and _CHECKSUM.fullmatch(checksum)):
                raise errors.TreeFileRefused(lockfile, f"the checksum of {name} {version} is not sha256 hex")
            found.append(Pin(name, version, "registry", source, checksum))
        elif plus and kind == "git" and "#" in rest:
            url, _, rev = rest.rpartition("#")
            if not _REV.fullmatch(rev):
                raise errors.TreeFileRefused(lockfile, f"the git source of {name} {version} does not "
                                             "pin a full commit id")
            found.append(Pin(name, version, "git", url, rev=rev))
        else:
            raise errors.TreeFileRefused(lockfile, f"the source of {name} {version} is none that "
                                         "cargo writes (registry+, sparse+, git+<url>#<commit>)")
    return found


def path_packages_in(lockfile: Path, data: dict[str, Any]) -> list[str]:
    """The names of the packages an already parsed lockfile holds without a `source`
    (workspace members, path and path-[patch] dependencies), sorted, each once.

    These are the tree's own code: the dependency cache (depcache/skeleton.py) builds them
    from stubs and must know them to drop their build state. A name is checked as `pins_in`
    checks one (it becomes part of a path in the guest), else errors.TreeFileRefused.
    """
    names: set[str] = set()
    packages = data.get("package")
    for package in packages if isinstance(packages, list) else []:
        if not isinstance(package, dict) or "source" in package:
            continue
        name = package.get("name")
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise errors.TreeFileRefused(lockfile, f"{name!r} (a package without a source) is not a "
                                         "cargo package name")
        names.add(name)
    return sorted(names)


_VIEW_KEY = re.compile(r"[0-9a-f]{32}")


def view_key(pinned: list[Pin], cargo_home: Path, sources: str = "") -> str:
    """The view's name: the pinned set, and the cache it was copied from (a view is a view
    of one cargo home; another CARGO_HOME that lacks a package is refused, not served),
    and the host's source replacements it was found through (cargo_sources.HostSources.key:
    the same pins behind a mirror live in other directories)."""
    material = json.dumps([str(cargo_home), sorted([p.name, p.version, p.url, p.checksum, p.rev]
                                                   for p in pinned)] + ([sources] if sources else []))
    return hashlib.sha256(material.encode()).hexdigest()[:32]


def replaced_sources(pinned: list[Pin], sources: HostSources, tree: Path) -> dict[str, str]:
    """Each registry source the lockfile pins from, and the source whose cache directories
    hold its packages (itself, or the end of the host's replacement chain for it); a
    replacement the guest cannot follow is errors.SourceReplacementRefused, naming `tree`
    in its way forward."""
    try:
        return {url: sources.cache_source(url)
                for url in sorted({p.url for p in pinned if p.kind == "registry"})}
    except errors.SourceReplacementRefused as refused:
        refused.tree = tree
        raise


def cargo_view(lockfile: Path, cargo_home: Path, tree: Path, *, pinned: list[Pin] | None = None,
               until: float | None = None, seconds: float = 0.0,
               sources: HostSources | None = None) -> Path | None:
    """`view_in_use`, its lock let go at once: for what runs no VM on it afterwards."""
    with view_in_use(lockfile, cargo_home, tree, pinned=pinned, until=until, seconds=seconds,
                     sources=sources) as view:
        return view


@contextlib.contextmanager
def view_in_use(lockfile: Path, cargo_home: Path, tree: Path, *, pinned: list[Pin] | None = None,
                until: float | None = None, seconds: float = 0.0,
                sources: HostSources | None = None) -> Iterator[Path | None]:
    """The view for `lockfile` (built now unless cached), or None when it pins nothing to
    share; held for the block: its lock held shared from the check that finds it until the
    block ends (locks.held_shared), so that no prune removes it before the run has copied
    it or while its VM reads it, and lints of one lockfile use it side by side. It is
    built under the lock held exclusive.

    `pinned`: the lockfile's pins when the caller has read them already (the lockfile may
    be megabytes of TOML; it is parsed once per run). `tree` is what a NoPackageCache
    refusal tells the user to run fetch-deps on. `until` (time.monotonic()) is the run's
    deadline, `seconds` its length: waiting for another
    run's build of the same view and copying up to CARGO_VIEW_MAX_BYTES both stop there
    (errors.DeadlineExceeded) rather than outlive `[vm] timeout_s`. `sources`: the host's
    `[source]` replacements (cargo_sources.py; read here when not given): a registry pin
    is looked for in the cache directories of the source its replacement chain ends at,
    and the chains followed are what the guest is then given (`sources.guest_args()`).
    """
    from roteiro_py.locks import held_shared

    if pinned is None:
        pinned = pins(lockfile)
    if not pinned:
        yield None
        return
    if sources is None:
        sources = host_sources()
    found_in = replaced_sources(pinned, sources, tree)
    root = cargo_views_root()
    key = view_key(pinned, cargo_home, sources.key())
    view = root / key
    root.mkdir(parents=True, exist_ok=True)
    _sweep_unused(root, keep=key)

    def there() -> Path | None:
        if not view.is_dir():
            return None
        os.utime(view)  # in use: the sweep measures from a view's last use
        return view

    def build() -> None:
        from roteiro_py.locks import acquire_within

        lock = acquire_within(root / f"{key}.lock", until=until, seconds=seconds,
                              waiting_for="another run building or using the same cargo view")
        try:
            if view.is_dir():
                return
            for leftover in root.glob(f".{key[:12]}-*"):  # a build of this key killed midway
                shutil.rmtree(leftover, ignore_errors=True)
            staging = Path(tempfile.mkdtemp(prefix=f".{key[:12]}-", dir=root))
            try:
                budget = _Budget(until, seconds)
                _build(_located(pinned, found_in, cargo_home, tree, budget), cargo_home, staging,
                       budget)
                os.chmod(staging, 0o755)
                os.replace(staging, view)
            finally:
                shutil.rmtree(staging, ignore_errors=True)
        finally:
            lock.release()

    with held_shared(root / f"{key}.lock", until=until, seconds=seconds,
                     waiting_for="another run building the same cargo view", check=there,
                     build=build, what="cargo view", where=view) as held:
        yield held


#: A view not used for this long is removed when another view is next used: every
#: distinct pinned set is a full copy (up to CARGO_VIEW_MAX_BYTES), and a stream of pull
#: requests each changing one pin would otherwise fill the disk. Longer than any run.
VIEW_STALE_SECONDS = MAX_TIMEOUT_S + 24 * 3600


def _sweep_unused(root: Path, keep: str, now: float | None = None) -> None:
    """Remove views unused for VIEW_STALE_SECONDS whose lock is free right now (no run is
    using or building one)."""
    from roteiro_py.locks import taken_if_free

    now = time.time() if now is None else now
    with os.scandir(root) as entries:
        old = [e.name for e in entries if _VIEW_KEY.fullmatch(e.name) and e.name != keep
               and e.is_dir(follow_symlinks=False)
               and now - e.stat(follow_symlinks=False).st_mtime > VIEW_STALE_SECONDS]
    for name in old:
        with taken_if_free(root / f"{name}.lock") as free:
            if free:
                discard(root / name)


def discard(view: Path) -> None:
    """Remove a view, renamed aside first: a run that takes its lock next, or one killed
    midway through this, never sees half a view where a whole one was (a view is trusted
    by its existence). The caller holds its lock exclusive."""
    aside = view.with_name(f".{view.name}.{os.getpid()}.gone")
    os.rename(view, aside)
    shutil.rmtree(aside, ignore_errors=True)


class _Budget:
    def __init__(self, until: float | None = None, seconds: float = 0.0) -> None:
        self.bytes = 0
        self.entries = 0
        self.until = until
        self.seconds = seconds

    def take(self, what: Path, size: int) -> None:
        self.bytes += size
        self.entries += 1
        self.in_time("copying the packages the lockfile pins")
        if self.bytes > CARGO_VIEW_MAX_BYTES:
            raise errors.PackageCacheRefused(what, f"the packages the lockfile pins exceed "
                                             f"{CARGO_VIEW_MAX_BYTES} bytes")
        if self.entries > CARGO_VIEW_MAX_ENTRIES:
            raise errors.PackageCacheRefused(what, f"the packages the lockfile pins hold more "
                                             f"than {CARGO_VIEW_MAX_ENTRIES} entries")

    def in_time(self, doing: str) -> None:
        if self.until is not None and time.monotonic() > self.until:
            raise errors.DeadlineExceeded(doing, self.seconds, stopped="the VM was not started")


def _located(pinned: list[Pin], found_in: dict[str, str], cargo_home: Path,
             tree: Path, budget: _Budget) -> list[tuple[Pin, str]]:
    """Each pin and the host cache directory holding it (`<prefix>-<hash>`), looked up
    before anything is copied: a cold cache is refused naming the first
    errors.MISSING_NAMED packages it lacks and counting the rest, where copying used to
    stop at the first (and fetch-deps, then another lint, found the next).

    Bounded for a hostile lockfile: a pin it repeats is looked up once, a .crate is hashed
    once however many checksums the lockfile gives it (one 8 MiB crate pinned 2,000
    times was 16 GiB hashed), and the run's deadline is checked at every pin."""
    located: list[tuple[Pin, str]] = []
    missing: dict[str, None] = {}  # not a set: the lockfile's order is the message's
    lacking: set[str] = set()
    digests: dict[Path, str | None] = {}
    for pin in dict.fromkeys(pinned):  # in order, each distinct pin once
        budget.in_time("looking up the packages the lockfile pins")
        if pin.kind == "registry":
            directory = _find_registry(pin, found_in[pin.url], cargo_home / "registry", digests)
            label = pin.label()
        else:
            directory = _find_git(pin, cargo_home / "git")
            label = f"{pin.label()} (git {(pin.rev or '')[:12]})"
        if directory is None:
            missing.setdefault(label)  # the same package under several checksums: named once
            lacking.add(pin.kind)
        else:
            located.append((pin, directory))
    if missing:
        where = cargo_home / lacking.pop() if len(lacking) == 1 else cargo_home
        raise errors.NoPackageCache(where, tree, list(missing)[:errors.MISSING_NAMED], len(missing))
    return located


def _build(located: list[tuple[Pin, str]], cargo_home: Path, view: Path, budget: _Budget) -> None:
    for kind in sorted({p.kind for p, _ in located}):
        (view / kind).mkdir(mode=0o755)
        (view / kind / "CACHEDIR.TAG").write_bytes(_CACHEDIR_TAG)
    for pin, directory in located:
        if pin.kind == "registry":
            _place_registry(pin, directory, cargo_home / "registry", view / "registry", budget)
        else:
            _place_git(pin, directory, cargo_home / "git", view / "git", budget)
    for directory_name, subdirs, _ in os.walk(view):
        for sub in subdirs:
            os.chmod(os.path.join(directory_name, sub), 0o755)


def _candidates(parent: Path, prefix: str) -> list[str]:
    """Names of cargo's hashed directories (`<prefix>-<16 hex>`) under `parent`."""
    try:
        names = sorted(os.listdir(parent))
    except OSError:
        return []
    return [n for n in names if (m := _HASHED_DIR.fullmatch(n)) and m["prefix"] == prefix]


def _registry_prefix(source: str) -> str:
    _, _, url = source.partition("+")
    if url.rstrip("/") == CRATES_IO or url.rstrip("/") == "https://index.crates.io":
        return "index.crates.io"
    return urlsplit(url).hostname or "_empty"


def index_path(name: str) -> str:
    """Where cargo's index keeps `name`'s entry: 1/a, 2/ab, 3/a/abc, ab/cd/abcd..."""
    lower = name.lower()
    if len(lower) <= 2:
        return f"{len(lower)}/{lower}"
    if len(lower) == 3:
        return f"3/{lower[0]}/{lower}"
    return f"{lower[:2]}/{lower[2:4]}/{lower}"


def _sha256_of(path: Path) -> str | None:
    try:
        fd = os.open(path, _FILE_FLAGS)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        digest = hashlib.sha256()
        while chunk := os.read(fd, 1 << 20):
            digest.update(chunk)
        return digest.hexdigest()
    finally:
        os.close(fd)


def _find_registry(pin: Pin, source: str, host: Path, digests: dict[Path, str | None]) -> str | None:
    """The cache directory (of `source`, the pin's or its replacement's) holding the pin:
    its .crate hashing to the lockfile's checksum, its index entry and config.json, and
    its unpacked source marked complete (`.cargo-ok`). None when no directory does.
    `digests`: the .crate files hashed so far in this lookup (each is hashed once)."""
    crate = f"{pin.name}-{pin.version}"
    for directory in _candidates(host / "cache", _registry_prefix(source)):
        crate_file = host / "cache" / directory / f"{crate}.crate"
        if crate_file not in digests:
            digests[crate_file] = _sha256_of(crate_file)
        digest = digests[crate_file]
        if digest is None or (pin.checksum is not None and digest != pin.checksum):
            continue
        index = host / "index" / directory
        if ((index / ".cache" / index_path(pin.name)).is_file() and (index / "config.json").is_file()
                and (host / "src" / directory / crate / ".cargo-ok").is_file()):
            return directory
    return None


def _place_registry(pin: Pin, directory: str, host: Path, view: Path, budget: _Budget) -> None:
    crate = f"{pin.name}-{pin.version}"
    index = host / "index" / directory
    entry = index / ".cache" / index_path(pin.name)
    _copy_file(host / "cache" / directory / f"{crate}.crate",
               view / "cache" / directory / f"{crate}.crate", budget)
    _copy_file(index / "config.json", view / "index" / directory / "config.json", budget)
    _copy_file(entry, view / "index" / directory / ".cache" / index_path(pin.name), budget)
    _copy_tree(host / "src" / directory / crate, view / "src" / directory / crate, budget)


def _git_ident(url: str) -> str:
    path = urlsplit(url).path.rstrip("/")
    last = path.rsplit("/", 1)[-1]
    last = last.removesuffix(".git")
    return last or "_empty"


def _small_text(path: Path) -> str:
    """A short file of the host's git metadata, read without following a link ('' if none)."""
    try:
        fd = os.open(path, _FILE_FLAGS)
    except OSError:
        return ""
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return ""
        return os.read(fd, 64 * 1024).decode("utf-8", "replace")
    finally:
        os.close(fd)


def _same_url(left: str, right: str) -> bool:
    def plain(url: str) -> str:
        return url.split("?", 1)[0].split("#", 1)[0].rstrip("/").removesuffix(".git").lower()
    return plain(left) == plain(right)


def _checkout_is(checkout: Path, rev: str) -> bool:
    """Whether the checkout's HEAD is the commit `rev` (its directory is named by 7 hex)."""
    head = _small_text(checkout / ".git" / "HEAD").strip()
    if head.startswith("ref: refs/heads/") and ".." not in head:
        ref = head.removeprefix("ref: ")
        packed = {line.partition(" ")[2]: line.partition(" ")[0]
                  for line in _small_text(checkout / ".git" / "packed-refs").splitlines()}
        head = _small_text(checkout / ".git" / ref).strip() or packed.get(ref, "")
    return head == rev


def _database_is(database: Path, url: str) -> bool:
    """Whether cargo fetched the database from `url` (FETCH_HEAD: `<sha>\t\t<url>` lines).

    The directory's hash is cargo's hash of the canonical URL, which is not computed
    here; without this, a lockfile naming `git+https://elsewhere/privdep#<rev>` would
    be given another project's `privdep` checkout.
    """
    lines = _small_text(database / "FETCH_HEAD").splitlines()
    return any(_same_url(line.split("\t")[-1].strip(), url) for line in lines if "\t" in line)


def _find_git(pin: Pin, host: Path) -> str | None:
    """The git directory (`<ident>-<hash>`) whose checkout of the pinned commit is
    complete and whose database was fetched from the pinned URL; None when none is."""
    assert pin.rev is not None
    for directory in _candidates(host / "checkouts", _git_ident(pin.url)):
        checkout = host / "checkouts" / directory / pin.rev[:7]
        if ((checkout / ".cargo-ok").is_file() and _checkout_is(checkout, pin.rev)
                and _database_is(host / "db" / directory, pin.url)):
            return directory
    return None


def _place_git(pin: Pin, directory: str, host: Path, view: Path, budget: _Budget) -> None:
    assert pin.rev is not None
    short = pin.rev[:7]
    target = view / "checkouts" / directory / short
    if not target.exists():
        _copy_tree(host / "checkouts" / directory / short, target, budget)
    if not (view / "db" / directory).exists():
        _copy_tree(host / "db" / directory, view / "db" / directory, budget)


def _copy_file(source: Path, target: Path, budget: _Budget) -> None:
    if target.exists():
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(source, _FILE_FLAGS)
    try:
        _copy_fd(fd, source, target, budget)
    finally:
        os.close(fd)


def _copy_fd(fd: int, source: Path, target: Path, budget: _Budget) -> None:
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        raise errors.PackageCacheRefused(source, "it is not a regular file")
    budget.take(source, st.st_size)
    mode = 0o755 if st.st_mode & stat.S_IXUSR else 0o644
    out = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    try:
        copied = 0
        while chunk := os.read(fd, 1 << 20):
            copied += len(chunk)
            if copied > st.st_size:  # it grows while we copy: the budget saw the old size
                budget.take(source, len(chunk))
            os.write(out, chunk)
        os.fchmod(out, mode)
    finally:
        os.close(out)


def _copy_tree(source: Path, target: Path, budget: _Budget) -> None:
    """Copy the directory `source` into the new `target`, following no link."""
    try:
        fd = os.open(source, _DIR_FLAGS)
    except OSError as error:
        raise errors.PackageCacheRefused(source, f"it cannot be opened as a directory "
                                         f"without following a link ({error.strerror})") from None
    try:
        target.mkdir(parents=True, mode=0o755)
        _copy_dir(fd, source, target, budget, 0)
    except OSError as error:  # the cache changed under us (a concurrent cargo), or EACCES
        raise errors.PackageCacheRefused(source, f"copying it failed ({error.strerror or error})") from None
    finally:
        os.close(fd)


def _copy_dir(fd: int, source: Path, target: Path, budget: _Budget, depth: int) -> None:
    if depth > CARGO_VIEW_MAX_DEPTH:
        raise errors.PackageCacheRefused(source, f"it is nested more than {CARGO_VIEW_MAX_DEPTH} "
                                         "directories deep")
    with os.scandir(fd) as listing:
        names = sorted(entry.name for entry in listing)
    for name in names:
        here = source / name
        st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        if stat.S_ISLNK(st.st_mode):
            budget.take(here, 0)
            os.symlink(os.readlink(name, dir_fd=fd), target / name)
        elif stat.S_ISDIR(st.st_mode):
            budget.take(here, 0)
            child = os.open(name, _DIR_FLAGS, dir_fd=fd)
            try:
                (target / name).mkdir(mode=0o755)
                _copy_dir(child, here, target / name, budget, depth + 1)
            finally:
                os.close(child)
        elif stat.S_ISREG(st.st_mode):
            child = os.open(name, _FILE_FLAGS, dir_fd=fd)
            try:
                _copy_fd(child, here, target / name, budget)
            finally:
                os.close(child)
        # FIFOs, sockets and devices have no place in a crate: left out.
