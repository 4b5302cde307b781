"""`pylint-sandbox cache list|prune|remove-image`: what a lint keeps under $ROTEIRO_HOME
(the caches under cache/, and the image store), and removing it by age or size, or one
provisioned image by name, without pulling anything from under a running lint.

Every cache under cache/ is derived (rebuilt when missing), and each kind keeps its own layout,
made by the module named beside it in KINDS. A kind says what its entries are (key,
allocated bytes, last use, path), which lock a run holds while it builds or uses one,
and how one is deleted once that lock is taken:

- a removal takes the entry's lock without waiting (locks.taken_if_free); a held lock is
  a running lint, and the entry is kept and reported as in use;
- what goes is chosen by roteiro_py/eviction.py, the policy the dependency caches' size
  cap uses too: least recently used first;
- `prune` with no criterion is a usage error, never "everything": `--all` says that.
- a provisioned image is listed (kind `image`, store/layout.py `Store.usage`: its own
  blobs' bytes, the blobs it shares with another image counted once in a row of their
  own) but never pruned: it is not derived, only fetched again. `remove-image REF`
  removes one (`Store.remove_image`), then the root filesystems built from it;
  `remove-image --all-except REF` every other one, and every image-build layout but the
  one that built REF (its record names REF's digest): what a CI cache saves is then what
  the lint used, not every toolchain it ever saw.

Last use is what a lint recorded (eviction.py `record_use`: `<entry>.used` beside a root
filesystem, VM template or cargo view, `<key>.used` for a dependency cache,
`store/uses/<hex>.used` for an image), never an access time: under relatime a root
filesystem booted minutes ago showed its atime of yesterday. An entry without a record
(made before records) falls back to its mtime, and `cache list` says so; a kept build's
mtime is its record (each run that keeps it writes it).

What a held lock covers is the same for every kind (roteiro_py/locks.py): a running lint
holds each cache it uses from the check that finds it until its VM is done (shared: the
cargo view, the root filesystem, a VM template, a dependency cache; exclusive: a kept
build, which the run writes), and a build holds it exclusive. So an entry in use is
never removed, whether its qemu has opened it yet or not; it is reported and goes at a
later prune. Lock files themselves are never removed.

Sizes are allocated bytes (st_blocks * 512): the dependency caches, kept builds and VM
templates are sparse files much larger than what they hold. Only names of the shape each
kind makes are looked at (a link or a directory where a file belongs is not ours and is
left out), every listing reads at most MAX_NAMES names, and a directory's size is
counted within TREE_MAX_ENTRIES and TREE_MAX_DEPTH. What comes from disk (paths, failure
reasons) reaches the terminal through the one sanitiser and `guard()` (untrusted.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import stat
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from roteiro_py import paths
from roteiro_py.errors import ImageInUse, ImageNotInStore, MalformedReference, UsageError
from roteiro_py.eviction import evict, last_use, used_record
from roteiro_py.reference import ImageReference, parse
from roteiro_py.untrusted import FileRefused, guard, read_bounded, sanitise

if TYPE_CHECKING:
    from roteiro_py.store.layout import ImageRemoval

#: The most names of one kind's directory looked at.
MAX_NAMES = 100_000
#: A directory entry's size is counted over at most this many files and directories, this
#: deep: a vendored view holds at most UNPACK_MAX_ENTRIES a package, 64 levels deep (cargo/vendor.py), a
#: VM template holds a handful of files. Past either, the size is a lower bound, and said so.
TREE_MAX_ENTRIES = 1_100_000
TREE_MAX_DEPTH = 80
#: How much of a dependency cache's failure reason `cache list` shows.
REASON_CHARS = 200


@dataclass(frozen=True)
class CacheEntry:
    """One cached thing: its kind (a KINDS key), key, path, allocated bytes, last use
    (epoch seconds) and a note (why a dependency cache's build failed; a partial size)."""

    kind: str
    key: str
    path: Path
    size: int
    last_used: float
    note: str | None = None
    #: False when no lint recorded a use of it: `last_used` is then its mtime (or, for an
    #: image, when it was provisioned).
    recorded: bool = True
    #: What is shown instead of the path: an image's reference.
    reference: str | None = None


class CacheKind(Protocol):
    """One kind of cache: where it lives and how its entries are found and removed."""

    label: str

    def entries(self) -> list[CacheEntry]: ...

    def lock_path(self, entry: CacheEntry) -> Path:
        """The lock a run holds while it builds or uses `entry` (never removed)."""
        ...

    def delete(self, entry: CacheEntry) -> None:
        """Remove `entry`; called with its lock taken."""
        ...


def _scan(directory: Path, pattern: re.Pattern[str], *, directories: bool) -> list[tuple[str, Path, os.stat_result]]:
    """(key, path, own stat) of each name in `directory` matching `pattern` (its group 1 the
    key) that is a directory (or a regular file), links never followed; MAX_NAMES at most."""
    found: list[tuple[str, Path, os.stat_result]] = []
    with contextlib.suppress(FileNotFoundError, NotADirectoryError), os.scandir(directory) as scan:
        for seen, entry in enumerate(scan):
            if seen >= MAX_NAMES:
                break
            match = pattern.fullmatch(entry.name)
            if match is None:
                continue
            with contextlib.suppress(OSError):
                st = entry.stat(follow_symlinks=False)
                if (stat.S_ISDIR if directories else stat.S_ISREG)(st.st_mode):
                    found.append((match.group(1), Path(entry.path), st))
    return sorted(found, key=lambda item: item[0])


def _tree_bytes(root: Path) -> tuple[int, bool]:
    """(allocated bytes under `root`, whether all of it was counted), links not followed."""
    total, seen, complete = 0, 0, True
    pending = [(root, 0)]
    while pending:
        directory, depth = pending.pop()
        with contextlib.suppress(OSError), os.scandir(directory) as scan:
            for entry in scan:
                seen += 1
                if seen > TREE_MAX_ENTRIES:
                    return total, False
                with contextlib.suppress(OSError):
                    st = entry.stat(follow_symlinks=False)
                    total += st.st_blocks * 512
                    if not stat.S_ISDIR(st.st_mode):
                        continue
                    if depth + 1 < TREE_MAX_DEPTH:
                        pending.append((Path(entry.path), depth + 1))
                    else:
                        complete = False
    return total, complete


def _partial(complete: bool) -> str | None:
    return None if complete else (f"size counted over the first {TREE_MAX_ENTRIES} entries "
                                  f"and {TREE_MAX_DEPTH} levels only")


def _directory_entries(kind: str, root: Path, name: re.Pattern[str]) -> list[CacheEntry]:
    """Caches kept as one directory per key under `root` (VM templates, cargo views): the
    size is everything under the directory, the last use its record (else its mtime)."""
    found = []
    for key, path, st in _scan(root, name, directories=True):
        size, complete = _tree_bytes(path)
        when, recorded = last_use(used_record(path), st.st_mtime)
        found.append(CacheEntry(kind, key, path, size, when, _partial(complete), recorded))
    return found


class _DependencyCaches:
    """depcache/store.py: `deps/<key>.ext4` (or a failure mark alone), last use `<key>.used`."""

    label = "dependency cache"

    def entries(self) -> list[CacheEntry]:
        # lazy: a kind's module (the qemu stack, ssl, filelock) loads only when that kind is used:
        # `cache prune`'s usage refusal loads none of them
        from roteiro_py.depcache import store

        return [CacheEntry("deps", entry.key, entry.path, entry.size, entry.last_used,
                           None if entry.failed is None else f"build failed: {entry.failed}")
                for entry in store.entries()]

    def lock_path(self, entry: CacheEntry) -> Path:
        # lazy: see _DependencyCaches.entries
        from roteiro_py.depcache import store

        return store.lock_path(entry.key)

    def delete(self, entry: CacheEntry) -> None:
        # lazy: see _DependencyCaches.entries
        from roteiro_py.depcache import store

        store.discard(entry.key)


class _Templates:
    """vm/qemu/template.py: `vm-templates/<key>/`, last use `<key>.used` (each restore)."""

    label = "VM template"
    _NAME = re.compile(r"([0-9a-f]{32})")

    def _root(self) -> Path:
        # lazy: see _DependencyCaches.entries
        from roteiro_py.vm.qemu.template import templates_root

        return templates_root()

    def entries(self) -> list[CacheEntry]:
        return _directory_entries("template", self._root(), self._NAME)

    def lock_path(self, entry: CacheEntry) -> Path:
        return entry.path.parent / f"{entry.key}.lock"

    def delete(self, entry: CacheEntry) -> None:
        # lazy: see _DependencyCaches.entries
        from roteiro_py.vm.qemu.template import discard

        discard(entry.path)


class _RootFilesystems:
    """vm/disks/rootfs.py: `rootfs/<manifest hex>.ext4` sealed by rootfs_record.py, last use
    `<hex>.ext4.used` (each lint that boots it). Its access time decides nothing: relatime
    updates it at most once a day, noatime never."""

    label = "root filesystem"
    _NAME = re.compile(r"([0-9a-f]{64})\.ext4")

    def entries(self) -> list[CacheEntry]:
        found = []
        for key, path, st in _scan(paths.cache_root() / "rootfs", self._NAME, directories=False):
            when, recorded = last_use(used_record(path), st.st_mtime)
            found.append(CacheEntry("rootfs", key, path, st.st_blocks * 512, when,
                                    recorded=recorded))
        return found

    def lock_path(self, entry: CacheEntry) -> Path:
        # lazy: see _DependencyCaches.entries
        from roteiro_py.vm.disks.rootfs_record import lock_path

        return lock_path(entry.path)

    def delete(self, entry: CacheEntry) -> None:
        # lazy: see _DependencyCaches.entries
        from roteiro_py.vm.disks.rootfs_record import discard

        discard(entry.path)


class _KeptBuilds:
    """lint/caches.py (`--keep-cache`): `builds/<key>.ext4`, written by each run that keeps
    it (its mtime is the last use), trusted only with its manifest (lint/freshness.py)."""

    label = "kept build"
    _NAME = re.compile(r"([0-9a-f]{32})\.ext4")

    def entries(self) -> list[CacheEntry]:
        return [CacheEntry("build", key, path, st.st_blocks * 512, st.st_mtime)
                for key, path, st in _scan(paths.cache_root() / "builds", self._NAME,
                                           directories=False)]

    def lock_path(self, entry: CacheEntry) -> Path:
        return entry.path.with_suffix(".lock")

    def delete(self, entry: CacheEntry) -> None:
        # lazy: importing lint/ runs the conductor's package, every stage, for one path
        from roteiro_py.lint.freshness import manifest_path

        # The manifest first: a disk without one is never trusted, only made afresh.
        with contextlib.suppress(FileNotFoundError):
            manifest_path(entry.path).unlink()
        with contextlib.suppress(FileNotFoundError):
            entry.path.unlink()


class _CargoViews:
    """cargo/vendor.py: `cargo-views/<key>/`, the vendored view of what one lockfile pins,
    its mtime set by each use."""

    label = "cargo view"
    _NAME = re.compile(r"([0-9a-f]{32})")

    def entries(self) -> list[CacheEntry]:
        # lazy: see _DependencyCaches.entries
        from roteiro_py.vm.mounts import cargo_views_root

        return _directory_entries("cargo-view", cargo_views_root(), self._NAME)

    def lock_path(self, entry: CacheEntry) -> Path:
        return entry.path.parent / f"{entry.key}.lock"

    def delete(self, entry: CacheEntry) -> None:
        # lazy: see _DependencyCaches.entries
        from roteiro_py.cargo.vendor import discard

        discard(entry.path)


class _ImageBuilds:
    """image/build.py: `images/clippy-<tag>/`, the OCI layout `image build` made and keeps
    so the same inputs build nothing (~840 MB each: the store holds a copy of its blobs),
    last use its mtime (each build of it). Its lock is the build's own."""

    label = "image build"
    _NAME = re.compile(r"clippy-([A-Za-z0-9][A-Za-z0-9._-]{0,127})")

    def entries(self) -> list[CacheEntry]:
        return _directory_entries("image-build", paths.cache_root() / "images", self._NAME)

    def lock_path(self, entry: CacheEntry) -> Path:
        # lazy: see _DependencyCaches.entries
        from roteiro_py.image.build import lock_path

        return lock_path(entry.key)

    def delete(self, entry: CacheEntry) -> None:
        shutil.rmtree(entry.path)  # a directory of ours; rmtree follows no link inside it
        with contextlib.suppress(FileNotFoundError):
            used_record(entry.path).unlink()


class _Images:
    """store/layout.py: each provisioned reference (`Store.usage`), its last use
    `store/uses/<pinned hex>.used` (each lint of it). Listed, never pruned (not derived):
    `remove-image` removes one. Two more rows when there is anything in them: the blobs
    shared by several images (counted once), and blobs no image reaches."""

    label = "image"

    def entries(self) -> list[CacheEntry]:
        # lazy: see _DependencyCaches.entries
        from roteiro_py.store import Store

        store = Store.default()
        usage = store.usage()
        found = []
        for image in usage.images:
            note = image.detail
            if note is None and image.shared_bytes:
                note = f"and {size_text(image.shared_bytes)} of layers shared with other images"
            found.append(CacheEntry("image", image.digest.partition(":")[2], image.path,
                                    image.own_bytes, image.last_used, note, image.recorded,
                                    image.name))
        if usage.shared_bytes:
            found.append(CacheEntry("image", "(shared)", store.blobs_dir, usage.shared_bytes,
                                    max(image.last_used for image in usage.images),
                                    "layers used by more than one image, counted once",
                                    reference="(shared layers)"))
        if usage.unreferenced_bytes:
            unreadable = any(image.detail is not None for image in usage.images)
            found.append(CacheEntry("image", "(unreferenced)", store.blobs_dir,
                                    usage.unreferenced_bytes, 0.0,
                                    "blobs no readable image uses (some may be the unreadable "
                                    "image's: prefetch it again)" if unreadable else
                                    "blobs no image uses: `pylint-sandbox prefetch --prune` "
                                    "removes them", reference="(unreferenced blobs)"))
        return found

    def lock_path(self, entry: CacheEntry) -> Path:
        # lazy: see _DependencyCaches.entries
        from roteiro_py.store import Store

        return Store.default().use_path(f"sha256:{entry.key}", ".lock")

    def delete(self, entry: CacheEntry) -> None:
        raise UsageError("an image is removed by name: `pylint-sandbox cache remove-image REF`")


#: Every kind `cache` knows, by the name `--kind` takes, in the order they are listed.
KINDS: dict[str, CacheKind] = {
    "deps": _DependencyCaches(),      # the dependencies' build, per lockfile (issue 12)
    "template": _Templates(),         # a booted, probed guest restored per run
    "rootfs": _RootFilesystems(),     # the image's flattened root, per manifest digest
    "build": _KeptBuilds(),           # a trusted tree's scratch disk kept by --keep-cache
    "cargo-view": _CargoViews(),      # the pinned crates a guest reads, per lockfile
    "image-build": _ImageBuilds(),    # the layout `image build` keeps, per toolchain and options
    "image": _Images(),               # a provisioned image in the store: listed, never pruned
}
#: The kinds `prune` takes: every one derived, rebuilt when missing (an image is fetched).
PRUNABLE = tuple(name for name in KINDS if name != "image")


def collect(kinds: Sequence[str] = ()) -> list[CacheEntry]:
    """The entries of `kinds` (all when empty), kind by kind in KINDS' order."""
    chosen = [name for name in KINDS if not kinds or name in kinds]
    return [entry for name in chosen for entry in KINDS[name].entries()]


@dataclass
class Pruned:
    """What `prune` removed (or, dry, would remove) and what it kept because a run holds it."""

    removed: list[CacheEntry]
    in_use: list[CacheEntry]
    dry_run: bool

    @property
    def freed(self) -> int:
        return sum(entry.size for entry in self.removed)


def prune(*, older_than_days: float | None = None, max_size_mib: int | None = None,
          kinds: Sequence[str] = (), everything: bool = False, dry_run: bool = False,
          now: float | None = None) -> Pruned:
    """Remove the entries of `kinds` (all PRUNABLE when empty) last used more than
    `older_than_days` ago, then the least recently used until the rest fit in
    `max_size_mib`, or with `everything` all of them; never one whose lock is held.
    UsageError when no criterion is given or `everything` comes with one."""
    # lazy: see _DependencyCaches.entries
    from roteiro_py.locks import taken_if_free

    criteria = older_than_days is not None or max_size_mib is not None
    if not (criteria or everything):
        raise UsageError("`cache prune` needs a criterion: --older-than DAYS, --max-size MIB, "
                         "or --all (every cache no lint is using).",
                         hint="`pylint-sandbox cache list` shows each cache's size and last use; "
                              "--dry-run shows what a prune would remove.")
    if criteria and everything:
        raise UsageError("--all removes every cache: it cannot be combined with --older-than "
                         "or --max-size.")
    unknown = sorted(set(kinds) - KINDS.keys())
    if unknown:
        raise UsageError(f"Unknown cache kind: {', '.join(sanitise(kind) for kind in unknown)}.",
                         hint=f"Kinds: {', '.join(PRUNABLE)}.")
    if "image" in kinds:
        raise UsageError("`cache prune` removes derived caches only; a provisioned image is "
                         "removed by name: `pylint-sandbox cache remove-image REF`.",
                         hint="`pylint-sandbox cache list` shows each image's reference.")

    def remove(entry: CacheEntry) -> bool:
        kind = KINDS[entry.kind]
        with taken_if_free(kind.lock_path(entry)) as free:
            if free and not dry_run:
                kind.delete(entry)
            return free

    done = evict(collect(kinds or PRUNABLE), remove,
                 older_than_s=None if older_than_days is None else older_than_days * 86400,
                 max_bytes=None if max_size_mib is None else max_size_mib << 20,
                 everything=everything, now=now)
    return Pruned(done.removed, done.in_use, dry_run)


# -- the command's output ------------------------------------------------------------


def size_text(size: int) -> str:
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{size} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def when_text(moment: float, now: float) -> str:
    """A last use as local time and age: `2025-01-31 14:02 (3 days ago)`."""
    age = max(now - moment, 0.0)
    if age < 60:
        ago = "just now"
    elif age < 3600:
        ago = f"{int(age // 60)} min ago"
    elif age < 86400:
        ago = f"{int(age // 3600)} h ago"
    else:
        days = int(age // 86400)
        ago = f"{days} day{'s' if days != 1 else ''} ago"
    return f"{time.strftime('%Y-%m-%d %H:%M', time.localtime(moment))} ({ago})"


def _columns(rows: list[list[str]]) -> list[str]:
    """The rows as aligned text columns (the last one, a path, is not padded)."""
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]) - 1)]
    return ["  ".join([*(cell.ljust(width) for cell, width in zip(row[:-1], widths, strict=True)),
                       row[-1]]).rstrip() for row in rows]


#: What `cache list` says of an entry no lint recorded a use of.
UNRECORDED = "no use recorded: last used is its mtime"
UNRECORDED_IMAGE = "no use recorded: last used is when it was provisioned"


def _row(entry: CacheEntry, now: float) -> list[str]:
    shown = entry.reference if entry.reference is not None else str(entry.path)
    used = "never" if entry.last_used <= 0 else when_text(entry.last_used, now)
    return [KINDS[entry.kind].label, entry.key[:16], size_text(entry.size), used,
            sanitise(shown)]


def _notes(entry: CacheEntry) -> list[str]:
    out = []
    if entry.note is not None:
        first = entry.note.strip().splitlines()[0] if entry.note.strip() else ""
        out.append(sanitise(first, limit=REASON_CHARS))
    if not entry.recorded:
        out.append(UNRECORDED_IMAGE if entry.kind == "image" else UNRECORDED)
    return out


def _roots() -> str:
    return f"{sanitise(str(paths.cache_root()))} and {sanitise(str(paths.store_root()))}"


def list_text(entries: Sequence[CacheEntry], now: float) -> str:
    root = _roots()
    if not entries:
        return f"no caches under {root}\n"
    lines = _columns([["kind", "key", "size", "last used", "path"],
                      *(_row(entry, now) for entry in entries)])
    out = [lines[0]]
    for line, entry in zip(lines[1:], entries, strict=True):
        out.append(line)
        out.extend(f"    {note}" for note in _notes(entry))
    total = sum(entry.size for entry in entries)
    out.append(f"total: {len(entries)} cache{'s' if len(entries) != 1 else ''}, "
               f"{size_text(total)}, under {root}")
    return "\n".join(out) + "\n"


def list_json(entries: Sequence[CacheEntry]) -> str:
    def iso(moment: float) -> str:
        return datetime.fromtimestamp(moment, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")

    document = {
        "cache_root": sanitise(str(paths.cache_root())),
        "store_root": sanitise(str(paths.store_root())),
        "entries": [{"kind": entry.kind, "label": KINDS[entry.kind].label, "key": entry.key,
                     "path": sanitise(str(entry.path)), "size_bytes": entry.size,
                     "reference": None if entry.reference is None else sanitise(entry.reference),
                     "last_used": None if entry.last_used <= 0 else iso(entry.last_used),
                     "last_used_recorded": entry.recorded,
                     "note": None if entry.note is None else sanitise(entry.note,
                                                                       keep_newlines=True)}
                    for entry in entries],
        "total_bytes": sum(entry.size for entry in entries),
    }
    return json.dumps(document, indent=2) + "\n"


def _kept_in_use(what: str, then: str, *, by: str | None = None) -> str:
    """What each command says of something it left because a run holds its lock:
    `kept <what>: in use[ by <by>] (its lock is held); <then> once that has finished`.
    `by` names the run where the caller says one (a prune and an image: a running lint);
    a root filesystem or VM template is held by a benchmark or `doctor --verify` too, an
    image-build layout by a build, so theirs name none."""
    holder = "" if by is None else f" by {by}"
    return f"kept {what}: in use{holder} (its lock is held); {then} once that has finished"


def prune_text(pruned: Pruned, now: float) -> str:
    did = "would remove" if pruned.dry_run else "removed"
    rows = [[did, *_row(entry, now)] for entry in pruned.removed]
    rows += [["in use", *_row(entry, now)] for entry in pruned.in_use]
    out = _columns(rows) if rows else ["nothing to remove"]
    if pruned.in_use:
        held = len(pruned.in_use)
        out.append(_kept_in_use(f"{held} cache{'s' if held != 1 else ''}", "prune again",
                                by="a running lint"))
    out.append(f"{'would free' if pruned.dry_run else 'freed'} {size_text(pruned.freed)} "
               f"({len(pruned.removed)} cache{'s' if len(pruned.removed) != 1 else ''})")
    return "\n".join(out) + "\n"


def _write(text: str, *, json_output: bool = False) -> None:
    sys.stdout.write(guard(text, json=json_output))


def run_list(*, format: str = "human", kinds: Sequence[str] = ()) -> int:
    """`cache list`: every cache, one line each, and a total (human), or a JSON document."""
    entries = collect(kinds)
    if format == "json":
        _write(list_json(entries), json_output=True)
    else:
        _write(list_text(entries, time.time()))
    return 0


@dataclass
class ImageRemoved:
    """What `remove-image` removed: the image (store/layout.py ImageRemoval), the root
    filesystems built from it, and those kept because a run holds them."""

    image: ImageRemoval
    rootfs_removed: list[Path]
    rootfs_in_use: list[Path]
    templates_removed: list[Path]
    templates_in_use: list[Path]


def remove_image(reference: str) -> ImageRemoved:
    """Remove the provisioned image `reference` (Store.remove_image: its index entry, then
    the blobs no other image uses, never while a lint holds it), then each root filesystem
    built from one of its manifests that no other image has, and each VM template booted
    from one (template.origin), unless a run holds it (a benchmark or `doctor --verify`
    can, without the image: it goes at a later prune). A template built before templates
    said their root filesystem is keyed on that file's identity, so no run restores it
    again: `cache prune` or its own sweep removes it."""
    # lazy: see _DependencyCaches.entries
    from roteiro_py.locks import taken_if_free
    from roteiro_py.store import Store
    from roteiro_py.vm.disks.rootfs_record import discard, lock_path
    from roteiro_py.vm.qemu import template

    removal = Store.default().remove_image(reference)
    removed, in_use = [], []
    names = {f"{digest.partition(':')[2]}.ext4" for digest in removal.digests}
    templates: list[Path] = []
    templates_held: list[Path] = []
    root = template.templates_root()
    for key, path, _ in _scan(root, _Templates._NAME, directories=True):
        if template.origin(path) in names:
            (templates if template.discard_if_free(root, key) else templates_held).append(path)
    for digest in sorted(removal.digests):
        image = paths.cache_root() / "rootfs" / f"{digest.partition(':')[2]}.ext4"
        if not os.path.lexists(image):
            continue
        with taken_if_free(lock_path(image)) as free:
            if free:
                discard(image)
                removed.append(image)
            else:
                in_use.append(image)
    return ImageRemoved(removal, removed, in_use, templates, templates_held)


def remove_text(done: ImageRemoved) -> str:
    image = done.image
    out = [f"removed image {sanitise(image.reference)}: {image.blobs_removed} "
           f"blob{'s' if image.blobs_removed != 1 else ''} no other image uses, "
           f"{size_text(image.freed)} freed"]
    if image.blobs_kept_reason is not None:
        out.append(f"    {sanitise(image.blobs_kept_reason)}")
    out += [f"removed root filesystem {sanitise(str(path))}" for path in done.rootfs_removed]
    out += [_kept_in_use(f"root filesystem {sanitise(str(path))}",
                         "`pylint-sandbox cache prune --kind rootfs` removes it")
            for path in done.rootfs_in_use]
    out += [f"removed VM template {sanitise(str(path))}" for path in done.templates_removed]
    out += [_kept_in_use(f"VM template {sanitise(str(path))}",
                         "`pylint-sandbox cache prune --kind template` removes it")
            for path in done.templates_in_use]
    return "\n".join(out) + "\n"


def run_remove_image(*, reference: str) -> int:
    """`cache remove-image REF`: remove one provisioned image and what was built from it."""
    _write(remove_text(remove_image(reference)))
    return 0


def built_reference(layout: Path) -> ImageReference | None:
    """The pinned reference the image-build layout at `layout` built, as its record
    (image/build.py INPUTS_FILE, written in the same rename as the layout) says; None when
    the record is missing, not a regular file, larger than RECORD_MAX_BYTES (image/build.py),
    not JSON or names no pinned reference (such a layout is never reused: a build with it
    builds again).
    A CI cache brings the record back as whoever saved it wrote it, so it comes through the
    one bounded reader (untrusted.read_bounded) and the one reference parser: a record
    nested past json's recursion limit raised RecursionError (exit 4) here, and a digest
    after a name that is no image's (`@sha256:...`, a terminal escape) was believed."""
    # lazy: see _DependencyCaches.entries
    from roteiro_py.image.build import INPUTS_FILE, RECORD_MAX_BYTES

    try:
        document = json.loads(read_bounded(layout / INPUTS_FILE, RECORD_MAX_BYTES))
        text = document.get("reference") if isinstance(document, dict) else None
        reference = parse(text) if isinstance(text, str) else None
    except (OSError, FileRefused, ValueError, RecursionError, MalformedReference):
        return None
    return reference if reference is not None and reference.pinned else None


@dataclass
class KeptOnly:
    """What `remove-image --all-except` did: the image kept (its stored reference), each
    other image removed (with what went with it) or kept because a run holds it, and each
    image-build layout removed or kept (the one that built the kept image; one a build holds)."""

    kept: str
    kept_layouts: list[Path]
    images_removed: list[ImageRemoved]
    images_in_use: list[str]
    layouts_removed: list[Path]
    layouts_in_use: list[Path]


def remove_all_except(reference: str) -> KeptOnly:
    """Keep the provisioned image `reference` (as remove_image names one) and the
    image-build layout that built it; remove every other provisioned image (remove_image:
    its blobs the kept image does not use, its root filesystems and VM templates) and every
    other image-build layout. A layout is tied to the image it built by its record's
    pinned reference (built_reference): the same manifest digest as the kept image's; a
    layout whose record cannot be read is no image's and goes. Nothing a running lint (or
    build) holds goes: it is reported. ImageNotInStore, before anything is removed, when
    `reference` is not provisioned."""
    # lazy: see _DependencyCaches.entries
    from roteiro_py.locks import taken_if_free
    from roteiro_py.store import Store

    store = Store.default()
    kept = store.named(reference)
    digest = kept.descriptor.digest
    removed: list[ImageRemoved] = []
    in_use: list[str] = []
    for other in store.references():
        if other.name == kept.name and other.descriptor.digest == digest:
            continue
        try:
            removed.append(remove_image(other.name))
        except ImageInUse:
            in_use.append(other.name)
        except ImageNotInStore:
            continue  # removed by another command meanwhile
    builds = KINDS["image-build"]
    kept_layouts: list[Path] = []
    layouts_removed: list[Path] = []
    layouts_in_use: list[Path] = []
    for entry in builds.entries():
        built = built_reference(entry.path)
        if built is not None and built.digest == digest:
            kept_layouts.append(entry.path)
            continue
        with taken_if_free(builds.lock_path(entry)) as free:
            if free:
                builds.delete(entry)
                layouts_removed.append(entry.path)
            else:
                layouts_in_use.append(entry.path)
    return KeptOnly(kept.name, kept_layouts, removed, in_use, layouts_removed, layouts_in_use)


def kept_only_text(done: KeptOnly) -> str:
    out = [remove_text(image).rstrip("\n") for image in done.images_removed]
    out += [_kept_in_use(f"image {sanitise(name)}",
                         "`pylint-sandbox cache remove-image` removes it", by="a running lint")
            for name in done.images_in_use]
    out += [f"removed image build {sanitise(str(path))}" for path in done.layouts_removed]
    out += [_kept_in_use(f"image build {sanitise(str(path))}",
                         "`pylint-sandbox cache prune --kind image-build` removes it")
            for path in done.layouts_in_use]
    out.append(f"kept image {sanitise(done.kept)}" + "".join(
        f" and the image build {sanitise(str(path))}" for path in done.kept_layouts))
    return "\n".join(out) + "\n"


def run_remove_all_except(*, reference: str) -> int:
    """`cache remove-image --all-except REF`: keep one provisioned image and its build."""
    _write(kept_only_text(remove_all_except(reference)))
    return 0


def run_prune(*, older_than_days: float | None, max_size_mib: int | None, kinds: Sequence[str],
              everything: bool, dry_run: bool) -> int:
    """`cache prune`: remove what matches, say what went, what stayed in use, what was freed."""
    now = time.time()
    pruned = prune(older_than_days=older_than_days, max_size_mib=max_size_mib, kinds=kinds,
                   everything=everything, dry_run=dry_run, now=now)
    _write(prune_text(pruned, now))
    return 0
