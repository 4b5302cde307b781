"""What a running job tells the host as it runs: which step began, which crate cargo checks.

machine.py's read loop hands every chunk of the status port and of the step streams to
`JobWatch.feed` as it arrives, before the guest has finished; the watch turns them into
`Progress` stages (the first step starting is the toolchain probe, cargo's is clippy: the
last one of a lint's job) and notes ("checking demo-core v0.1.0", from cargo's
`   Checking demo-core v0.1.0 (/path)` lines on the stderr of cargo's steps).

The clippy step's stderr is the guest's, and the guest is hostile: a line may be
megabytes long, hold escapes, or never end, and the stream may be 64 MB of newlines.
`LastLine` keeps at most `max_line` bytes of an unfinished line, looks at no more than the
first `max_line` bytes of any line and at no more than SEARCH_LINES lines per chunk, and
does its scanning with bytes methods (C loops), so a chunk costs the read loop a bounded
amount of work whatever it holds. The note it yields is raw; the renderer sanitises it and
cuts it to one short line (roteiro_py/progress.py). Only the latest line matters (a note
replaces the one before), so only the last matching line of a chunk is returned.
"""

from __future__ import annotations

from roteiro_py.progress import CLIPPY, TOOLCHAIN, Progress

#: Bytes kept of one line: an unfinished line is cut to this, and no line is read past it.
#: cargo's `Checking <name> v<version> (<path>)` fits well inside it.
MAX_LINE_BYTES = 512
#: Lines looked at per chunk, from its end, for the last one that matches.
SEARCH_LINES = 64
#: Blanks cargo puts before its status verb (right-aligned to 12 columns).
_BLANKS = b" \t"


class LastLine:
    """The last complete line of a stream starting (after blanks) with one of `prefixes`,
    with at most `max_line` bytes of it kept. CR, LF and CRLF all end a line."""

    def __init__(self, prefixes: tuple[bytes, ...], *, max_line: int = MAX_LINE_BYTES) -> None:
        self._prefixes = prefixes
        self._max = max_line
        self._tail = bytearray()  # the head of the unfinished line, at most max_line bytes

    @property
    def buffered(self) -> int:
        return len(self._tail)

    def feed(self, chunk: bytes) -> bytes | None:
        """The last matching line this chunk completes (stripped of blanks), or None."""
        end = max(chunk.rfind(b"\n"), chunk.rfind(b"\r"))
        if end < 0:
            room = self._max - len(self._tail)
            if room > 0:
                self._tail += chunk[:room]
            return None
        # The first line of `region` is the kept head of the unfinished line followed by
        # what this chunk adds to it; only its first max_line bytes are ever looked at.
        region = bytes(self._tail) + chunk[:end]
        self._tail = bytearray(chunk[end + 1:end + 1 + self._max])
        return self._last_match(region)

    def _last_match(self, region: bytes) -> bytes | None:
        # Bounded rsplits, LF then CR: C loops that stop after SEARCH_LINES lines. (Turning
        # CRs into LFs first cost 2.8 ms per 64 KiB of CRs with replace(), 0.4 ms per 64 KiB
        # of anything with translate(); an rsplit on a separator that is absent walks the
        # whole region byte by byte, 0.1 ms, where `in` (memchr) takes 1 us.) A piece left
        # over when a split hit its bound is never reached: the lines after it come first.
        if not any(prefix in region for prefix in self._prefixes):
            return None  # memmem: a chunk of newlines or noise costs microseconds, not a loop
        seen = 0
        for piece in reversed(_rsplit(region, b"\n", SEARCH_LINES)):
            for line in reversed(_rsplit(piece, b"\r", SEARCH_LINES - seen)):
                if seen == SEARCH_LINES:
                    return None
                seen += 1
                head = line[:self._max].lstrip(_BLANKS)
                if head.startswith(self._prefixes):
                    return head
        return None


def _rsplit(data: bytes, separator: bytes, bound: int) -> list[bytes]:
    return data.rsplit(separator, bound) if separator in data else [data]


def crate_note(line: bytes) -> str:
    """`   Checking demo-core v0.1.0 (/path)` as "checking demo-core v0.1.0"."""
    verb, _, what = line.decode("utf-8", "replace").strip().partition(" ")
    return f"{verb.lower()} {what.strip().split(' (', 1)[0]}".strip()


class JobWatch:
    """Turns a job's status port and its cargo steps' stderr into stages and notes.

    `steps` is how many steps the job has: the first starting is TOOLCHAIN (the probes),
    `cargo` (default: the last) is CLIPPY, the first step whose stderr names the crates;
    every step after it is read too. A dependency cache's build runs cargo once per
    selection and then its cleanup (lint/dep_cache.py): watching the last step there
    showed no crate for the whole 3-minute build. A status chunk may hold several
    `start N` lines; only the last is read, and TOOLCHAIN is still reported before CLIPPY
    when `start 0` was in it.
    """

    def __init__(self, progress: Progress, steps: int, cargo: int | None = None) -> None:
        self._progress = progress
        self._last = steps - 1
        self._cargo_step = self._last if cargo is None or not 0 <= cargo < steps else cargo
        self._stderr = {f"stderr{index}" for index in range(self._cargo_step, steps)}
        self._started = -1
        self._status = LastLine((b"start ",))
        self._cargo = LastLine((b"Checking ", b"Compiling "))

    def feed(self, channel: str, chunk: bytes) -> None:
        if channel == "status":
            line = self._status.feed(chunk)
            words = line.split() if line else []
            if len(words) == 2 and words[1].isdigit():
                self._step_started(int(words[1]))
        elif channel in self._stderr:
            # Only a step from cargo's on writes here, so cargo's has started, whichever
            # of the two sockets the read loop happened to serve first.
            self._step_started(self._cargo_step)
            line = self._cargo.feed(chunk)
            if line is not None:
                self._progress.note(crate_note(line))

    def _step_started(self, index: int) -> None:
        if index <= self._started or index > self._last:
            return
        if self._started < 0 and self._cargo_step > 0:
            self._progress.stage(TOOLCHAIN)
        if self._started < self._cargo_step <= index:  # a later step's start implies cargo's
            self._progress.stage(CLIPPY)
        self._started = index
