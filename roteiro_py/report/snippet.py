"""Source lines for a finding, read from the host's copy of the tree, bounded.

The guest's own copy of a line (rustc's `spans[].text`) is not used: the guest decides
what it says. The host copy is what the user has and what GitHub will show. The path
came from the guest, so it is confined here: it must resolve (symlinks included) to a
regular file inside the repository root, or no snippet is read. A FIFO or a device
would block or never end, and a symlink to ~/.ssh/id_rsa would put the key in a report.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

#: A snippet shows at most this many lines of at most this many characters each.
MAX_LINES = 5
MAX_LINE_CHARS = 400
#: Reading stops after this many bytes of the file, however far the line is.
MAX_READ_BYTES = 8 * 1024 * 1024


def read_snippet(repo_root: Path, path: str, line: int, end_line: int | None = None) -> str | None:
    """Return lines `line`..`end_line` (1-based, at most MAX_LINES) of `path`, or None.

    None when the path leaves the repository, is not a regular file, or the lines are
    not there (the host copy differs from what the guest linted).
    """
    if line < 1:
        return None
    last = min(max(end_line or line, line), line + MAX_LINES - 1)
    root = repo_root.resolve()
    try:
        target = (root / path).resolve(strict=True)
    except (OSError, RuntimeError):
        return None
    if not target.is_relative_to(root):
        return None
    try:
        fd = os.open(target, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return None
    lines: list[str] = []
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            return None
        consumed = 0
        for number, raw in enumerate(handle, start=1):
            consumed += len(raw)
            if consumed > MAX_READ_BYTES:
                return None
            if number >= line:
                text = raw.decode("utf-8", errors="replace").rstrip("\r\n")
                lines.append(text[:MAX_LINE_CHARS])
            if number >= last:
                break
    if len(lines) != last - line + 1:
        return None
    return "\n".join(lines)
