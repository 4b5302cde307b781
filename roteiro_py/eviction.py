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
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar


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
