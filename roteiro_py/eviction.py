"""Which cached things go: the least recently used first, never one in use.

One policy for the dependency caches' size cap (depcache/store.py, after each publish)
and for `pylint-sandbox cache prune` (commands/cache.py), so the two cannot disagree on
what "oldest" or "over the cap" means:

- by age: everything last used before `now - older_than_s`;
- by size: the oldest, one at a time, until what is left adds up to `max_bytes` or less
  (what is kept because it is in use or spared still counts: it takes the space);
- `everything`: all of it (the explicit `cache prune --all`).

Whether a thing is in use is only known by trying to take its lock, so `remove` does the
taking: it returns False when the lock is held (a running lint has it) and the thing is
left where it is and reported. A thing `spare` names is never offered to `remove` (the
dependency cache just published, which the run that built it is about to use).

Last use is recorded, never read off the entry's own times (`record_use`, `recorded_use`):
a lint writes `<entry>.used` beside each cache it uses (the image, its root filesystem, a
VM template, a dependency cache, a cargo view), holding the epoch seconds of that use. An
entry's access time was the old measure, and it is wrong under Linux's default relatime
(updated at most once a day: a root filesystem booted minutes ago looked a day old, and
`cache prune --max-size` took it before one unused for hours), never updated under
noatime, and set back by any `os.utime` or archive restore. An entry without a record
(made before records, or by hand) falls back to its mtime, and `cache list` says so.
"""

from __future__ import annotations

import contextlib
import math
import os
import stat
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Generic, Protocol, TypeVar

from roteiro_py.paths import replace_file

#: What `record_use` writes after an entry's name: `<key>.ext4.used`, `<key>.used`.
USED_SUFFIX = ".used"
#: A record is one number and a newline; anything longer is not one of ours.
MAX_USED_BYTES = 32
#: A record further ahead of the clock than this is not believed (it would keep its entry
#: from ever being the least recently used): the entry falls back to its mtime.
FUTURE_SLACK_S = 86400.0


class Evictable(Protocol):
    """What the policy reads of a cached thing: allocated bytes and last use (epoch s)."""

    @property
    def size(self) -> int: ...

    @property
    def last_used(self) -> float: ...


T = TypeVar("T", bound=Evictable)


@dataclass
class Eviction(Generic[T]):
    """What was removed (oldest first) and what would have been but is in use."""

    removed: list[T] = field(default_factory=list)
    in_use: list[T] = field(default_factory=list)

    @property
    def freed(self) -> int:
        return sum(item.size for item in self.removed)


def evict(items: Iterable[T], remove: Callable[[T], bool], *, older_than_s: float | None = None,
          max_bytes: int | None = None, everything: bool = False,
          spare: Callable[[T], bool] = lambda _: False, now: float | None = None) -> Eviction[T]:
    """Offer `remove` each item the criteria select, least recently used first."""
    now = time.time() if now is None else now
    cutoff = None if older_than_s is None else now - older_than_s
    ordered = sorted(items, key=lambda item: item.last_used)
    total = sum(item.size for item in ordered)
    done: Eviction[T] = Eviction()
    for item in ordered:
        old = cutoff is not None and item.last_used < cutoff
        over = max_bytes is not None and total > max_bytes
        if not (everything or old or over) or spare(item):
            continue
        if remove(item):
            done.removed.append(item)
            total -= item.size
        else:
            done.in_use.append(item)
    return done


def used_record(entry: Path) -> Path:
    """Where the last use of `entry` (a file or a directory) is recorded: beside it."""
    return entry.with_name(entry.name + USED_SUFFIX)


def record_use(record: Path, now: float | None = None) -> None:
    """Record a use now at `record` (`used_record(entry)`, or a kind's own name): replaced whole (a temporary
    renamed over it: a reader sees the old record or the new, never half; a link there is
    replaced, never followed). Best effort: a lint is not refused because its record could
    not be written (a full disk), the entry then keeps its older last use."""
    moment = time.time() if now is None else now
    with contextlib.suppress(OSError):
        record.parent.mkdir(parents=True, exist_ok=True)
        replace_file(record, f"{moment:.3f}\n".encode(), 0o644)


def recorded_use(record: Path, now: float | None = None) -> float | None:
    """The last use recorded at `record` (epoch seconds), or None when there is no record
    to believe: none, a link or not a regular file, longer than MAX_USED_BYTES, not a
    finite number, or more than FUTURE_SLACK_S ahead of `now`. An empty record (the
    dependency caches' before this module wrote them) is its own mtime."""
    now = time.time() if now is None else now
    try:
        fd = os.open(record, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_USED_BYTES:
            return None
        data = os.read(fd, MAX_USED_BYTES + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    try:
        moment = float(data.decode("ascii")) if data.strip() else st.st_mtime
    except (UnicodeDecodeError, ValueError):
        return None
    if not math.isfinite(moment) or moment < 0 or moment > now + FUTURE_SLACK_S:
        return None
    return moment


def last_use(record: Path, fallback: float, now: float | None = None) -> tuple[float, bool]:
    """(last use, whether it was recorded): the one at `record`, else `fallback` (the
    entry's mtime)."""
    recorded = recorded_use(record, now)
    return (fallback, False) if recorded is None else (recorded, True)
