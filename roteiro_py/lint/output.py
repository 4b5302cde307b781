"""Where the report goes: written atomically, never through a link the tree planted."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from roteiro_py import paths
from roteiro_py.errors import UsageError


def write_output(output: Path, text: str) -> None:
    """Put the report at `output`, or refuse naming it (UsageError) if that fails.

    A regular file (or a new name) gets the report beside it, renamed into place: a run
    that fails while writing (disk full, interrupted) never leaves a half-written report
    behind; an existing file keeps its mode (a private 0600 report once became 0644).
    A character device or a FIFO named directly (`--output /dev/null`) is written through,
    never renamed over: as root, that once replaced the device with a file.

    A link is written through only when it leads to this process's own stdout or stderr
    or to /dev/null (`--output /dev/stdout`); any other link is replaced by the report.
    The tree under review can commit `clippy.sarif -> ../../.bashrc` (or a link to a
    device or a daemon's FIFO), and a CI step writing `--output clippy.sarif` in the
    checkout would otherwise write text the guest chose into a host file. A failure (a
    sticky directory's file of another user, ENOSPC) is reported as this path's problem;
    after a whole lint it used to be an OSError, exit 4."""
    try:
        try:
            existing: os.stat_result | None = os.lstat(output)
        except FileNotFoundError:
            existing = None
        if existing is not None and stat.S_ISLNK(existing.st_mode):
            try:
                final: os.stat_result | None = os.stat(output)
            except OSError:
                final = None  # dangling: the link itself is replaced below
            if final is not None and _own_stream(final):
                _write_into(output, text, final)
                return
            existing = None  # the link is replaced by a new file with the default mode
        elif existing is not None and (stat.S_ISCHR(existing.st_mode) or stat.S_ISFIFO(existing.st_mode)):
            _write_into(output, text, existing)
            return
        elif existing is not None and not stat.S_ISREG(existing.st_mode):
            raise UsageError(f"--output {output} is neither a regular file, a character device "
                             "nor a FIFO.", hint="Name a file to write the report to.")
        mode = stat.S_IMODE(existing.st_mode) if existing else 0o644 & ~_umask()
        paths.replace_file(output, text.encode("utf-8"), mode)
    except OSError as error:
        raise UsageError(
            f"--output {output}: the report could not be written "
            f"({error.strerror or error}).",
            hint="The lint ran; name a file you can write (with room for the report) and "
                 "run it again, or leave out --output to print the report.") from None


#: /dev/null's device number on Linux (major 1, minor 3).
_DEV_NULL = os.makedev(1, 3)


def _own_stream(st: os.stat_result) -> bool:
    """What a link may lead to and still be written through: /dev/null, or the file,
    pipe or terminal this process's stdout or stderr already is."""
    if stat.S_ISCHR(st.st_mode) and st.st_rdev == _DEV_NULL:
        return True
    for fd in (1, 2):
        try:
            own = os.fstat(fd)
        except OSError:
            continue
        if (own.st_dev, own.st_ino) == (st.st_dev, st.st_ino):
            return True
    return False


def _write_into(output: Path, text: str, checked: os.stat_result) -> None:
    """Write into what `output` names, never creating a file (no O_CREAT: a link swapped
    to a missing path fails) and only if the opened file is the one that was checked."""
    fd = os.open(output, os.O_WRONLY | os.O_NOCTTY | os.O_CLOEXEC)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        now = os.fstat(handle.fileno())
        if (now.st_dev, now.st_ino) != (checked.st_dev, checked.st_ino):
            raise UsageError(f"--output {output} changed while the report was written.",
                             hint="Name a file to write the report to.")
        if stat.S_ISREG(now.st_mode):
            handle.truncate(0)
        handle.write(text)


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
