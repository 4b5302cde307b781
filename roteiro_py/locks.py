"""The locks that keep a cache from changing under a run that uses it.

Every cache a lint reuses (the cargo view, the root filesystem, a VM template, the
dependency cache, a kept build) has one lock file per key beside it, and one rule:

- a run that USES an entry holds its lock SHARED from the check that finds it intact
  until its VM is done (`shared_within`, `held_shared`): lints of one image, lockfile or
  template run side by side, and a shared holder never blocks another's shared request;
- a run that BUILDS an entry (it is missing or damaged) holds the lock EXCLUSIVE
  (`acquire_within`), which waits for every run using it to finish;
- what REMOVES an entry (`cache prune`, a size cap, a sweep of stale entries) takes the
  lock exclusive without waiting (`taken_if_free`): a held lock is a running lint
  using or building the entry, which is then left alone and reported as in use.

Waits are bounded by the run's deadline, then DeadlineExceeded naming what was waited
for (the VM has not started). Nobody queues: a waiting builder polls, so lints arriving
after it still get their shared lock at once (a builder can therefore wait for as long
as lints keep overlapping, up to its own deadline). flock cannot turn a shared lock into
an exclusive one without letting go of it first (a failed non-blocking upgrade drops the
shared lock: Linux's flock_lock_inode removes the old lock before it looks for
conflicts), so a run that must build lets its shared lock go, builds under the exclusive
one, lets that go and takes the shared one again, checking the entry once more: a prune
may have removed it in between (`held_shared` then builds again, HOLD_ATTEMPTS times at
most).

Lock files are never removed, by anything: a run waiting on the file's inode while it
is unlinked and made again would hold a lock nobody else sees (the classic flock race).
They are empty, one per key ever used. `shared_within` still checks, once it holds the
lock, that the file it locked is the one at the path (as filelock does for the exclusive
lock: a zero link count), and locks again if not.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

from filelock import FileLock, Timeout

from roteiro_py import errors

#: How often a shared request asks again while a builder or a pruner holds the lock.
SHARED_POLL_S = 0.05
#: How many times `held_shared` builds an entry that is gone again before it holds it:
#: each time a prune removed it between the build and the shared lock. Past it,
#: errors.CacheContended.
HOLD_ATTEMPTS = 3
#: What a refusal says was cut short by a wait for a lock.
NOT_STARTED = "the VM was not started"

T = TypeVar("T")


def acquire_within(path: Path, *, until: float | None, seconds: float, waiting_for: str) -> FileLock:
    """The lock at `path`, held exclusive; `until` (time.monotonic(), None: wait for ever)
    bounds the wait, and past it DeadlineExceeded("waiting for <waiting_for>", `seconds`).
    The caller releases it."""
    lock = FileLock(str(path), timeout=-1 if until is None else max(until - time.monotonic(), 0.0))
    try:
        lock.acquire()
    except Timeout:
        raise errors.DeadlineExceeded(f"waiting for {waiting_for}", seconds,
                                      stopped=NOT_STARTED) from None
    return lock


def _same_file(fd: int, path: Path) -> bool:
    """Whether the locked descriptor is still the file at `path` (not unlinked, not
    replaced): a lock on an inode no longer named there protects nothing."""
    held = os.fstat(fd)
    if held.st_nlink == 0:
        return False
    try:
        return os.path.samestat(held, os.lstat(path))
    except FileNotFoundError:
        return False


@contextlib.contextmanager
def shared_within(path: Path, *, until: float | None, seconds: float,
                  waiting_for: str) -> Iterator[None]:
    """The lock at `path` held SHARED for the block (made when missing; a link there is
    refused, O_NOFOLLOW). Other shared holders come and go freely; an exclusive holder (a
    builder, a pruner) is waited for until `until` (time.monotonic(); None: for ever),
    then DeadlineExceeded("waiting for <waiting_for>", `seconds`)."""
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if until is not None and time.monotonic() >= until:
                        raise errors.DeadlineExceeded(f"waiting for {waiting_for}", seconds,
                                                      stopped=NOT_STARTED) from None
                    time.sleep(SHARED_POLL_S)
            if _same_file(fd, path):
                yield
                return
        finally:
            os.close(fd)  # releases the lock


@contextlib.contextmanager
def held_shared(path: Path, *, until: float | None, seconds: float, waiting_for: str,
                check: Callable[[], T | None], build: Callable[[], object],
                what: str, where: Path) -> Iterator[T]:
    """An entry of a cache, held SHARED (its lock at `path`) for the block, from the check
    that found it on: `check()` runs under the shared lock and returns the entry, or None
    when it is missing or damaged; then the shared lock is let go and `build()` runs (it
    takes the exclusive lock itself, and builds only if its own check under that lock
    still finds nothing), and the shared lock is taken and `check()` asked again. A
    `check` never removes anything (it holds the lock shared). Past HOLD_ATTEMPTS builds
    that a prune undid each time, errors.CacheContended naming `what` at `where`."""
    for _ in range(HOLD_ATTEMPTS):
        with shared_within(path, until=until, seconds=seconds, waiting_for=waiting_for):
            found = check()
            if found is not None:
                yield found
                return
        build()
    raise errors.CacheContended(what, where, HOLD_ATTEMPTS)


@contextlib.contextmanager
def taken_if_free(path: Path) -> Iterator[bool]:
    """The lock at `path`, taken exclusive for the block (True) when no run holds it,
    shared or exclusive; False at once when one does. What removes a cached thing asks
    this, never waits: a held lock is a running lint using or building the thing, which
    is then left alone (and said so). The lock file itself stays (see the module doc)."""
    lock = FileLock(str(path), timeout=0)
    try:
        lock.acquire()
    except Timeout:
        yield False
        return
    try:
        yield True
    finally:
        lock.release()
