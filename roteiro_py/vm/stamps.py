"""The times a copied share's entries carry in the guest, decided by content, never by
when the copy was made.

Why: cargo calls a path package's source stale when its mtime is newer than the dep-info
its last build wrote (with the guest's clock). The worktree is copied per run
(vm/disks/share_image.py), and a copy carrying the copy's own time has every member
rebuilt on every warm run (`CARGO_LOG=cargo::core::compiler::fingerprint=info`:
`stale: changed ".../src/lib.rs"`, the only dirty reason; kept times brought the warm
clippy step of the demo workspace from 9.5 s to 1.9 s).

The rule (a `StampBook` per run, one generation T):
- Every entry of the copy is stamped explicitly, in whole seconds (`mkfs.ext4 -d` keeps
  whole seconds only: measured with e2fsprogs 1.47.0, nanoseconds are dropped; files,
  directories and symlinks keep their seconds, the image's root directory gets mkfs's
  own time, or E2FSPROGS_FAKE_TIME, which share_image sets to the root's stamp).
- An entry whose digest (a file's sha256, computed from the very bytes copied; a
  directory's sorted listing; a link's target text) equals the previous run's keeps the
  previous stamp; a new or changed entry gets T. Content decides, so an edit that keeps
  the size and restores the mtime (os.utime) is still seen.
- A new or changed symbolic link restamps the whole share with T: cargo reads a source's
  mtime through links, so a link retargeted at an unchanged file would show that file's
  old stamp and the change would be missed. Links rarely change; a full rebuild is the
  price when they do.
- The guest's clock is set at boot to T + 1 (`clock`), so every dep-info the build writes
  is newer than every stamp, and the caller picks the next run's T past the guest's clock
  at the end of this one (lint/freshness.py), so what changes next is newer than every
  dep-info. A run with no previous book (a fresh scratch disk) is the same rule with
  nothing to keep: every entry gets T.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

#: What a book remembers of one entry: (digest, stamp in epoch seconds).
Entry = tuple[str, int]
#: The digest prefixes of entries that are not regular files (a file's is bare hex): a
#: file whose bytes happen to spell a directory's listing is still a different entry.
DIR_DIGEST = "dir:"
LINK_DIGEST = "link:"
#: The key of a share's root directory (other directories' keys end in "/").
ROOT_KEY = "./"


@dataclass
class ShareStamps:
    """The stamps of one share's copy: `stamp` is asked once per copied entry."""

    generation: int
    previous: dict[str, Entry]
    seen: dict[str, Entry] = field(default_factory=dict)
    #: A link is new or changed: the copy restamps every entry with the generation.
    links_changed: bool = False

    def stamp(self, key: str, digest: str) -> int:
        """The whole-second time the entry `key` (relative path; directories end in "/")
        carries in the copy: the previous one when its digest is unchanged, else T."""
        before = self.previous.get(key)
        if before is not None and before[0] == digest:
            stamp = before[1]
        else:
            stamp = self.generation
            if digest.startswith(LINK_DIGEST):
                self.links_changed = True
        self.seen[key] = (digest, stamp)
        return stamp

    def restamp_all(self) -> None:
        """Record that every entry of the copy now carries the generation."""
        self.seen = {key: (digest, self.generation) for key, (digest, _) in self.seen.items()}


@dataclass
class StampBook:
    """The stamps of one run's copies, per share (keyed by the share's host path).

    `generation` is T: no previous stamp is T or newer (the caller guarantees it), so a
    changed entry is newer than anything built before. `clock` is what the guest's clock
    is set to at boot."""

    generation: int
    previous: dict[str, dict[str, Entry]] = field(default_factory=dict)
    shares: dict[str, ShareStamps] = field(default_factory=dict)

    @classmethod
    def fresh(cls, now: float | None = None) -> StampBook:
        """A book with nothing to keep: every entry gets ceil(now)."""
        return cls(generation=math.ceil(time.time() if now is None else now))

    @property
    def clock(self) -> int:
        return self.generation + 1

    def share(self, host: str) -> ShareStamps:
        if host not in self.shares:
            self.shares[host] = ShareStamps(self.generation, self.previous.get(host, {}))
        return self.shares[host]

    def seen(self) -> dict[str, dict[str, Entry]]:
        """What this run's copies carried, to be remembered for the next run."""
        return {host: dict(share.seen) for host, share in self.shares.items()}
