"""`pylint-sandbox cache list|prune`: what a lint keeps under $ROTEIRO_HOME/cache, and
removing it by age or size without pulling anything from under a running lint.

Every cache here is derived (rebuilt when missing), and each kind keeps its own layout,
made by the module named beside it in KINDS. A kind says what its entries are (key,
allocated bytes, last use, path), which lock a run holds while it builds or uses one,
and how one is deleted once that lock is taken:

- a removal takes the entry's lock without waiting (locks.taken_if_free); a held lock is
  a running lint, and the entry is kept and reported as in use;
- what goes is chosen by roteiro_py/eviction.py, the policy the dependency caches' size
  cap uses too: least recently used first;
- `prune` with no criterion is a usage error, never "everything": `--all` says that.

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
import stat
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol

from roteiro_py import paths
from roteiro_py.errors import UsageError
from roteiro_py.eviction import evict
from roteiro_py.untrusted import guard, sanitise

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
    size is everything under the directory, the last use its mtime."""
    found = []
    for key, path, st in _scan(root, name, directories=True):
        size, complete = _tree_bytes(path)
        found.append(CacheEntry(kind, key, path, size, st.st_mtime, _partial(complete)))
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
    """vm/qemu/template.py: `vm-templates/<key>/`, last use its mtime (set by each restore)."""

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
    """vm/disks/rootfs.py: `rootfs/<manifest hex>.ext4` sealed by rootfs_record.py. Nothing
    records a boot, so the last use is the image's access time (a boot reads it; Linux's
    default relatime updates it at most once a day, a noatime mount never: then it is the
    build), or its mtime when later."""

    label = "root filesystem"
    _NAME = re.compile(r"([0-9a-f]{64})\.ext4")

    def entries(self) -> list[CacheEntry]:
        return [CacheEntry("rootfs", key, path, st.st_blocks * 512, max(st.st_atime, st.st_mtime))
                for key, path, st in _scan(paths.cache_root() / "rootfs", self._NAME,
                                           directories=False)]

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


#: Every kind `cache` knows, by the name `--kind` takes, in the order they are listed.
KINDS: dict[str, CacheKind] = {
    "deps": _DependencyCaches(),      # the dependencies' build, per lockfile (issue 12)
    "template": _Templates(),         # a booted, probed guest restored per run
    "rootfs": _RootFilesystems(),     # the image's flattened root, per manifest digest
    "build": _KeptBuilds(),           # a trusted tree's scratch disk kept by --keep-cache
    "cargo-view": _CargoViews(),      # the pinned crates a guest reads, per lockfile
}


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
    """Remove the entries of `kinds` (all when empty) last used more than
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
                         hint=f"Kinds: {', '.join(KINDS)}.")

    def remove(entry: CacheEntry) -> bool:
        kind = KINDS[entry.kind]
        with taken_if_free(kind.lock_path(entry)) as free:
            if free and not dry_run:
                kind.delete(entry)
            return free

    done = evict(collect(kinds), remove,
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


def _row(entry: CacheEntry, now: float) -> list[str]:
    return [KINDS[entry.kind].label, entry.key[:16], size_text(entry.size),
            when_text(entry.last_used, now), sanitise(str(entry.path))]


def _note(entry: CacheEntry) -> str | None:
    if entry.note is None:
        return None
    first = entry.note.strip().splitlines()[0] if entry.note.strip() else ""
    return sanitise(first, limit=REASON_CHARS)


def list_text(entries: Sequence[CacheEntry], now: float) -> str:
    root = sanitise(str(paths.cache_root()))
    if not entries:
        return f"no caches under {root}\n"
    lines = _columns([["kind", "key", "size", "last used", "path"],
                      *(_row(entry, now) for entry in entries)])
    out = [lines[0]]
    for line, entry in zip(lines[1:], entries, strict=True):
        out.append(line)
        note = _note(entry)
        if note is not None:
            out.append(f"    {note}")
    total = sum(entry.size for entry in entries)
    out.append(f"total: {len(entries)} cache{'s' if len(entries) != 1 else ''}, "
               f"{size_text(total)}, under {root}")
    return "\n".join(out) + "\n"


def list_json(entries: Sequence[CacheEntry]) -> str:
    def iso(moment: float) -> str:
        return datetime.fromtimestamp(moment, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")

    document = {
        "cache_root": sanitise(str(paths.cache_root())),
        "entries": [{"kind": entry.kind, "label": KINDS[entry.kind].label, "key": entry.key,
                     "path": sanitise(str(entry.path)), "size_bytes": entry.size,
                     "last_used": iso(entry.last_used),
                     "note": None if entry.note is None else sanitise(entry.note,
                                                                       keep_newlines=True)}
                    for entry in entries],
        "total_bytes": sum(entry.size for entry in entries),
    }
    return json.dumps(document, indent=2) + "\n"


def prune_text(pruned: Pruned, now: float) -> str:
    did = "would remove" if pruned.dry_run else "removed"
    rows = [[did, *_row(entry, now)] for entry in pruned.removed]
    rows += [["in use", *_row(entry, now)] for entry in pruned.in_use]
    out = _columns(rows) if rows else ["nothing to remove"]
    if pruned.in_use:
        out.append(f"kept {len(pruned.in_use)} in use by a running lint (its lock is held); "
                   "prune again once it has finished")
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


def run_prune(*, older_than_days: float | None, max_size_mib: int | None, kinds: Sequence[str],
              everything: bool, dry_run: bool) -> int:
    """`cache prune`: remove what matches, say what went, what stayed in use, what was freed."""
    now = time.time()
    pruned = prune(older_than_days=older_than_days, max_size_mib=max_size_mib, kinds=kinds,
                   everything=everything, dry_run=dry_run, now=now)
    _write(prune_text(pruned, now))
    return 0
