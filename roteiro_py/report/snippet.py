"""Source lines for a finding, read from the staged copy the guest linted, bounded.

The guest's own copy of a line (rustc's `spans[].text`) is not used: the guest decides
what it says. The path came from the guest too, and the host tree is not where it is
read: were the host to follow the link, a committed `leak.rs -> .git/config` would quote
a checkout token into a report, and `notes.rs -> ../../.ssh/id_ed25519` a private key
into SARIF. So:

- Snippets are read only from the staged copy of this run (vm/disks/share_image.py's
  output, kept until the report is built): the bytes the guest saw, never the host tree
  as it is now. What the copy left out (`.git`, a cargo `target/`) is not there to read.
- Every component is opened from the staged root with openat and O_NOFOLLOW, so no
  link is followed anywhere in the path (the copy keeps the tree's links as links); the
  file must be a regular file (a FIFO would block, a device never end).
- Each file is opened and read at most once per report, whatever the number of findings
  in it: 3,000 diagnostics at line 104,850 of an 8 MB file cost 73 s of host CPU when
  each finding re-read it. At most MAX_READ_BYTES of a file and MAX_TOTAL_BYTES over all files
  are read; past them there is no snippet.
- What is kept of a file is its bytes and one newline count per _BLOCK bytes, never one
  object per line: a file of `ab\n` lines kept as a list of lines held ~19x the bytes
  read (8 such files, 1.2 GB of host memory for the 64 MiB budget).
"""

from __future__ import annotations

import os
import stat
from array import array
from bisect import bisect_left
from pathlib import Path, PurePosixPath

#: A snippet shows at most this many lines of at most this many characters each.
MAX_LINES = 5
MAX_LINE_CHARS = 400
#: Reading stops after this many bytes of the file, however far the line is.
MAX_READ_BYTES = 8 * 1024 * 1024
#: Bytes read for snippets per report, over all files; later files get no snippet.
MAX_TOTAL_BYTES = 64 * 1024 * 1024

#: Bytes per entry of a file's newline index: finding a line scans at most this much.
_BLOCK = 4096

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class SnippetReader:
    """Snippets of the files under `root`, each file read once (see the module docstring).

    `root` is a directory this run created (the staged workspace); it is opened as given.
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        #: Each path read so far (None: refused or unreadable).
        self._files: dict[str, _Lines | None] = {}
        self.files_read = 0
        self.bytes_read = 0

    def snippet(self, path: str, line: int, end_line: int | None = None) -> str | None:
        """Lines `line`..`end_line` (1-based, at most MAX_LINES) of `path`, or None.

        `path` is relative to `root`. None when it leads through a link, names anything
        but a regular file, lies outside the copy, or the lines are not there.
        """
        if line < 1:
            return None
        last = min(max(end_line or line, line), line + MAX_LINES - 1)
        if path not in self._files:
            self._files[path] = self._read(path)
        lines = self._files[path]
        if lines is None or last > lines.count:
            return None
        return "\n".join(lines.line(number).rstrip(b"\r").decode("utf-8", errors="replace")
                         [:MAX_LINE_CHARS] for number in range(line, last + 1))

    def _read(self, path: str) -> _Lines | None:
        parts = PurePosixPath(path).parts
        if not parts or any(part in ("", ".", "..", "/") for part in parts):
            return None
        room = min(MAX_READ_BYTES, MAX_TOTAL_BYTES - self.bytes_read)
        if room <= 0:
            return None
        fds: list[int] = []
        try:
            fds.append(os.open(self.root, _DIR_FLAGS))
            for part in parts[:-1]:
                fds.append(os.open(part, _DIR_FLAGS, dir_fd=fds[-1]))
            fds.append(os.open(parts[-1], _FILE_FLAGS, dir_fd=fds[-1]))
            if not stat.S_ISREG(os.fstat(fds[-1]).st_mode):
                return None
            self.files_read += 1
            data = bytearray()
            while len(data) < room and (chunk := os.read(fds[-1], min(1 << 20, room - len(data)))):
                data += chunk
        except (OSError, ValueError, UnicodeError):  # a link, a NUL, a lone surrogate
            return None
        finally:
            for fd in fds:
                os.close(fd)
        self.bytes_read += len(data)
        return _Lines(bytes(data), cut=len(data) >= room)


class _Lines:
    """The lines of one file's bytes, found on demand through a sparse newline index.

    `_before[i]` is the number of newlines in the first `i * _BLOCK` bytes: the index
    costs 8 bytes per _BLOCK bytes, and a line is found by bisecting it and then scanning
    one block, whatever the line's number.
    """

    def __init__(self, data: bytes, *, cut: bool) -> None:
        self._data = data
        self._before = array("q", [0])
        for start in range(0, len(data), _BLOCK):
            self._before.append(self._before[-1] + data.count(b"\n", start, start + _BLOCK))
        newlines = self._before[-1]
        # A last line cut at the bound is not shown; nothing follows a final newline.
        self.count = newlines if cut or not data or data.endswith(b"\n") else newlines + 1

    def _newline(self, nth: int) -> int:
        """The offset of the `nth` (1-based) newline; there are at least `nth`."""
        block = bisect_left(self._before, nth) - 1
        position = block * _BLOCK - 1
        for _ in range(nth - self._before[block]):
            position = self._data.find(b"\n", position + 1)
        return position

    def line(self, number: int) -> bytes:
        """Line `number` (1-based, at most `count`) without its newline."""
        start = 0 if number == 1 else self._newline(number - 1) + 1
        end = self._newline(number) if number <= self._before[-1] else len(self._data)
        return self._data[start:end]


def read_snippet(root: Path, path: str, line: int, end_line: int | None = None) -> str | None:
    """One snippet from a fresh reader (for a single lookup; a report shares one reader)."""
    return SnippetReader(root).snippet(path, line, end_line)
