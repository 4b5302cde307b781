"""Why a warm re-lint (`--keep-cache`) is warm, and why it never lints stale code.

The kept scratch disk holds cargo's target directory; cargo trusts it for a path package
when no source is newer than the dep-info its last build wrote. The worktree's copy is
stamped by content (vm/stamps.py), and this module keeps, beside each kept disk, the
manifest those stamps come from: `<key>.manifest.json` =
{"version", "generation": T of the run that wrote it, "guest_clock": the guest's clock
when its steps were done, "shares": {host path: {relative path: [digest, stamp]}}}.

The rule that makes it sound, for every run:
- T = max(ceil(host now), previous T + 1, previous guest clock + 1). Every stamp any
  earlier run gave is at most its T, and every dep-info it wrote is at most its guest
  clock, so an entry that is new or changed now (stamped T) is newer than all of them:
  cargo rebuilds what reads it. An unchanged entry keeps its stamp, at most an earlier
  T, older than the dep-info of the build that read it (the guest's clock is set to T + 1
  at boot): cargo keeps that build. An edit made after the copy and before the guest's
  build is in no copy yet; the next run sees its digest differ from the manifest's
  (which records what was copied), and stamps it with that run's T.
- The manifest is removed as the run starts and written back, atomically, only after a
  run whose job completed (its init said "done" and reported its clock). A run that
  failed or was killed leaves no manifest, and a kept disk without a valid manifest is
  never trusted: it is discarded and made afresh (a killed build's dep-info may carry any
  time up to a clock nobody recorded).
- The manifest is ours, but read as if it were not: bounded (MANIFEST_MAX_BYTES), and any
  parse error, shape mismatch or implausible clock (more than CLOCK_AHEAD_S ahead of this
  host's, or a guest clock that ran faster than the host's by more than CLOCK_SLACK_S)
  means "absent": a fresh disk and a full build, never an exception.

A run that keeps no cache uses the same rule with an empty manifest: every entry gets T.
"""

from __future__ import annotations

import contextlib
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from roteiro_py import paths
from roteiro_py.untrusted import FileRefused, read_bounded
from roteiro_py.vm.stamps import StampBook

if TYPE_CHECKING:
    from roteiro_py.vm.stamps import Entry, StampBook

MANIFEST_VERSION = 1
#: A manifest past this size is ignored (a full build): 200,000 entries (stage_max_files'
#: default) of 200-character paths are ~60 MB of JSON.
MANIFEST_MAX_BYTES = 128 * 1024 * 1024
#: A recorded generation or guest clock further ahead of this host's clock than this is
#: not trusted (the host's clock went back, or the file is not what we wrote).
CLOCK_AHEAD_S = 3600
#: A guest clock may end at most this far past what the host's clock allows for the run:
#: under TCG the guest's clock runs slow (15-40 %, issue 11), never measured fast.
CLOCK_SLACK_S = 60
#: A digest is 64 hex digits behind a short kind prefix (vm/stamps.py).
_DIGEST_MAX = 80


def manifest_path(disk: Path) -> Path:
    """Where the manifest of the kept disk `<key>.ext4` lives: `<key>.manifest.json`."""
    return disk.with_suffix(".manifest.json")


@dataclass(frozen=True)
class Manifest:
    generation: int
    guest_clock: int
    shares: dict[str, dict[str, Entry]]


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _entries(value: Any, generation: int) -> dict[str, Entry] | None:
    if not isinstance(value, dict):
        return None
    entries: dict[str, Entry] = {}
    for key, entry in value.items():
        if not (isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], str)
                and len(entry[0]) <= _DIGEST_MAX):
            return None
        stamp = _int(entry[1])
        if stamp is None or stamp > generation:
            return None
        entries[key] = (entry[0], stamp)
    return entries


def read_manifest(path: Path, now: float | None = None) -> Manifest | None:
    """The manifest at `path`, or None (absent, damaged, oversized or implausible)."""
    now = time.time() if now is None else now
    try:
        data = read_bounded(path, MANIFEST_MAX_BYTES)
    except (OSError, FileRefused):
        return None
    try:
        parsed = json.loads(data)
    except (ValueError, RecursionError):
        return None
    if not isinstance(parsed, dict) or parsed.get("version") != MANIFEST_VERSION:
        return None
    generation, guest_clock = _int(parsed.get("generation")), _int(parsed.get("guest_clock"))
    shares = parsed.get("shares")
    if generation is None or guest_clock is None or not isinstance(shares, dict):
        return None
    ahead = math.ceil(now) + CLOCK_AHEAD_S
    if not generation < guest_clock <= ahead:
        return None
    kept: dict[str, dict[str, Entry]] = {}
    for host, value in shares.items():
        entries = _entries(value, generation)
        if entries is None:
            return None
        kept[host] = entries
    return Manifest(generation, guest_clock, kept)


def next_generation(previous: Manifest | None, now: float) -> int:
    """T for a run: past this host's clock, and past everything the previous run stamped
    or built (its T and its guest's clock)."""
    generation = math.ceil(now)
    if previous is not None:
        generation = max(generation, previous.generation + 1, previous.guest_clock + 1)
    return generation


def book_for(previous: Manifest | None, now: float | None = None) -> StampBook:
    """The run's stamp book: the previous run's stamps to keep, and this run's T."""
    now = time.time() if now is None else now
    return StampBook(generation=next_generation(previous, now),
                     previous=previous.shares if previous is not None else {})


def plausible_end(book: StampBook, guest_clock: int | None, host_seconds: float) -> bool:
    """Whether a guest clock reported at the end of a run that the host timed at
    `host_seconds` (from making the book) could have come from a clock set to
    `book.clock` at boot."""
    if guest_clock is None:
        return False
    return book.clock <= guest_clock <= book.clock + math.ceil(host_seconds) + CLOCK_SLACK_S


def forget(path: Path) -> None:
    """Remove the manifest: until a run completes and writes it back, the disk is untrusted."""
    with contextlib.suppress(FileNotFoundError):
        path.unlink()


def remember(path: Path, book: StampBook, guest_clock: int) -> None:
    """Write the manifest of a completed run, whole or not at all."""
    document = {"version": MANIFEST_VERSION, "generation": book.generation,
                "guest_clock": guest_clock,
                "shares": {host: {key: [digest, stamp] for key, (digest, stamp) in entries.items()}
                           for host, entries in book.seen().items()}}
    paths.replace_file(path, json.dumps(document, separators=(",", ":")).encode(), 0o600)
