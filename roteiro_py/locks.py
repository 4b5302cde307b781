"""Waiting for another run's lock, within this run's deadline.

The cargo view, a kept scratch disk, the root filesystem and a VM template are each built
or used under one file lock per key, so two runs never race. A run waits for another run
that holds the lock only as long as its own deadline leaves, then refuses with
DeadlineExceeded, naming what it waited for. At that point the VM has not started. The
four places wrote this wait and refusal out each. `taken_if_free` is the other way to ask:
what prunes a cache (depcache/store.py, cache_report.py) never waits for a running lint.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path

from filelock import FileLock, Timeout

from roteiro_py import errors


def acquire_within(path: Path, *, until: float | None, seconds: float, waiting_for: str) -> FileLock:
    """The lock at `path`, held; `until` (time.monotonic(), None: wait for ever) bounds the
    wait, and past it DeadlineExceeded("waiting for <waiting_for>", `seconds`). The caller
    releases it."""
    lock = FileLock(str(path), timeout=-1 if until is None else max(until - time.monotonic(), 0.0))
    try:
        lock.acquire()
    except Timeout:
        raise errors.DeadlineExceeded(f"waiting for {waiting_for}", seconds,
                                      stopped="the VM was not started") from None
    return lock


@contextlib.contextmanager
def taken_if_free(path: Path) -> Iterator[bool]:
    """The lock at `path`, taken for the block (True) when no run holds it; False at once
    when one does. What removes a cached thing asks this, never waits: a held lock is a
    running lint using or building the thing, which is then left alone (and said so)."""
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
